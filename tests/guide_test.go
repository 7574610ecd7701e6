package tests

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// capability is one thing the Python guide may say: the words it says it
// with and a check that runs it. The guide must say it exactly when the
// environment does it.
type capability struct {
	name   string
	phrase string
	check  func(h *host) error
}

func expect(p proc, want string, got string) error {
	if p.exit() != "success" {
		return fmt.Errorf("%s: %s", p.exit(), p.Stderr)
	}
	if got != want {
		return fmt.Errorf("got %q, want %q", got, want)
	}
	return nil
}

var capabilities = []capability{
	{"fresh interpreter", "runs in a **fresh interpreter**", func(h *host) error {
		h.run("leftover = 1\nopen('left.txt', 'w').write('x')", nil)
		p := h.run("import os\nprint('leftover' in globals(), os.path.exists('left.txt'))", nil)
		return expect(p, "False False\n", p.Stdout)
	}},
	{"sessions", "A **session** keeps state", func(h *host) error {
		s := h.newSession(map[string]any{})
		defer h.do("DELETE", "/sessions/"+s.ID, nil, nil)
		h.run("import json\nkept = 41\nopen('kept.txt', 'w').write('x')", session(s.ID))
		p := h.run("print(kept + 1, json.__name__, open('kept.txt').read())", session(s.ID))
		return expect(p, "42 json x\n", p.Stdout)
	}},
	{"display", "`cyrnel.display(obj)` records a rich display", func(h *host) error {
		p := h.run("cyrnel.display({'a': 1})", nil)
		ds := h.displays(p.PID)
		if len(ds) != 1 || ds[0].Kind != "display" {
			return fmt.Errorf("displays %+v", ds)
		}
		return nil
	}},
	{"final expression", "The value of a final expression is recorded the same way (kind `result`)", func(h *host) error {
		p := h.run("6 * 7", nil)
		ds := h.displays(p.PID)
		if len(ds) != 1 || ds[0].Kind != "result" || ds[0].Data["text/plain"] != "42" {
			return fmt.Errorf("displays %+v", ds)
		}
		return nil
	}},
	{"workspace", "The working directory is `/workspace`", func(h *host) error {
		p := h.run("import os\nprint(os.path.samefile(os.getcwd(), '/workspace'))", nil)
		return expect(p, "True\n", p.Stdout)
	}},
	{"files in", "`files: [{path, content}]`", func(h *host) error {
		p := h.run("print(open('in/a.txt').read())", map[string]any{"files": []map[string]any{{"path": "in/a.txt", "content": base64.StdEncoding.EncodeToString([]byte("hello"))}}})
		return expect(p, "hello\n", p.Stdout)
	}},
	{"files out", "`GET /processes/{pid}/files/{path}`", func(h *host) error {
		p := h.run("import os\nos.makedirs('out')\nopen('out/b.txt', 'w').write('bye')", nil)
		st, _, b := h.raw("GET", fmt.Sprintf("/processes/%d/files/out/b.txt", p.PID), "", nil)
		if st != http.StatusOK || string(b) != "bye" {
			return fmt.Errorf("download: %d %q", st, b)
		}
		return nil
	}},
	{"session file paths with /", "(a path may contain `/`)", func(h *host) error {
		s := h.newSession(map[string]any{})
		defer h.do("DELETE", "/sessions/"+s.ID, nil, nil)
		if st, _, b := h.raw("PUT", "/sessions/"+s.ID+"/files/dir/c.txt", "text/plain", []byte("c")); st != http.StatusNoContent {
			return fmt.Errorf("upload: %d %s", st, b)
		}
		p := h.run("print(open('dir/c.txt').read())", session(s.ID))
		return expect(p, "c\n", p.Stdout)
	}},
	{"no network", "There is no network", func(h *host) error {
		p := h.run("import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('reached')\nexcept OSError:\n    print('unreachable')", nil)
		return expect(p, "unreachable\n", p.Stdout)
	}},
	{"asyncio where awaited", "a program that says `async` or\n`await` starts with asyncio imported", func(h *host) error {
		const had = "import sys\nprint('asyn' 'cio' in sys.modules)"
		if p := h.run(had+"  # async", nil); p.exit() != "success" || p.Stdout != "True\n" {
			return fmt.Errorf("a program that says async: %s %q %s", p.exit(), p.Stdout, p.Stderr)
		}
		p := h.run(had, nil)
		return expect(p, "False\n", p.Stdout)
	}},
	{"limits", "files up to\n  64 MiB, 256 open files", func(h *host) error {
		p := h.run("import resource\nprint(resource.getrlimit(resource.RLIMIT_FSIZE)[0] >> 20, resource.getrlimit(resource.RLIMIT_NOFILE)[0])", nil)
		return expect(p, "64 256\n", p.Stdout)
	}},
}

// packagesInGuide reads the guide's table of packages.
func packagesInGuide(doc string) map[string]string {
	out := map[string]string{}
	_, table, ok := strings.Cut(doc, "| package | version |\n| --- | --- |\n")
	if !ok {
		return out
	}
	for line := range strings.Lines(table) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != 4 {
			break
		}
		out[strings.ToLower(strings.TrimSpace(cells[1]))] = strings.TrimSpace(cells[2])
	}
	return out
}

