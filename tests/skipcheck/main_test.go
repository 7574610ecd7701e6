package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fakeModule writes a module whose package skips holds a passing test, a
// test skipped for a reason on the allow-list, one (a subtest) skipped for
// a reason that is not, and whose package fails holds a failing test.
func fakeModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module fake\n\ngo 1.24\n",
		"skips/skips_test.go": `package skips

import "testing"

func TestRuns(t *testing.T) {}

func TestUnprivileged(t *testing.T) {
	t.Log("probing")
	t.Skip("this process is unprivileged already; every other test covers it")
}

func TestDatabase(t *testing.T) {
	t.Run("postgres", func(t *testing.T) { t.Skip("the database was not there") })
}
`,
		"fails/fails_test.go": `package fails

import "testing"

func TestBroken(t *testing.T) { t.Fatal("broken on purpose") }
`,
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goTestJSON runs go test -json on pkg of the module in dir.
func goTestJSON(t *testing.T, dir, pkg string) []byte {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "test", "-json", "-count=1", pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, _ := cmd.Output() // a failing package exits 1; its events say so
	if !bytes.Contains(out, []byte(`"Action":"start"`)) {
		t.Fatalf("go test -json %s gave no events:\n%s", pkg, out)
	}
	return out
}

// TestASkipOutsideTheAllowListFails: a real go test run whose subtest
// skips for a reason not on the allow-list fails the check, which names it;
// the allowed skip is listed as allowed. Control: with that reason added to
// the list, the same run passes.
func TestASkipOutsideTheAllowListFails(t *testing.T) {
	t.Parallel()
	rules, err := readAllowList("../skips.allow")
	if err != nil {
		t.Fatal(err)
	}
	run := goTestJSON(t, fakeModule(t), "./skips")

	var out bytes.Buffer
	err = check(bytes.NewReader(run), &out, rules)
	if err == nil || !strings.Contains(err.Error(), "1 tests skipped for a reason not on the allow-list") {
		t.Errorf("check: %v, want a failure for one skip", err)
	}
	for _, want := range []string{
		"ok  \tfake/skips",
		"2 tests skipped:",
		"fake/skips.TestUnprivileged: probing / this process is unprivileged already; every other test covers it [allowed (allow-list line",
		"fake/skips.TestDatabase/postgres: the database was not there [NOT ALLOWED]",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	allowed := append(rules, rule{re: regexp.MustCompile("database was not there"), line: 99})
	if err := check(bytes.NewReader(run), &out, allowed); err != nil {
		t.Errorf("with the reason allowed: %v\n%s", err, out.String())
	}
}

// TestAFailedTestFailsTheCheck: a failing test fails the check, which
// prints its output (a skip-free run is not enough).
func TestAFailedTestFailsTheCheck(t *testing.T) {
	t.Parallel()
	run := goTestJSON(t, fakeModule(t), "./fails")
	var out bytes.Buffer
	if err := check(bytes.NewReader(run), &out, nil); err == nil || err.Error() != "tests failed" {
		t.Errorf("check: %v, want tests failed", err)
	}
	for _, want := range []string{"broken on purpose", "FAIL\tfake/fails", "no test skipped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBuildFailureIsShown: a package that does not compile fails the
// check with the compiler's message.
func TestBuildFailureIsShown(t *testing.T) {
	t.Parallel()
	dir := fakeModule(t)
	if err := os.WriteFile(filepath.Join(dir, "fails", "fails_test.go"), []byte("package fails\n\nfunc broken() { undefinedName() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := goTestJSON(t, dir, "./fails")
	var out bytes.Buffer
	if err := check(bytes.NewReader(run), &out, nil); err == nil {
		t.Error("a build failure passed the check")
	}
	if !strings.Contains(out.String(), "undefined: undefinedName") {
		t.Errorf("output lacks the compiler's message:\n%s", out.String())
	}
}
