package tests

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultAPIKey: a server started with no CYRNEL_API_KEY makes a key
// only its operator can read, requires it everywhere but /health and the
// spec (the MCP endpoint too), and keeps it across restarts.
func TestDefaultAPIKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, dir)
	fi, err := os.Stat(filepath.Join(dir, "api-key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if len(h.key) < 40 || strings.ContainsAny(h.key, "+/=") {
		t.Fatalf("key %q: want 32 random bytes, URL-safe", h.key)
	}
	if strings.Contains(h.logs.String(), h.key) {
		t.Fatal("the key is in the log")
	}
	if !strings.Contains(h.logs.String(), `Authorization: Bearer $(cat `+filepath.Join(dir, "api-key")) {
		t.Fatalf("the log does not say how to use the key:\n%s", h.logs)
	}
	for path, want := range map[string]int{"/health": 200, "/openapi.json": 200, "/processes": 401, "/services": 401, "/environment": 401} {
		resp, err := http.Get(h.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s without the key: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Post(h.base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("/mcp without the key: %d", resp.StatusCode)
	}
	if st, _ := h.do("GET", "/processes", nil, nil); st != 200 {
		t.Fatalf("with the key: %d", st)
	}
	key := h.key
	h.stop()
	if h2 := start(t, dir); h2.key != key {
		t.Fatalf("the key changed across a restart: %q then %q", key, h2.key)
	}
	// A key file others can read is refused: the key is no longer secret.
	open := t.TempDir()
	if err := os.WriteFile(filepath.Join(open, "api-key"), []byte("k\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := cli(t, open, "", nil, "serve", "--addr", "127.0.0.1:0", "--data-dir", open)
	if r.code == 0 || !strings.Contains(r.stderr, "readable by other users") {
		t.Fatalf("a world-readable key file: %+v", r)
	}
}

// TestCLISendsToTheRunningServer: with a server holding the data directory,
// run, services and tools send their work to it (with the key from the data
// directory) instead of failing on the lock.
func TestCLISendsToTheRunningServer(t *testing.T) {
	t.Parallel()
	work := writeFiles(t, map[string]string{"hello.py": "print('hello from the server')"})
	dataDir := filepath.Join(work, "cyrnel-data")
	h := start(t, dataDir)
	r := cli(t, work, "", nil, "run", "hello.py")
	if r.code != 0 || r.stdout != "hello from the server\n" {
		t.Fatalf("run: %+v", r)
	}
	var list struct {
		Items []proc `json:"items"`
	}
	h.do("GET", "/processes?ref=hello.py", nil, &list)
	if len(list.Items) != 1 {
		t.Fatalf("the server did not run it: %+v", list)
	}
	doc, err := filepath.Abs(filepath.Join(fixtures, "petstore-3.0.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if r = cli(t, work, "", nil, "services", "add", "pets", doc); r.code != 0 {
		t.Fatalf("services add: %+v", r)
	}
	if st, _ := h.do("GET", "/services/pets", nil, nil); st != 200 {
		t.Fatalf("the server does not have the service: %d", st)
	}
	if r = cli(t, work, "", nil, "tools", "--data-dir", dataDir, "showPetById"); r.code != 0 || !strings.Contains(r.stdout, "pets.showPetById") {
		t.Fatalf("tools: %+v", r)
	}
	// Control: a wrong key from the environment wins over the file, and is
	// refused: the file's key is what made the calls above pass.
	if r = cli(t, work, "print(1)", []string{"CYRNEL_API_KEY=wrong"}, "run", "-"); r.code != 5 || !strings.Contains(r.stderr, "401") {
		t.Fatalf("wrong key: %+v", r)
	}
}

// TestSandboxNeedsTheOperator: a config that weakens the sandbox is refused
// (403 naming the field, nothing stored) unless the server was started with
// CYRNEL_ALLOW_UNSANDBOXED=1; a weakening config stored then does not
// outlive that decision.
func TestSandboxNeedsTheOperator(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, dir)
	for _, cfg := range []map[string]any{
		{"sandbox": map[string]any{"enabled": false}},
		{"sandbox": map[string]any{"network": true}},
		{"sandbox": map[string]any{"landlock": false, "seccomp": false}},
	} {
		var prob problem
		if st, _ := h.do("PUT", "/modules/python/config", cfg, &prob); st != http.StatusForbidden || len(prob.Errors) == 0 ||
			!strings.HasPrefix(prob.Errors[0].Location, "body.sandbox.") || !strings.Contains(prob.Detail, "--allow-unsandboxed") {
			t.Errorf("%v: %d %+v", cfg, st, prob)
		}
	}
	var stored map[string]any
	if h.do("GET", "/modules/python/config", nil, &stored); len(stored) != 0 {
		t.Fatalf("a refused config was stored: %v", stored)
	}
	// Keeping every layer is no weakening.
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"sandbox": map[string]any{"enabled": true}}, nil); st != 200 {
		t.Fatalf("the default sandbox: %d", st)
	}
	h.stop()

	// Control: the operator's start-up flag lets the same config through.
	h = start(t, dir, "CYRNEL_ALLOW_UNSANDBOXED=1")
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"sandbox": map[string]any{"network": true}}, nil); st != 200 {
		t.Fatalf("with CYRNEL_ALLOW_UNSANDBOXED=1: %d", st)
	}
	h.stop()

	h = start(t, dir)
	var env struct {
		Active any    `json:"active"`
		Error  string `json:"error"`
	}
	h.do("GET", "/environment", nil, &env)
	if env.Active != nil || !strings.Contains(env.Error, "--allow-unsandboxed") || !strings.Contains(env.Error, "sandbox.network") {
		t.Fatalf("a stored weakening config without the flag: %+v", env)
	}
	var prob problem
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "python"}, &prob); st != http.StatusForbidden ||
		len(prob.Errors) != 1 || prob.Errors[0].Location != "body.module" || !strings.Contains(prob.Errors[0].Message, "sandbox.network") {
		t.Fatalf("activating it: %d %+v", st, prob)
	}
}

