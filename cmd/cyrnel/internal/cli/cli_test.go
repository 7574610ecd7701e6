package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cyrnel/cyrnel/host/datadir"
	"github.com/cyrnel/cyrnel/openapi/client"
)

// TestSettingPrecedence: a given flag wins over its variable, the variable
// over the default; an empty variable counts as unset.
func TestSettingPrecedence(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("addr", "", "")
	if err := Parse(fs, nil); err != nil {
		t.Fatal(err)
	}
	if got := Setting(fs, "addr", "CYRNEL_TEST_ADDR", "def"); got != "def" {
		t.Errorf("nothing set: %q", got)
	}
	t.Setenv("CYRNEL_TEST_ADDR", "")
	if got := Setting(fs, "addr", "CYRNEL_TEST_ADDR", "def"); got != "def" {
		t.Errorf("empty variable: %q", got)
	}
	t.Setenv("CYRNEL_TEST_ADDR", "env")
	if got := Setting(fs, "addr", "CYRNEL_TEST_ADDR", "def"); got != "env" {
		t.Errorf("variable: %q", got)
	}
	if err := Parse(fs, []string{"--addr", ""}); err != nil {
		t.Fatal(err)
	}
	if got := Setting(fs, "addr", "CYRNEL_TEST_ADDR", "def"); got != "" {
		t.Errorf("a flag given empty must win: %q", got)
	}
}

// TestParse: help is flag.ErrHelp, a bad flag ErrUsage; flags may follow
// the arguments.
// TestInterpreters: serve --python repeats, in order (the first is the
// default), and when given wins over CYRNEL_PYTHON, a ':'-separated list
// whose empty entries are dropped (DESIGN §13 "Interpreters").
func TestInterpreters(t *testing.T) {
	t.Setenv("CYRNEL_PYTHON", "/opt/py/bin/python3::python3.12:")
	if got := Interpreters(nil); !slices.Equal(got, []string{"/opt/py/bin/python3", "python3.12"}) {
		t.Errorf("from CYRNEL_PYTHON: %q", got)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var given Strings
	fs.Var(&given, "python", "")
	if err := Parse(fs, []string{"--python", "python3", "--python", "/venv/bin/python"}); err != nil {
		t.Fatal(err)
	}
	if got := Interpreters(given); !slices.Equal(got, []string{"python3", "/venv/bin/python"}) {
		t.Errorf("from --python twice: %q", got)
	}
	t.Setenv("CYRNEL_PYTHON", "")
	if got := Interpreters(nil); len(got) != 0 {
		t.Errorf("neither: %q, want none (the caller's default)", got)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	newFS := func() (*flag.FlagSet, *string) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.Usage = func() {}
		return fs, fs.String("timeout", "", "")
	}
	fs, _ := newFS()
	if err := Parse(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	fs, _ = newFS()
	if err := Parse(fs, []string{"--nope"}); !errors.Is(err, ErrUsage) {
		t.Errorf("--nope: %v", err)
	}
	fs, timeout := newFS()
	rest, err := parseInterspersed(fs, []string{"prog.py", "--timeout", "5s", "more", "--", "-x"})
	if err != nil || *timeout != "5s" || strings.Join(rest, " ") != "prog.py more -x" {
		t.Errorf("interspersed: %q, timeout %q, err %v", rest, *timeout, err)
	}
}

func TestNewLogger(t *testing.T) {
	t.Parallel()
	for _, l := range []string{"debug", "INFO", "warn", "error"} {
		if _, err := NewLogger(l, "text"); err != nil {
			t.Errorf("%s: %v", l, err)
		}
	}
	if _, err := NewLogger("loud", "text"); err == nil || !strings.Contains(err.Error(), "want debug, info, warn or error") {
		t.Errorf("loud: %v", err)
	}
	if _, err := NewLogger("info", "json"); err != nil {
		t.Errorf("json: %v", err)
	}
	if _, err := NewLogger("info", "xml"); err == nil || !strings.Contains(err.Error(), "want text or json") {
		t.Errorf("xml: %v", err)
	}
}

func TestEnvironmentOf(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{"a.py": "python", "B.PY": "python", "x.ts": "typescript", "x.js": "typescript", "-": "", "notes.txt": "", "py": ""} {
		if got := environmentOf(path); got != want {
			t.Errorf("environmentOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestServiceInput: a URL is fetched by the host, a file read here; config
// and secrets are JSON objects inline or @FILE.
func TestServiceInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	doc := filepath.Join(dir, "pets.yaml")
	sec := filepath.Join(dir, "secrets.json")
	os.WriteFile(doc, []byte("openapi: 3.0.0\n"), 0o600)
	os.WriteFile(sec, []byte(`{"api_key": "k"}`), 0o600)
	in, err := serviceInput("pets", doc, "openapi", `{"serverUrl": "http://x"}`, "@"+sec)
	if err != nil {
		t.Fatal(err)
	}
	if in.Source.Url != nil || deref(in.Source.Content) != "openapi: 3.0.0\n" || (*in.Config)["serverUrl"] != "http://x" || (*in.Secrets)["api_key"] != "k" {
		t.Errorf("input %+v", in)
	}
	in, err = serviceInput("pets", "https://example.com/pets.json", "openapi", "", "")
	if err != nil || deref(in.Source.Url) != "https://example.com/pets.json" || in.Source.Content != nil || in.Config != nil || in.Secrets != nil {
		t.Errorf("url input %+v, %v", in, err)
	}
	for _, c := range []struct{ source, config, secrets, want string }{
		{filepath.Join(dir, "missing.yaml"), "", "", "read service document"},
		{doc, "[1]", "", "--config: want a JSON object"},
		{doc, "", "@" + filepath.Join(dir, "nope.json"), "--secrets"},
		{doc, "", "{", "--secrets: want a JSON object"},
	} {
		if _, err := serviceInput("pets", c.source, "openapi", c.config, c.secrets); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c, err, c.want)
		}
	}
}

// TestWriteOutputToFile writes {} for none, and the object otherwise.
func TestWriteOutputToFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "out.json")
	if err := writeOutput(&result{}, file); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); string(b) != "{}\n" {
		t.Errorf("no output wrote %q", b)
	}
	if err := writeOutput(&result{output: map[string]any{"n": 1}}, file); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); string(b) != `{"n":1}`+"\n" {
		t.Errorf("output wrote %q", b)
	}
	var b bytes.Buffer
	showRest(&b, "hello world", 6)
	showRest(&b, "done", 4)
	if b.String() != "world" {
		t.Errorf("showRest %q", b.String())
	}
}

