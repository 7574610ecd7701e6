package tests

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// wheel builds a pure-Python wheel: a package whose __init__.py is init,
// with METADATA (and Requires-Dist), WHEEL and a RECORD of sha256 hashes.
func wheel(t testing.TB, name, version, init string, requires ...string) []byte {
	t.Helper()
	di := fmt.Sprintf("%s-%s.dist-info", name, version)
	meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version)
	for _, r := range requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files := [][2]string{
		{name + "/__init__.py", init},
		{di + "/METADATA", meta},
		{di + "/WHEEL", "Wheel-Version: 1.0\nGenerator: cyrnel-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f[0])
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f[1]))
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", di)
	w, _ := zw.Create(di + "/RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sdist builds a source distribution whose setup.py, if anything ran it,
// would leave marker behind.
func sdist(t testing.TB, name, version, marker string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	setup := fmt.Sprintf("open(%q, 'w').write('setup.py ran')\nfrom setuptools import setup\nsetup(name=%q, version=%q)\n", marker, name, version)
	tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("%s-%s/setup.py", name, version), Mode: 0o644, Size: int64(len(setup))})
	tw.Write([]byte(setup))
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// packageIndex serves files as a PEP 503 simple index on loopback and
// counts the requests it answers.
type packageIndex struct {
	srv  *httptest.Server
	hits atomic.Int64
}

func newPackageIndex(t testing.TB, files map[string][]byte) *packageIndex {
	t.Helper()
	ix := &packageIndex{}
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/{project}/", func(w http.ResponseWriter, r *http.Request) {
		ix.hits.Add(1)
		var links []string
		for name, b := range files {
			if strings.HasPrefix(strings.ReplaceAll(strings.ToLower(name), "_", "-"), r.PathValue("project")+"-") {
				sum := sha256.Sum256(b)
				links = append(links, fmt.Sprintf(`<a href="../../files/%s#sha256=%s">%s</a>`, name, hex.EncodeToString(sum[:]), name))
			}
		}
		if len(links) == 0 {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "<!DOCTYPE html><html><body>%s</body></html>", strings.Join(links, "<br>"))
	})
	mux.HandleFunc("/files/{name}", func(w http.ResponseWriter, r *http.Request) {
		ix.hits.Add(1)
		b, ok := files[r.PathValue("name")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	})
	ix.srv = httptest.NewServer(mux)
	t.Cleanup(ix.srv.Close)
	return ix
}