// installedCode lists, inside the sandbox, every distribution a program can
// import from sys.path, with its version.
const installedCode = `import json, sys
from importlib import metadata
seen = {}
for d in metadata.distributions(path=sys.path):
    n = d.metadata["Name"]
    if n and n.lower() not in seen:
        seen[n.lower()] = d.version
print(json.dumps(seen))`

// checkGuide runs every capability and compares the guide with what ran,
// then the packages it lists with what a program can import.
func checkGuide(t *testing.T, h *host) string {
	t.Helper()
	st, _, b := h.raw("GET", "/environment/docs", "", nil)
	if st != http.StatusOK {
		t.Fatalf("docs: %d", st)
	}
	doc := string(b)
	for _, c := range capabilities {
		err := c.check(h)
		says := strings.Contains(doc, c.phrase)
		switch {
		case err == nil && !says:
			t.Errorf("the guide omits %s (%q), which the environment does", c.name, c.phrase)
		case err != nil && says:
			t.Errorf("the guide says %s (%q), which the environment does not do: %v", c.name, c.phrase, err)
		}
	}
	if strings.Contains(doc, "Nothing survives") {
		t.Error("the guide says nothing survives between programs; sessions keep state")
	}
	p := h.run(installedCode, nil)
	var installed map[string]string
	if err := json.Unmarshal([]byte(p.Stdout), &installed); err != nil {
		t.Fatalf("installed: %v %s %s", err, p.Stdout, p.Stderr)
	}
	listed := packagesInGuide(doc)
	for name, v := range installed {
		if listed[name] != v {
			t.Errorf("package %s %s is importable; the guide lists %q", name, v, listed[name])
		}
	}
	for name, v := range listed {
		if _, ok := installed[name]; !ok {
			t.Errorf("the guide lists %s %s, which a program cannot import", name, v)
		}
	}
	return doc
}

// TestGuideTellsTheTruth: every capability the Python guide names is one a
// program exercises, every one a program has is named, and the packages
// are those a program imports, with their versions: on the default
// interpreter, then on Debian's with the data stack, and with
// site-packages off (the standard library alone).
func TestGuideTellsTheTruth(t *testing.T) {
	t.Parallel()
	py := dataSciencePython(t)
	h := start(t, "", "CYRNEL_PYTHON="+py)
	doc := checkGuide(t, h)
	for _, pkg := range []string{"numpy", "pandas", "matplotlib"} {
		if _, ok := packagesInGuide(doc)[pkg]; !ok {
			t.Errorf("the guide does not list %s", pkg)
		}
	}
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"sitePackages": false}, nil); st != http.StatusOK {
		t.Fatalf("sitePackages off: %d", st)
	}
	doc = checkGuide(t, h)
	if !strings.Contains(doc, "Only the standard library") || len(packagesInGuide(doc)) != 0 {
		t.Errorf("site-packages off, the guide still lists packages:\n%s", doc)
	}
}

// TestFilePathsWithSlash: a file path in a session's or a process's files
// route may contain "/" unencoded (it was 404 no such route), means the
// same as %2F, and still cannot leave the workspace.
func TestFilePathsWithSlash(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	s := h.newSession(map[string]any{})
	base := "/sessions/" + s.ID + "/files/"
	if st, _, b := h.raw("PUT", base+"a/b/c.txt", "text/plain", []byte("abc")); st != http.StatusNoContent {
		t.Fatalf("put: %d %s", st, b)
	}
	for _, path := range []string{"a/b/c.txt", "a%2Fb/c.txt", "a%2Fb%2Fc.txt"} {
		if st, _, b := h.raw("GET", base+path, "", nil); st != http.StatusOK || string(b) != "abc" {
			t.Fatalf("get %s: %d %s", path, st, b)
		}
	}
	p := h.run("print(open('a/b/c.txt').read())", session(s.ID))
	if p.Stdout != "abc\n" {
		t.Fatalf("in the session: %q %s", p.Stdout, p.Stderr)
	}
	for _, path := range []string{"a/../../x", "a/%2E%2E/%2E%2E/x"} {
		req, _ := http.NewRequest("GET", h.base+base+path, nil)
		req.Header.Set("Authorization", "Bearer "+h.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("get %s: %d, want 422", path, resp.StatusCode)
		}
	}
	if st, _, b := h.raw("DELETE", base+"a/b/c.txt", "", nil); st != http.StatusNoContent {
		t.Fatalf("delete: %d %s", st, b)
	}
	p = h.run("import os\nos.makedirs('out/deep')\nopen('out/deep/d.txt', 'w').write('d')", nil)
	if st, _, b := h.raw("GET", fmt.Sprintf("/processes/%d/files/out/deep/d.txt", p.PID), "", nil); st != http.StatusOK || string(b) != "d" {
		t.Fatalf("process file: %d %s", st, b)
	}
}