// fakeServer is a cyrnel API on loopback answering what the CLI helpers
// ask; it records the Authorization headers it got.
type fakeServer struct {
	mu    sync.Mutex
	auth  []string
	env   string // the active environment, "" for none
	waits int
}

func (f *fakeServer) start(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	js := func(w http.ResponseWriter, status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		env := "null"
		if f.env != "" {
			env = `"` + f.env + `"`
		}
		js(w, 200, `{"status":"ok","version":"t","environment":`+env+`}`)
	})
	mux.HandleFunc("GET /tools", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("cursor") == "" {
			js(w, 200, `{"items":[{"serviceId":"a","id":"x","name":"X","description":"First line\nsecond","enabled":true,"policy":"allow"},{"serviceId":"a","id":"y","name":"Why","description":"","enabled":false,"policy":"ask"}],"nextCursor":"c2","hasMore":true}`)
			return
		}
		js(w, 200, `{"items":[{"serviceId":"b","id":"z","name":"Z","description":"zed","enabled":true,"policy":"block"}],"nextCursor":null,"hasMore":false}`)
	})
	mux.HandleFunc("GET /tools/{s}/{t}/docs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
		fmt.Fprintf(w, "## %s.%s\n", r.PathValue("s"), r.PathValue("t"))
	})
	mux.HandleFunc("GET /services", func(w http.ResponseWriter, _ *http.Request) {
		js(w, 200, `{"items":[{"id":"pets","name":"Petstore","toolCount":3,"enabled":true}],"nextCursor":null,"hasMore":false}`)
	})
	mux.HandleFunc("GET /processes/{pid}/wait", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		f.waits++
		n := f.waits
		f.mu.Unlock()
		if n < 3 {
			js(w, 200, `{"pid":1,"state":"running","output":{},"stdout":"he","stderr":""}`)
			return
		}
		js(w, 200, `{"pid":1,"state":"idle","exitState":"failed","reason":"exception","error":"ValueError: boom","output":{"k":1},"stdout":"hello","stderr":""}`)
	})
	mux.HandleFunc("GET /modules/{id}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(404)
		fmt.Fprint(w, `{"title":"Not Found","status":404,"detail":"unknown module"}`)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// seen returns the Authorization headers and the count of waits, read
// under the lock the handlers write under.
func (f *fakeServer) seen() ([]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.auth), f.waits
}