// environmentStatus is GET /environment's active status, the parts about
// packages.
type environmentStatus struct {
	Packages []struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"packages"`
	Build struct {
		State    string `json:"state"`
		Hash     string `json:"hash"`
		Progress string `json:"progress"`
		Error    string `json:"error"`
	} `json:"build"`
}

func pythonStatus(h *host) environmentStatus {
	var env struct {
		Active struct {
			Status environmentStatus `json:"status"`
		} `json:"active"`
	}
	h.do("GET", "/environment", nil, &env)
	return env.Active.Status
}

// TestDeclaredPackages: packages declared in the config are installed from
// wheels served by a PEP 503 index on loopback, importable in fresh
// interpreters and sessions and listed with their versions; an unknown
// package, an sdist-only one (whose setup.py never runs) and one whose
// dependency is missing are 422 at packages[i] and change nothing (but
// status.build says the last build failed); a package's dependencies are
// resolved by pip and installed; the same config again and a restart reuse
// the build without asking the index.
func TestDeclaredPackages(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "setup-ran")
	files := map[string][]byte{
		"tinya-1.0-py3-none-any.whl": wheel(t, "tinya", "1.0", "VERSION = '1.0'\n"),
		"tinya-2.0-py3-none-any.whl": wheel(t, "tinya", "2.0", "VERSION = '2.0'\n"),
		"tinyb-1.1-py3-none-any.whl": wheel(t, "tinyb", "1.1", "import tinya\ndef hello():\n    return 'hello from tinyb on tinya ' + tinya.VERSION\n", "tinya (>=1.0)", "pytest ; extra == 'test'"),
		"tinyc-1.0-py3-none-any.whl": wheel(t, "tinyc", "1.0", "import tinyz\n", "tinyz"),
		"evil-1.0.tar.gz":            sdist(t, "evil", "1.0", marker),
	}
	ix := newPackageIndex(t, files)
	dataDir := t.TempDir()
	h := start(t, dataDir, "CYRNEL_PACKAGE_INDEX="+ix.srv.URL+"/simple")
	cfg := map[string]any{"packages": []string{"tinya==1.0", "tinyb"}}
	t0 := time.Now()
	var prob problem
	if st, _ := h.do("PUT", "/modules/python/config", cfg, &prob); st != http.StatusOK {
		t.Fatalf("declare packages: %d %+v", st, prob)
	}
	t.Logf("environment built and activated in %v", time.Since(t0))
	code := "import tinya, tinyb\nprint(tinya.VERSION, tinyb.hello())"
	want := "1.0 hello from tinyb on tinya 1.0\n"
	if p := h.run(code, nil); p.Stdout != want {
		t.Fatalf("fresh: %s %q %s", p.exit(), p.Stdout, p.Stderr)
	}
	s := h.newSession(map[string]any{})
	if p := h.run(code, session(s.ID)); p.Stdout != want {
		t.Fatalf("session: %s %q %s", p.exit(), p.Stdout, p.Stderr)
	}
	st := pythonStatus(h)
	if fmt.Sprint(st.Packages) != "[{tinya 1.0} {tinyb 1.1}]" || st.Build.State != "ready" || st.Build.Hash == "" {
		t.Fatalf("status: %+v", st)
	}
	if _, _, doc := h.raw("GET", "/environment/docs", "", nil); !strings.Contains(string(doc), "| tinya | 1.0 |\n| tinyb | 1.1 |\n") {
		t.Fatalf("the guide does not list the declared packages:\n%s", doc)
	}
	if p := h.run("import numpy", nil); p.exit() != "failed" {
		t.Fatalf("without systemSitePackages the interpreter's own packages are not importable: %s", p.exit())
	}

	for _, c := range []struct {
		packages []string
		field    string
		says     string
	}{
		{[]string{"tinya==1.0", "nosuch"}, "packages[1]", "No matching distribution found for nosuch"},
		{[]string{"evil"}, "packages[0]", "only source distributions"},
		{[]string{"tinyc"}, "packages[0]", "tinyc needs tinyz"},
		{[]string{"tinya==3.0"}, "packages[0]", "Could not find a version that satisfies the requirement tinya==3.0"},
		{[]string{"tinya @ http://elsewhere/tinya.whl"}, "packages[0]", "not a version specifier"},
	} {
		prob = problem{}
		if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"packages": c.packages}, &prob); st != http.StatusUnprocessableEntity ||
			len(prob.Errors) != 1 || !strings.HasSuffix(prob.Errors[0].Location, c.field) || !strings.Contains(prob.Errors[0].Message, c.says) {
			t.Fatalf("%v: %d %+v", c.packages, st, prob)
		}
		if p := h.run(code, nil); p.Stdout != want {
			t.Fatalf("after the refused %v: %q %s", c.packages, p.Stdout, p.Stderr)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the sdist's setup.py ran: %v", err)
	}
	// The last build failed: status.build says so; what runs is unchanged.
	if st := pythonStatus(h); st.Build.State != "failed" || !strings.Contains(st.Build.Error, "tinya==3.0") ||
		fmt.Sprint(st.Packages) != "[{tinya 1.0} {tinyb 1.1}]" {
		t.Fatalf("after a failed build: %+v", st)
	}

	// Dependencies are resolved: tinyb alone brings the newest tinya it
	// allows.
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"packages": []string{"tinyb"}}, &prob); st != http.StatusOK {
		t.Fatalf("tinyb alone: %d %+v", st, prob)
	}
	if p := h.run(code, nil); p.Stdout != "2.0 hello from tinyb on tinya 2.0\n" {
		t.Fatalf("tinyb alone: %s %q %s", p.exit(), p.Stdout, p.Stderr)
	}
	if st := pythonStatus(h); fmt.Sprint(st.Packages) != "[{tinya 2.0} {tinyb 1.1}]" || st.Build.State != "ready" {
		t.Fatalf("tinyb alone: %+v", st)
	}

	// The same config again, then a restart: the build is reused.
	before := ix.hits.Load()
	t0 = time.Now()
	if st, _ := h.do("PUT", "/modules/python/config", cfg, nil); st != http.StatusOK {
		t.Fatalf("again: %d", st)
	}
	t.Logf("the same config again in %v", time.Since(t0))
	if got := pythonStatus(h).Build.Hash; got != st.Build.Hash || ix.hits.Load() != before {
		t.Fatalf("rebuilt: hash %s (was %s), %d index requests", got, st.Build.Hash, ix.hits.Load()-before)
	}
	h.stop()
	h = start(t, dataDir, "CYRNEL_PACKAGE_INDEX="+ix.srv.URL+"/simple")
	if p := h.run(code, nil); p.Stdout != want || ix.hits.Load() != before {
		t.Fatalf("after a restart: %q %s, %d index requests", p.Stdout, p.Stderr, ix.hits.Load()-before)
	}
}

// TestDeclaredPackagesFromFindLinks: a directory of wheels serves as the
// source, and systemSitePackages puts the interpreter's own packages after
// the declared ones.
func TestDeclaredPackagesFromFindLinks(t *testing.T) {
	t.Parallel()
	py := dataSciencePython(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tinya-1.0-py3-none-any.whl"), wheel(t, "tinya", "1.0", "VERSION = '1.0'\n", "numpy"), 0o644)
	h := start(t, "", "CYRNEL_FIND_LINKS="+dir, "CYRNEL_PYTHON="+py)
	var prob problem
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"packages": []string{"tinya"}}, &prob); st != http.StatusUnprocessableEntity ||
		!strings.Contains(prob.Errors[0].Message, "tinya needs numpy") {
		t.Fatalf("numpy missing: %d %+v", st, prob)
	}
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"packages": []string{"tinya"}, "systemSitePackages": true}, &prob); st != http.StatusOK {
		t.Fatalf("with the system's numpy: %d %+v", st, prob)
	}
	if p := h.run("import tinya, numpy\nprint(tinya.VERSION, numpy.__name__)", nil); p.Stdout != "1.0 numpy\n" {
		t.Fatalf("%s %q %s", p.exit(), p.Stdout, p.Stderr)
	}
}

// TestDeclaredPackagesOnTwoHosts: on PostgreSQL, packages declared through
// one host become importable through the other, each host building the
// same environment (the same hash) into its own data directory.
func TestDeclaredPackagesOnTwoHosts(t *testing.T) {
	t.Parallel()
	ix := newPackageIndex(t, map[string][]byte{"tinya-1.0-py3-none-any.whl": wheel(t, "tinya", "1.0", "VERSION = '1.0'\n")})
	hs := startCluster(t, 2, "CYRNEL_PACKAGE_INDEX="+ix.srv.URL+"/simple")
	a, b := hs[0], hs[1]
	var prob problem
	if st, _ := a.do("PUT", "/modules/python/config", map[string]any{"packages": []string{"tinya==1.0"}}, &prob); st != http.StatusOK {
		t.Fatalf("declare on A: %d %+v", st, prob)
	}
	eventuallyWithin(t, time.Minute, "tinya importable through B", func() bool {
		return b.run("import tinya\nprint(tinya.VERSION)", nil).Stdout == "1.0\n"
	})
	eventually(t, "B built the same environment", func() bool {
		return pythonStatus(b).Build.Hash == pythonStatus(a).Build.Hash && pythonStatus(a).Build.Hash != ""
	})
}

// TestPackageBuildVisible: while a build runs (provably: the index holds
// the wheel until the test has looked), GET /environment shows it as
// status.build "building" with its hash and what it is doing, and the
// environment in force keeps serving; when it is done the PUT succeeds and
// status.build is "ready" with the same hash.
func TestPackageBuildVisible(t *testing.T) {
	t.Parallel()
	whl := wheel(t, "tinya", "1.0", "VERSION = '1.0'\n")
	asked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/tinya/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<a href="../../files/tinya-1.0-py3-none-any.whl#sha256=%x">tinya-1.0-py3-none-any.whl</a>`, sha256.Sum256(whl))
	})
	mux.HandleFunc("/files/tinya-1.0-py3-none-any.whl", func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(asked) })
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Write(whl)
	})
	ix := httptest.NewServer(mux)
	t.Cleanup(ix.Close)
	h := start(t, "", "CYRNEL_PACKAGE_INDEX="+ix.URL+"/simple")
	if st := pythonStatus(h); st.Build.State != "" {
		t.Fatalf("no packages declared, yet a build: %+v", st)
	}
	done := make(chan int, 1)
	var prob problem
	go func() {
		st, _ := h.do("PUT", "/modules/python/config", map[string]any{"packages": []string{"tinya==1.0"}}, &prob)
		done <- st
	}()
	select {
	case <-asked:
	case st := <-done:
		close(release)
		t.Fatalf("the PUT ended (%d %+v) before the wheel was fetched", st, prob)
	}
	during := pythonStatus(h)
	if p := h.run("print('still serving')", nil); p.Stdout != "still serving\n" {
		t.Errorf("during the build: %s %q %s", p.exit(), p.Stdout, p.Stderr)
	}
	close(release)
	if st := <-done; st != http.StatusOK {
		t.Fatalf("declare tinya: %d %+v", st, prob)
	}
	if during.Build.State != "building" || during.Build.Hash == "" || during.Build.Progress == "" {
		t.Fatalf("during the build: %+v", during)
	}
	t.Logf("during the build: %+v", during.Build)
	after := pythonStatus(h)
	if after.Build.State != "ready" || after.Build.Hash != during.Build.Hash {
		t.Fatalf("after the build: %+v (during: %+v)", after.Build, during.Build)
	}
	if p := h.run("import tinya\nprint(tinya.VERSION)", nil); p.Stdout != "1.0\n" {
		t.Fatalf("%s %q %s", p.exit(), p.Stdout, p.Stderr)
	}
}

