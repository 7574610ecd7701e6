package python

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
)

func TestOriginAndPackageHost(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"http://Index.Example/simple":   "http://index.example:80",
		"https://index.example./simple": "https://index.example:443",
		"https://index.example:8443/x":  "https://index.example:8443",
		"http://[::1]:3141/simple/":     "http://[::1]:3141",
		"file:///srv/wheels/x.whl":      "",
		"ftp://index.example/":          "",
		"/simple/":                      "",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := origin(u); got != want {
			t.Errorf("origin(%s) = %q, want %q", raw, got, want)
		}
	}
	for _, ok := range []string{"https://files.pythonhosted.org", "http://10.0.0.5:8080/", "https://[::1]:3141"} {
		if err := CheckPackageHost(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"files.pythonhosted.org", "https://files.pythonhosted.org/packages", "https://u:p@files.example", "ftp://files.example", "https://files.example?x=1", ":"} {
		if err := CheckPackageHost(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if err := (PackageSource{Index: "index.example/simple"}).Check(); err == nil {
		t.Error("an index without a scheme accepted")
	}
}

// splitIndex is a PEP 503 index on one loopback origin whose page for
// tinya links a wheel on its own origin and whose page for tinyc links one
// on another origin (files), which counts the requests it gets.
type splitIndex struct {
	index, files *httptest.Server
	fileHits     atomic.Int64
}

func newSplitIndex(t *testing.T) *splitIndex {
	t.Helper()
	wheels := map[string][]byte{}
	for _, n := range []string{"tinya", "tinyc"} {
		wheels[n] = benchWheel(t, n, map[string]string{
			n + "/__init__.py":            "VERSION = '1.0'\n",
			n + "-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: " + n + "\nVersion: 1.0\n",
			n + "-1.0.dist-info/WHEEL":    "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		})
	}
	serveWheel := func(w http.ResponseWriter, r *http.Request) {
		name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/files/"), "-")
		if b, ok := wheels[name]; ok {
			w.Write(b)
			return
		}
		http.NotFound(w, r)
	}
	s := &splitIndex{}
	s.files = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fileHits.Add(1)
		serveWheel(w, r)
	}))
	t.Cleanup(s.files.Close)
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/{project}/", func(w http.ResponseWriter, r *http.Request) {
		b, ok := wheels[r.PathValue("project")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		at := "/files/" // tinya: the index's own origin
		if r.PathValue("project") == "tinyc" {
			at = s.files.URL + "/files/"
		}
		name := r.PathValue("project") + "-1.0-py3-none-any.whl"
		fmt.Fprintf(w, `<a href="%s%s#sha256=%x">%s</a>`, at, name, sha256.Sum256(b), name)
	})
	mux.HandleFunc("/files/", serveWheel)
	mux.HandleFunc("/moved/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.files.URL+"/files/"+strings.TrimPrefix(r.URL.Path, "/moved/"), http.StatusFound)
	})
	s.index = httptest.NewServer(mux)
	t.Cleanup(s.index.Close)
	return s
}