// TestToolsCannotReachTheHost is issue 10.5's attack: a service whose
// document is cyrnel's own spec, pointed at the host with the operator's key
// as its secret, would let a sandboxed program drive the API (turn the
// sandbox off, read other processes' code). The host's own address is
// refused even with allowPrivateNetwork, directly and through a redirect;
// without the flag a loopback upstream is refused too. The control, a
// loopback upstream with the flag, shows the calls do leave the sandbox.
func TestToolsCannotReachTheHost(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	var spec string
	if st, _ := h.do("GET", "/openapi.json", nil, &spec); st != 200 {
		t.Fatalf("spec: %d", st)
	}
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, h.base+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	up := newUpstream(t)
	for _, svc := range []struct {
		id     string
		config map[string]any
	}{
		{"self", map[string]any{"serverUrl": h.base, "allowPrivateNetwork": true}},
		{"viaredirect", map[string]any{"serverUrl": redirect.URL, "allowPrivateNetwork": true}},
		{"loopback", map[string]any{"serverUrl": up.URL}},
		{"control", map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true}},
	} {
		if st, _ := h.do("POST", "/services", map[string]any{
			"id": svc.id, "adapter": "openapi", "source": map[string]any{"content": spec},
			"config": svc.config, "secrets": map[string]any{"bearer": h.key},
		}, nil); st != 201 {
			t.Fatalf("import %s: %d", svc.id, st)
		}
	}
	p := h.run(`
for name in ("self", "viaredirect", "loopback", "control"):
    try:
        r = getattr(cyrnel.services, name).getModuleConfig(id="python")
        print(name, "reached", r["status"])
    except cyrnel.ToolError as e:
        print(name, "refused", e)
`, nil)
	lines := strings.Split(strings.TrimSpace(p.Stdout), "\n")
	if p.exit() != "success" || len(lines) != 4 {
		t.Fatalf("%+v", p)
	}
	for i, want := range []string{"self refused", "viaredirect refused", "loopback refused", "control reached 200"} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("%s, want %s…", lines[i], want)
		}
	}
	for i, why := range []string{"own API", "own API", "non-public address"} {
		if !strings.Contains(lines[i], why) {
			t.Errorf("%s: does not say %q", lines[i], why)
		}
	}
	if got := up.last(t); got.Path != "/modules/python/config" {
		t.Errorf("control: upstream got %+v", got)
	}
}

// TestPythonInterpreterFlag: CYRNEL_PYTHON (serve --python) declares the
// interpreters a Python config may name, ':'-separated, the first being
// the default; one that does not exist stops the server from starting,
// naming it. serve --help lists both on stdout.
func TestPythonInterpreterFlag(t *testing.T) {
	t.Parallel()
	r := cli(t, t.TempDir(), "", nil, "serve", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "-python") || !strings.Contains(r.stdout, "CYRNEL_PYTHON") ||
		!strings.Contains(r.stdout, "-allow-unsandboxed") || r.stderr != "" {
		t.Fatalf("serve --help: %+v", r)
	}
	r = cli(t, t.TempDir(), "", []string{"CYRNEL_PYTHON=python3:/nonexistent/python3.99"}, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir())
	if r.code == 0 || !strings.Contains(r.stderr, "/nonexistent/python3.99") {
		t.Fatalf("with CYRNEL_PYTHON naming no interpreter: %+v", r)
	}
	// Control: two declared interpreters; the first runs a config that
	// names none, the second is accepted by name.
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is required:", err)
	}
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(python, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("make a virtual environment: %v: %s", err, out)
	}
	second := filepath.Join(venv, "bin", "python")
	h := start(t, "", "CYRNEL_PYTHON=python3:"+second)
	// The virtual environment's site-packages is on its sys.path.
	prefix := fmt.Sprintf("import sys; print(any(p.startswith(%q) for p in sys.path))", venv)
	if p := h.run(prefix, nil); p.Stdout != "False\n" {
		t.Fatalf("the first declared interpreter: %+v", p)
	}
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"interpreter": second}, nil); st != 200 {
		t.Fatalf("config naming the second interpreter: %d", st)
	}
	if p := h.run(prefix, nil); p.Stdout != "True\n" {
		t.Fatalf("the second declared interpreter (a virtual environment): %+v", p)
	}
}