// TestPackageSourceConfined: a build reaches the package index's origin
// and the file hosts the operator named, nothing else. An index (origin A)
// whose page links a wheel on origin B is 422 at the package, naming the
// URL, and B provably got no request (pip resolves behind the host's
// proxy); with serve --package-host B the same packages install. Control:
// a wheel on the index's own origin installs without it. A file host
// that is not an origin stops the start.
func TestPackageSourceConfined(t *testing.T) {
	t.Parallel()
	tinya, tinyc := wheel(t, "tinya", "1.0", "VERSION = '1.0'\n"), wheel(t, "tinyc", "1.0", "VERSION = 'c1.0'\n")
	var bHits atomic.Int64
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bHits.Add(1)
		if r.URL.Path != "/files/tinyc-1.0-py3-none-any.whl" {
			http.NotFound(w, r)
			return
		}
		w.Write(tinyc)
	}))
	t.Cleanup(b.Close)
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/tinya/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<a href="/files/tinya-1.0-py3-none-any.whl#sha256=%x">tinya-1.0-py3-none-any.whl</a>`, sha256.Sum256(tinya))
	})
	mux.HandleFunc("/files/tinya-1.0-py3-none-any.whl", func(w http.ResponseWriter, r *http.Request) { w.Write(tinya) })
	mux.HandleFunc("/simple/tinyc/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<a href="%s/files/tinyc-1.0-py3-none-any.whl#sha256=%x">tinyc-1.0-py3-none-any.whl</a>`, b.URL, sha256.Sum256(tinyc))
	})
	a := httptest.NewServer(mux)
	t.Cleanup(a.Close)
	index := "CYRNEL_PACKAGE_INDEX=" + a.URL + "/simple"
	code := "import tinya, tinyc\nprint(tinya.VERSION, tinyc.VERSION)"

	h := start(t, "", index)
	var prob problem
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"packages": []string{"tinya==1.0"}}, &prob); st != http.StatusOK {
		t.Fatalf("a wheel on the index's own origin: %d %+v", st, prob)
	}
	prob = problem{}
	want := "tinyc: the index links its file at " + b.URL + "/files/tinyc-1.0-py3-none-any.whl, which is not the package index (serve --package-host to allow it)"
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"packages": []string{"tinya==1.0", "tinyc"}}, &prob); st != http.StatusUnprocessableEntity ||
		len(prob.Errors) != 1 || !strings.HasSuffix(prob.Errors[0].Location, "packages[1]") || !strings.Contains(prob.Errors[0].Message, want) {
		t.Fatalf("a wheel on another origin: %d %+v", st, prob)
	}
	if n := bHits.Load(); n != 0 {
		t.Fatalf("the origin the index linked got %d requests", n)
	}
	if p := h.run("import tinya\nprint(tinya.VERSION)", nil); p.Stdout != "1.0\n" {
		t.Fatalf("after the refusal: %s %q %s", p.exit(), p.Stdout, p.Stderr)
	}

	dir := t.TempDir()
	allowed := startCommand(t, exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--package-host", b.URL), dir, index)
	prob = problem{}
	if st, _ := allowed.do("PUT", "/modules/python/config", map[string]any{"packages": []string{"tinya==1.0", "tinyc"}}, &prob); st != http.StatusOK {
		t.Fatalf("with --package-host %s: %d %+v", b.URL, st, prob)
	}
	if p := allowed.run(code, nil); p.Stdout != "1.0 c1.0\n" || bHits.Load() == 0 {
		t.Fatalf("with --package-host: %s %q %s, %d requests to it", p.exit(), p.Stdout, p.Stderr, bHits.Load())
	}

	if out := refusesToStart(t, t.TempDir(), index, "CYRNEL_PACKAGE_HOSTS="+strings.TrimPrefix(b.URL, "http://")); !strings.Contains(out, "want an origin") {
		t.Fatalf("a package host without a scheme: %s", out)
	}
}