// TestBuildReachesOnlyThePackageSource: pip resolves behind the gate, so a
// wheel the index links on another origin is refused (at the package that
// needs it, naming the URL) without that origin being asked for anything;
// with the origin named as a file host the same build succeeds; a wheel on
// the index's own origin is built either way.
func TestBuildReachesOnlyThePackageSource(t *testing.T) {
	t.Parallel()
	ix := newSplitIndex(t)
	log := slog.New(slog.DiscardHandler)
	req := func(pkgs ...string) buildRequest {
		return buildRequest{exe: "/usr/bin/python3", version: "3", packages: pkgs}
	}
	src := PackageSource{Index: ix.index.URL + "/simple", CacheDir: t.TempDir()}
	_, _, err := NewBuilds().build(context.Background(), log, src, req("tinya==1.0", "tinyc"))
	var ce *module.ConfigError
	want := "tinyc: the index links its file at " + ix.files.URL + "/files/tinyc-1.0-py3-none-any.whl, which is not the package index (serve --package-host to allow it)"
	if !errors.As(err, &ce) || ce.Field != "packages[1]" || ce.Err.Error() != want {
		t.Fatalf("a wheel on another origin: %v, want %q at packages[1]", err, want)
	}
	if n := ix.fileHits.Load(); n != 0 {
		t.Fatalf("the other origin got %d requests", n)
	}
	// Control: the index's own files.
	if b, _, err := NewBuilds().build(context.Background(), log, src, req("tinya==1.0")); err != nil || len(b.Packages) != 1 {
		t.Fatalf("a wheel on the index's origin: %v %v", b, err)
	}
	// Control: the other origin allowed.
	src.FileHosts = []string{ix.files.URL}
	if b, _, err := NewBuilds().build(context.Background(), log, src, req("tinya==1.0", "tinyc")); err != nil || len(b.Packages) != 2 {
		t.Fatalf("with --package-host %s: %v %v", ix.files.URL, b, err)
	}
	if ix.fileHits.Load() == 0 {
		t.Fatal("allowed, yet the file host was not asked")
	}
}

// TestFetchStaysOnTheIndex: the host's own fetch of a wheel pip reported
// refuses a URL off the allowed origins, and a redirect there, before
// asking it.
func TestFetchStaysOnTheIndex(t *testing.T) {
	t.Parallel()
	ix := newSplitIndex(t)
	src := PackageSource{Index: ix.index.URL + "/simple"}
	name := "tinyc-1.0-py3-none-any.whl"
	for _, u := range []string{ix.files.URL + "/files/" + name, ix.index.URL + "/moved/" + name} {
		_, err := src.fetch(context.Background(), dist{filename: name, url: u, sha256: "00"})
		if err == nil || !strings.Contains(err.Error(), "tinyc: the index links its file at "+ix.files.URL+"/files/"+name+", which is not the package index") {
			t.Errorf("%s: %v", u, err)
		}
	}
	if n := ix.fileHits.Load(); n != 0 {
		t.Fatalf("the other origin got %d requests", n)
	}
	// Control: allowed, the same fetch reaches it (and fails only on the
	// hash given).
	src.FileHosts = []string{ix.files.URL}
	if _, err := src.fetch(context.Background(), dist{filename: name, url: ix.files.URL + "/files/" + name, sha256: "00"}); err == nil || !strings.Contains(err.Error(), "its sha256 is not the one pip resolved") {
		t.Fatalf("allowed: %v", err)
	}
	if ix.fileHits.Load() != 1 {
		t.Fatalf("allowed: the file host got %d requests", ix.fileHits.Load())
	}
}

// TestGateTunnels: through the gate, a CONNECT to an https origin it does
// not allow is refused (the server sees no connection's request), and one
// it allows is a tunnel the client verifies end to end.
func TestGateTunnels(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "wheel")
	}))
	t.Cleanup(tls.Close)
	u, _ := url.Parse(tls.URL)
	get := func(allowed map[string]bool) (string, error) {
		g, err := openGate(slog.New(slog.DiscardHandler), allowed)
		if err != nil {
			t.Fatal(err)
		}
		defer g.close()
		proxy, _ := url.Parse(g.url)
		tr := tls.Client().Transport.(*http.Transport).Clone()
		tr.Proxy = http.ProxyURL(proxy)
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(tls.URL + "/files/tinyc-1.0-py3-none-any.whl")
		if err != nil {
			return g.firstRefused(), err
		}
		defer resp.Body.Close()
		return g.firstRefused(), nil
	}
	refused, err := get(map[string]bool{"https://elsewhere.example:443": true})
	if err == nil || refused != origin(u) || hits.Load() != 0 {
		t.Fatalf("not allowed: %v, refused %q, %d requests", err, refused, hits.Load())
	}
	if refused, err := get(map[string]bool{origin(u): true}); err != nil || refused != "" || hits.Load() != 1 {
		t.Fatalf("allowed: %v, refused %q, %d requests", err, refused, hits.Load())
	}
}
