package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/host/api"
	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/console"
	"github.com/cyrnel/cyrnel/host/keys"
)

// serve runs the real API behind the console on loopback, with a key.
func serve(t *testing.T) *httptest.Server {
	t.Helper()
	h, _ := api.New(api.Deps{Keys: onlyKey{}})
	srv := httptest.NewServer(console.Handler(h))
	t.Cleanup(srv.Close)
	return srv
}

// onlyKey knows one key, k, an admin's; it only authenticates.
type onlyKey struct{ api.Keys }

func (onlyKey) Authenticate(_ context.Context, key string) (caller.Caller, error) {
	if key != "k" {
		return caller.Caller{}, keys.ErrUnknown
	}
	return caller.Caller{KeyID: "bootstrap", Roles: []caller.Role{caller.Admin}}, nil
}

func get(t *testing.T, url, accept string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestRootNegotiation(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	resp, body := get(t, srv.URL+"/", "text/html,application/xhtml+xml,*/*;q=0.8")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, "/console/app.js") {
		t.Fatalf("a browser asking / got %d %s:\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("console CSP = %q, want the API calls kept to this origin", csp)
	}
	// API clients keep today's answer at /: the API's own problem (here its
	// 401, as the key is missing), not the console.
	for _, accept := range []string{"", "application/json", "text/html;q=0"} {
		resp, body := get(t, srv.URL+"/", accept)
		if resp.Header.Get("Vary") != "Accept" {
			t.Errorf("Accept %q at /: Vary %q, want Accept", accept, resp.Header.Get("Vary"))
		}
		if resp.Header.Get("Content-Type") != "application/problem+json" || strings.Contains(body, "<html") {
			t.Errorf("Accept %q at /: %d %s %s, want the API's problem", accept, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}

// The assets hold no data: a browser loads them before it has the key.
// Everything else still needs it.
func TestAssetsNeedNoKey(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	for _, path := range []string{"/docs", "/console/app.js", "/console/app.css", "/console/vendor/redoc/redoc.standalone.js", "/console/vendor/redoc/LICENSE"} {
		if resp, _ := get(t, srv.URL+path, ""); resp.StatusCode != 200 {
			t.Errorf("GET %s without a key: %d, want 200", path, resp.StatusCode)
		}
	}
	if resp, _ := get(t, srv.URL+"/processes", "text/html"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /processes without a key: %d, want 401", resp.StatusCode)
	}
}

// Anything under the prefix that is not an asset (a directory, a missing
// file) is the API's problem 404: no listings, no plain-text errors.
func TestUnknownAssetIsProblem(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	for _, path := range []string{"/console/", "/console/vendor/", "/console/vendor", "/console/nope.js", "/console/../api-key"} {
		resp, body := get(t, srv.URL+path, "")
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s: %d %s %q, want a problem", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}

var reference = regexp.MustCompile(`(?i)\b(?:src|href|spec-url)="([^"]*)"`)

// The reference page and the console load nothing from another origin (a
// machine without internet shows them whole). huma's own /docs page, which
// this replaces, fetched its renderer from a CDN.
func TestPagesAreSelfContained(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	for _, page := range []string{"/docs", "/", "/console/tables.html"} {
		_, body := get(t, srv.URL+page, "text/html")
		refs := reference.FindAllStringSubmatch(body, -1)
		if len(refs) == 0 {
			t.Fatalf("%s references nothing:\n%s", page, body)
		}
		for _, m := range refs {
			ref := m[1]
			if strings.HasPrefix(ref, "data:") || strings.HasPrefix(ref, "#") {
				continue
			}
			if !strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "//") {
				t.Errorf("%s loads %q from elsewhere", page, ref)
				continue
			}
			if ref == "/docs" {
				continue
			}
			// The spec needs no key either.
			if resp, _ := get(t, srv.URL+ref, ""); resp.StatusCode != 200 {
				t.Errorf("%s references %s, which answers %d", page, ref, resp.StatusCode)
			}
		}
	}
}

// The vendored Redoc bundle was patched not to load its logo from
// cdn.redoc.ly; a re-vendored bundle must be patched again.
func TestRedocLoadsNoImageFromElsewhere(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	_, body := get(t, srv.URL+"/console/vendor/redoc/redoc.standalone.js", "")
	if len(body) < 100000 {
		t.Fatalf("the bundle is %d bytes", len(body))
	}
	if m := regexp.MustCompile(`src:"https?://[^"]*"`).FindString(body); m != "" {
		t.Errorf("the Redoc bundle loads %s (make vendor-redoc patches it)", m)
	}
}

// Assets are revalidated, not downloaded again: the Redoc bundle is 900 KB.
func TestAssetsRevalidate(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	resp, _ := get(t, srv.URL+"/console/vendor/redoc/redoc.standalone.js", "")
	etag := resp.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/console/vendor/redoc/redoc.standalone.js", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("If-None-Match", etag)
	again, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if again.StatusCode != http.StatusNotModified {
		t.Errorf("revalidating with its ETag: %d, want 304", again.StatusCode)
	}
}

// The table reader parses program-made HTML in a frame with its own policy:
// inline styles allowed there (a DataFrame has them), no requests, framed
// by this server only; the console keeps its stricter one and may frame
// only its own origin. The reader is served like a page, not as a bare
// asset (which would have no policy at all).
func TestTableReaderPolicy(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	resp, _ := get(t, srv.URL+"/console/tables.html", "")
	reader := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self';", "style-src 'self' 'unsafe-inline'", "frame-ancestors 'self'"} {
		if !strings.Contains(reader, want) {
			t.Errorf("the reader's policy %q lacks %q", reader, want)
		}
	}
	resp, _ = get(t, srv.URL+"/", "text/html")
	page := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"style-src 'self';", "frame-src 'self';", "frame-ancestors 'none'"} {
		if !strings.Contains(page, want) {
			t.Errorf("the console's policy %q lacks %q", page, want)
		}
	}
	if strings.Contains(page, "unsafe-inline") {
		t.Errorf("the console's policy allows inline code: %q", page)
	}
}
