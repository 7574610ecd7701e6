package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cyrnel/cyrnel/openapi/client"
)

// cliResult is what one cyrnel command printed and how it exited.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cliCommand prepares the binary with args in dir, with no CYRNEL_ variables
// from the developer's environment, only env.
func cliCommand(dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CYRNEL_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

func cli(t *testing.T, dir, stdin string, env []string, args ...string) cliResult {
	t.Helper()
	cmd := cliCommand(dir, env, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("cyrnel %v: %v", args, err)
	}
	return cliResult{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCLIRunEmbedded(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{
		"ok.py":      "print('line 0')\nprint('line 1')\ncyrnel.output({'answer': 42})\ncyrnel.output({'list': [1, 2]})",
		"plain.py":   "print('no output')",
		"fails.py":   "x = 1\nraise ValueError('boom')",
		"forever.py": "while True: pass",
	})
	r := cli(t, dir, "", nil, "run", "ok.py")
	var out map[string]any
	stdout, outJSON, _ := strings.Cut(r.stdout, "line 1\n")
	if r.code != 0 || stdout != "line 0\n" || json.Unmarshal([]byte(outJSON), &out) != nil || out["answer"] != 42.0 {
		t.Fatalf("ok.py: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "cyrnel-data")); err != nil {
		t.Fatalf("the embedded host did not use ./cyrnel-data: %v", err)
	}
	if r = cli(t, dir, "", nil, "run", "plain.py"); r.code != 0 || r.stdout != "no output\n" {
		t.Fatalf("a program without output prints no JSON: %+v", r)
	}
	r = cli(t, dir, "", nil, "run", "fails.py")
	if r.code != 1 || !strings.Contains(r.stderr, "Traceback") || !strings.Contains(r.stderr, "failed (exception): ValueError: boom") {
		t.Fatalf("fails.py: %+v", r)
	}
	if r = cli(t, dir, "", nil, "run", "forever.py", "--timeout", "300ms"); r.code != 3 || !strings.Contains(r.stderr, "timed out") {
		t.Fatalf("timeout: %+v", r)
	}
	if r = cli(t, dir, "import sys\nprint(sys.version_info[0])", nil, "run", "-"); r.code != 0 || r.stdout != "3\n" {
		t.Fatalf("stdin: %+v", r)
	}
	outFile := filepath.Join(dir, "out.json")
	if r = cli(t, dir, "", nil, "run", "--output", outFile, "ok.py"); r.code != 0 || r.stdout != "line 0\nline 1\n" {
		t.Fatalf("--output: %+v", r)
	}
	if b, err := os.ReadFile(outFile); err != nil || !strings.Contains(string(b), `"answer":42`) {
		t.Fatalf("--output file: %s %v", b, err)
	}
	for _, args := range [][]string{{"run"}, {"run", "a.py", "b.py"}, {"run", "missing.py"}, {"run", "--bogus", "ok.py"}} {
		if r = cli(t, dir, "", nil, args...); r.code != 2 {
			t.Fatalf("%v: want usage error 2: %+v", args, r)
		}
	}
	if r = cli(t, dir, "", nil, "run", "--help"); r.code != 0 || !strings.Contains(r.stdout, "Exit codes:") || r.stderr != "" {
		t.Fatalf("--help: %+v", r)
	}
}

// TestCLIRunServer streams a program through a running server, shows its
// first line while it still runs, and stops it with Ctrl-C.
func TestCLIRunServer(t *testing.T) {
	t.Parallel()
	h := start(t, "", "CYRNEL_API_KEY=k3y")
	dir := writeFiles(t, map[string]string{
		"slow.py":  "import time\nprint('started')\ntime.sleep(60)\nprint('never')",
		"hello.ts": "console.log('hi')",
	})
	env := []string{"CYRNEL_API_KEY=k3y"}
	cmd := cliCommand(dir, env, "run", "--server", h.base, "slow.py")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "started" {
		t.Fatalf("first line %q; stderr %s", lines.Text(), &stderr)
	}
	// The line arrived while the program runs (it sleeps a minute).
	c := apiClient(t, h)
	running := must[*client.ListProcessesResponse](t)(c.ListProcessesWithResponse(deadline(t), &client.ListProcessesParams{Ref: ptr("slow.py")})).JSON200.Items
	if len(running) != 1 || running[0].State != client.ProcessSummaryStateRunning {
		t.Fatalf("process behind the first line: %+v", running)
	}
	cmd.Process.Signal(syscall.SIGINT)
	rest := ""
	for lines.Scan() {
		rest += lines.Text()
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 4 || rest != "" || !strings.Contains(stderr.String(), "canceled (killed)") {
		t.Fatalf("after Ctrl-C: code %d (%v), stdout %q, stderr %s", code, err, rest, &stderr)
	}

	r := cli(t, dir, "print(6 * 7)", env, "run", "--server", h.base, "-")
	if r.code != 0 || r.stdout != "42\n" {
		t.Fatalf("stdin through the server: %+v", r)
	}
	r = cli(t, dir, "print(1)", []string{"CYRNEL_SERVER=" + h.base, "CYRNEL_API_KEY=k3y"}, "run", "-")
	if r.code != 0 || r.stdout != "1\n" {
		t.Fatalf("CYRNEL_SERVER: %+v", r)
	}
	if r = cli(t, dir, "print(1)", nil, "run", "--server", h.base, "-"); r.code != 5 || !strings.Contains(r.stderr, "401") {
		t.Fatalf("without the key: %+v", r)
	}
	// The server runs Python: a TypeScript file says how to switch.
	if r = cli(t, dir, "", env, "run", "--server", h.base, "hello.ts"); r.code != 5 || !strings.Contains(r.stderr, "PUT /environment") {
		t.Fatalf("environment mismatch: %+v", r)
	}
	// An environment cyrnel does not have is a usage error naming the ones
	// it has, not a call to suggest (PUT /environment ruby is 422).
	if r = cli(t, dir, "", env, "run", "--server", h.base, "--env", "ruby", "hello.ts"); r.code != 2 || !strings.Contains(r.stderr, "want python or typescript") || strings.Contains(r.stderr, "PUT /environment") {
		t.Fatalf("--env ruby: %+v", r)
	}
}

func TestCLIRunTypeScript(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{"hello.ts": "const n: number = 6 * 7\nconsole.log('hi', n)\ncyrnel.output({n})"})
	r := cli(t, dir, "", nil, "run", "hello.ts")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "hi 42\n") || !strings.Contains(r.stdout, `"n": 42`) {
		t.Fatalf("hello.ts: %+v", r)
	}
	// The override lasts for that run only: the data directory still runs
	// Python.
	if r = cli(t, dir, "print('py')", nil, "run", "-"); r.code != 0 || r.stdout != "py\n" {
		t.Fatalf("after a .ts run: %+v", r)
	}
}

func TestCLIServicesAndTools(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	dir := t.TempDir()
	doc, err := filepath.Abs(filepath.Join(fixtures, "petstore-3.0.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	srv := []string{"--server", h.base}
	key := []string{"CYRNEL_API_KEY=" + h.key}
	r := cli(t, dir, "", key, append([]string{"services", "add", "petstore", doc}, srv...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "added service petstore") || !strings.Contains(r.stdout, "petstore.showPetById") {
		t.Fatalf("services add: %+v", r)
	}
	if r = cli(t, dir, "", key, append([]string{"services", "add", "petstore", doc}, srv...)...); r.code != 1 || !strings.Contains(r.stderr, "409") {
		t.Fatalf("services add twice: %+v", r)
	}
	if r = cli(t, dir, "", key, append([]string{"services", "list"}, srv...)...); r.code != 0 || !strings.Contains(r.stdout, "petstore  3") {
		t.Fatalf("services list: %+v", r)
	}
	r = cli(t, dir, "", key, append([]string{"tools", "--service", "petstore", "specific pet"}, srv...)...)
	if lines := strings.Split(r.stdout, "\n"); r.code != 0 || len(lines) < 2 || !strings.HasPrefix(lines[1], "petstore.showPetById") {
		t.Fatalf("tools QUERY: the best match first: %+v", r)
	}
	// The README's words, unquoted, as several arguments.
	r = cli(t, dir, "", key, append([]string{"tools", "show", "one", "pet"}, srv...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "petstore.showPetById") {
		t.Fatalf("tools show one pet: %+v", r)
	}
	// A tool's id shows that tool alone; the control is a search by words,
	// which lists several.
	r = cli(t, dir, "", key, append([]string{"tools", "--docs", "--service", "petstore", "showPetById"}, srv...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "cyrnel.services.petstore.showPetById(") || strings.Contains(r.stdout, "cyrnel.services.petstore.listPets(") {
		t.Fatalf("tools --docs showPetById: %+v", r)
	}
	r = cli(t, dir, "", key, append([]string{"tools", "--docs", "--service", "petstore", "pets"}, srv...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "cyrnel.services.petstore.listPets(") || !strings.Contains(r.stdout, "cyrnel.services.petstore.createPets(") {
		t.Fatalf("tools --docs pets: %+v", r)
	}
	if r = cli(t, dir, "", key, append([]string{"services", "remove", "petstore"}, srv...)...); r.code != 0 {
		t.Fatalf("services remove: %+v", r)
	}
	if r = cli(t, dir, "", key, append([]string{"tools"}, srv...)...); r.code != 0 || strings.Contains(r.stdout, "petstore") {
		t.Fatalf("tools after remove: %+v", r)
	}

	// Embedded: the service is stored in the data directory, where the next
	// run finds it.
	r = cli(t, dir, "", nil, "services", "add", "pets", doc, "--config", `{"serverUrl": "http://127.0.0.1:1"}`)
	if r.code != 0 || !strings.Contains(r.stdout, "added service pets") {
		t.Fatalf("embedded services add: %+v", r)
	}
	r = cli(t, dir, "print(callable(cyrnel.services.pets.listPets))", nil, "run", "-")
	if r.code != 0 || r.stdout != "True\n" {
		t.Fatalf("a run sees the added service: %+v", r)
	}
	for _, args := range [][]string{{"services"}, {"services", "add", "x"}, {"services", "frobnicate"}} {
		if r = cli(t, dir, "", nil, args...); r.code == 0 {
			t.Fatalf("%v: want an error: %+v", args, r)
		}
	}
	for _, cmd := range []string{"services", "tools"} {
		if r = cli(t, dir, "", nil, cmd, "--help"); r.code != 0 || !strings.Contains(r.stdout, "Usage") || r.stderr != "" {
			t.Fatalf("%s --help: %+v", cmd, r)
		}
	}
}
