// Package console is the operators' web console and the offline API
// reference: static assets embedded in the binary, served in front of the
// API. The console is a small vanilla-JS client of the public API; the
// assets hold no data, so they need no key (the API calls they make do).
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"strings"
)

//go:embed assets
var embedded embed.FS

// Prefix is where the assets are served.
const Prefix = "/console/"

// csp keeps the console to its own origin: scripts, styles and API calls
// from this server only, nothing fetched from elsewhere, no framing of the
// console. Its one frame is the table reader, from this server.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"frame-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"

// readerCSP is the table reader's (the console frames it sandboxed, so it
// runs in an opaque origin): its own script only, no requests; inline
// styles are allowed because the program-made HTML it parses has them (a
// parsed document applies no style, but the parse checks them).
const readerCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"form-action 'none'; base-uri 'none'; frame-ancestors 'self'"

// reader is the table reader's page.
const reader = "tables.html"

// docsCSP is the reference page's: Redoc injects its styles and runs its
// search in a worker made from a blob.
const docsCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; worker-src 'self' blob:; font-src 'self' data:; base-uri 'none'; frame-ancestors 'none'"

// Handler serves the console at / (to a browser asking for HTML), its
// assets under Prefix and the API reference at /docs; every other request
// goes to api.
func Handler(api http.Handler) http.Handler {
	assets, err := fs.Sub(embedded, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(assets))
	etags, err := hashes(assets)
	if err != nil {
		panic(err)
	}
	page := func(name, policy string) http.HandlerFunc {
		body, err := fs.ReadFile(assets, name)
		if err != nil {
			panic(err)
		}
		return func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Content-Security-Policy", policy)
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Referrer-Policy", "no-referrer")
			w.Write(body)
		}
	}
	index, docs, tables := page("index.html", csp), page("docs.html", docsCSP), page(reader, readerCSP)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		get := r.Method == http.MethodGet || r.Method == http.MethodHead
		if r.URL.Path == "/" {
			// The answer at / depends on Accept, for caches too.
			w.Header().Add("Vary", "Accept")
		}
		switch {
		case get && r.URL.Path == "/" && wantsHTML(r):
			index(w, r)
		case get && r.URL.Path == "/docs":
			docs(w, r)
		case get && r.URL.Path == Prefix+reader:
			tables(w, r)
		case get && strings.HasPrefix(r.URL.Path, Prefix) && etags[strings.TrimPrefix(r.URL.Path, Prefix)] != "":
			h := w.Header()
			h.Set("X-Content-Type-Options", "nosniff")
			// Revalidated every time, answered 304 while unchanged (the
			// file server honours If-None-Match against this ETag).
			h.Set("Cache-Control", "no-cache")
			h.Set("ETag", etags[strings.TrimPrefix(r.URL.Path, Prefix)])
			files.ServeHTTP(w, r)
		default:
			api.ServeHTTP(w, r)
		}
	})
}

// hashes maps every asset (files only: directories are not served, so
// anything else under Prefix gets the API's problem 404) to an ETag.
func hashes(assets fs.FS) (map[string]string, error) {
	etags := map[string]string{}
	err := fs.WalkDir(assets, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(assets, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		etags[name] = `"` + hex.EncodeToString(sum[:8]) + `"`
		return nil
	})
	return etags, err
}

// wantsHTML reports whether the client lists text/html among what it
// accepts (browsers do; API clients send application/json or nothing).
func wantsHTML(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		t, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && t == "text/html" && params["q"] != "0" {
			return true
		}
	}
	return false
}
