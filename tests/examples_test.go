package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fence is a shell example: a ```sh (or bash) block, and the HTML comment
// `<!-- not run: why -->` when one stands on the line before it.
var fence = regexp.MustCompile("(?ms)(<!-- not run: ([^>]*)-->\\n)?^```(?:sh|bash|shell|console)\\n(.*?)^```")

type example struct {
	file   string
	line   int
	skip   string // why it is not run ("" when it is)
	script string
}

// examples are the shell examples of the README and docs/, in order.
func examples(t *testing.T) []example {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []example
	for _, f := range append([]string{"../README.md"}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fence.FindAllSubmatchIndex(b, -1) {
			e := example{file: filepath.Base(f), line: 1 + strings.Count(string(b[:m[6]]), "\n"), script: string(b[m[6]:m[7]])}
			if m[4] >= 0 {
				e.skip = strings.TrimSpace(string(b[m[4]:m[5]]))
			}
			out = append(out, e)
		}
	}
	return out
}

// TestShellExamplesRunAsWritten runs every shell example of the README and
// docs/ with bash, in order, in one directory that looks like the
// repository after `make build` (bin/, host/ for the fixtures, cyrnel-data/
// of a running server), as a person pasting them would: only the port
// changes (the server's requests pass the validating proxy, which listens
// elsewhere), `make build` is what the test already did, and the petstore's
// example.com server is a local one. Each example must end with exit
// status 0; no request may be answered 401 or 5xx, or break the document.
// An example that cannot run here says why in a `<!-- not run: … -->` line.
func TestShellExamplesRunAsWritten(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h0 := start(t, filepath.Join(dir, "cyrnel-data"))
	h, c := validated(t, h0)
	up := newUpstream(t)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"bin": filepath.Dir(binary), "host": filepath.Join(repo, "host")} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	port := h.base[strings.LastIndex(h.base, ":")+1:]
	subst := strings.NewReplacer(
		":9371", ":"+port,
		// The petstore's server is a local one, which needs
		// allowPrivateNetwork: in the CLI's JSON and in the Python dict.
		`{"serverUrl": "https://petstore.example.com/v1"}'`, fmt.Sprintf(`{"serverUrl": %q, "allowPrivateNetwork": true}'`, up.URL),
		`{"serverUrl": "https://petstore.example.com/v1"}}`, fmt.Sprintf(`{"serverUrl": %q, "allowPrivateNetwork": True}}`, up.URL),
	)
	// One shell per file, the examples in order: a variable one sets
	// (auth, pid) is there for the next, as in a terminal.
	scripts := map[string]*strings.Builder{}
	var files []string
	ran := 0
	for _, e := range examples(t) {
		where := fmt.Sprintf("%s:%d", e.file, e.line)
		if e.skip != "" {
			t.Logf("%s not run: %s", where, e.skip)
			continue
		}
		script := scripts[e.file]
		if script == nil {
			script = &strings.Builder{}
			scripts[e.file] = script
			files = append(files, e.file)
		}
		for _, line := range strings.Split(subst.Replace(e.script), "\n") {
			if line == "make build" || strings.HasPrefix(line, "make build ") {
				line = ": " + line // the binaries are built (TestMain)
			}
			script.WriteString(line + "\n")
		}
		fmt.Fprintf(script, "echo \"::example %s exit $?::\"\n", where)
		ran++
	}
	done := regexp.MustCompile(`::example (\S+) exit (\d+)::`)
	for _, f := range files {
		cmd := exec.Command("bash", "--noprofile", "--norc", "-c", scripts[f].String())
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"), "CYRNEL_API_KEY=", "CYRNEL_SERVER=")
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v", f, err)
		}
		for _, m := range done.FindAllStringSubmatch(string(out), -1) {
			if m[2] != "0" {
				t.Errorf("the example at %s ended with exit status %s", m[1], m[2])
			}
		}
		if t.Failed() {
			t.Logf("%s's examples printed:\n%s", f, out)
		}
	}
	bad, seen := c.violations()
	for _, v := range bad {
		t.Error(v)
	}
	for k := range seen {
		if strings.HasSuffix(k, " 401") || strings.HasSuffix(k, " 500") || strings.HasSuffix(k, " 502") || strings.HasSuffix(k, " 503") {
			t.Errorf("an example's request was answered %s", k)
		}
	}
	if ran < 8 {
		t.Errorf("only %d examples ran", ran)
	}
}