// TestRemoteKey: the data directory's key goes to a server only when the
// caller allows it (a server on this machine); CYRNEL_API_KEY wins. A
// control: without the keyFile guard the key would reach the server.
func TestRemoteKey(t *testing.T) {
	dir := t.TempDir()
	d, err := datadir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := d.APIKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env     string
		keyFile bool
		want    string
	}{
		{"", false, ""}, {"", true, "Bearer " + key}, {"from-env", false, "Bearer from-env"}, {"from-env", true, "Bearer from-env"},
	} {
		t.Setenv("CYRNEL_API_KEY", c.env)
		f := &fakeServer{}
		h, err := remote(f.start(t), dir, c.keyFile)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Check(h.api.GetHealthWithResponse(context.Background())); err != nil {
			t.Fatal(err)
		}
		if auth, _ := f.seen(); len(auth) != 1 || auth[0] != c.want {
			t.Errorf("env %q keyFile %v: sent %q, want %q", c.env, c.keyFile, auth, c.want)
		}
	}
}

// TestListToolsFollowsEveryPage and prints one line per tool (the first
// line of its description, else its name), or each tool's docs.
func TestListToolsFollowsEveryPage(t *testing.T) {
	t.Parallel()
	f := &fakeServer{}
	h, err := remote(f.start(t), t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := listTools(context.Background(), &out, h, client.ListToolsParams{}, false); err != nil {
		t.Fatal(err)
	}
	want := "TOOL  ENABLED  POLICY  DESCRIPTION\na.x   true     allow   First line\na.y   false    ask     Why\nb.z   true     block   zed\n"
	if out.String() != want {
		t.Errorf("listing:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := listTools(context.Background(), &out, h, client.ListToolsParams{}, true); err != nil {
		t.Fatal(err)
	}
	if out.String() != "## a.x\n\n## a.y\n\n## b.z\n" {
		t.Errorf("docs:\n%s", out.String())
	}
	out.Reset()
	if err := listServices(context.Background(), &out, h); err != nil {
		t.Fatal(err)
	}
	if out.String() != "ID    TOOLS  ENABLED  NAME\npets  3      true     Petstore\n" {
		t.Errorf("services:\n%s", out.String())
	}
}

// TestWaitProcessPollsUntilIdle and reports how it ended.
func TestWaitProcessPollsUntilIdle(t *testing.T) {
	t.Parallel()
	f := &fakeServer{}
	h, err := remote(f.start(t), t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	res, err := waitProcess(context.Background(), h, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, waits := f.seen()
	if waits != 3 || res.exitState != "failed" || res.reason != "exception" || res.error != "ValueError: boom" || res.stdout != "hello" || res.output["k"] != 1.0 {
		t.Errorf("after %d waits: %+v", waits, res)
	}
}

// TestCheckEnvironment says what to do when the server's environment is
// not the program's.
func TestCheckEnvironment(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		active, want string
		embedded     bool
		err          string
	}{
		{"python", "python", false, ""},
		{"python", "", false, ""},
		{"", "", false, "has no active environment"},
		{"python", "typescript", false, `the server's active environment is python, not typescript: switch it with PUT /environment {"module": "typescript"}`},
		{"", "nope", true, "this cyrnel has no nope environment"},
	} {
		f := &fakeServer{env: c.active}
		h, err := remote(f.start(t), t.TempDir(), false)
		if err != nil {
			t.Fatal(err)
		}
		h.embedded = c.embedded
		err = checkEnvironment(context.Background(), h, c.want)
		if (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("active %q want %q: err %v, want %q", c.active, c.want, err, c.err)
		}
	}
}
