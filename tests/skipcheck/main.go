// Command skipcheck reads `go test -json` from its input and fails the run
// on a skipped test whose reason is not on the allow-list (tests/skips.allow:
// the reasons this machine truly cannot meet), so a suite cannot pass by
// skipping itself. It prints what `go test` without -v would (each
// package's result, the output of failed tests, build errors), then every
// skipped test with its reason, allowed or not.
//
//	go test -json ./... | go run ./tests/skipcheck -allow tests/skips.allow
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

func main() {
	allowFile := flag.String("allow", "tests/skips.allow", "the allow-list: one regular expression per line, matched against a skip's reason")
	flag.Parse()
	rules, err := readAllowList(*allowFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipcheck:", err)
		os.Exit(2)
	}
	if err := check(os.Stdin, os.Stdout, rules); err != nil {
		fmt.Fprintln(os.Stderr, "skipcheck:", err)
		os.Exit(1)
	}
}

// rule is one entry of the allow-list.
type rule struct {
	re   *regexp.Regexp
	line int
}

// readAllowList reads the allow-list: one regular expression per line;
// blank lines and lines starting with # are ignored.
func readAllowList(path string) ([]rule, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rules []rule
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		re, err := regexp.Compile(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		rules = append(rules, rule{re: re, line: n})
	}
	return rules, sc.Err()
}

// event is one line of `go test -json` (go doc test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build output
	Test       string
	Output     string
}

// skip is a skipped test and the reason it gave.
type skip struct {
	name, reason string
	rule         int // the allow-list line that allows it; 0: none
}

// check copies the run's results from r to w and fails if a test or
// package failed or a test skipped for a reason no rule allows.
func check(r io.Reader, w io.Writer, rules []rule) error {
	output := map[string][]string{} // of each running test, by package and name
	var skips []skip
	failed := false
	passes, fails := 0, 0
	dec := json.NewDecoder(r)
	for {
		var e event
		if err := dec.Decode(&e); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("reading go test -json: %w", err)
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Action == "build-fail":
			failed = true
		case e.Test == "" && e.Action == "output":
			fmt.Fprint(w, e.Output) // a package's result, or what it printed outside any test
		case e.Test == "" && e.Action == "fail":
			failed = true
		case e.Test == "":
		case e.Action == "output":
			output[key] = append(output[key], e.Output)
		case e.Action == "fail":
			failed = true
			fails++
			fmt.Fprint(w, strings.Join(output[key], ""))
			delete(output, key)
		case e.Action == "skip":
			s := skip{name: e.Package + "." + e.Test, reason: reason(output[key])}
			for _, ru := range rules {
				if ru.re.MatchString(s.reason) {
					s.rule = ru.line
					break
				}
			}
			skips = append(skips, s)
			delete(output, key)
		case e.Action == "pass":
			passes++
			delete(output, key)
		}
	}
	refused := report(w, skips)
	// The plain closing line a reader of the log counts by.
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped\n", passes, fails, len(skips))
	switch {
	case failed:
		return errors.New("tests failed")
	case refused > 0:
		return fmt.Errorf("%d tests skipped for a reason not on the allow-list: make them run here, or, if this machine truly cannot meet it, add the reason to the allow-list with why", refused)
	}
	return nil
}

// report lists the skipped tests and returns how many no rule allows.
func report(w io.Writer, skips []skip) int {
	if len(skips) == 0 {
		fmt.Fprintln(w, "no test skipped")
		return 0
	}
	refused := 0
	fmt.Fprintf(w, "%d tests skipped:\n", len(skips))
	for _, s := range skips {
		verdict := fmt.Sprintf("allowed (allow-list line %d)", s.rule)
		if s.rule == 0 {
			verdict = "NOT ALLOWED"
			refused++
		}
		fmt.Fprintf(w, "  %s: %s [%s]\n", s.name, s.reason, verdict)
	}
	return refused
}

// frame matches the lines go test writes around a test's own output.
var frame = regexp.MustCompile(`^\s*(=== (RUN|PAUSE|CONT|NAME)|--- (SKIP|PASS|FAIL))`)

// logPrefix is the file:line prefix of a t.Log or t.Skip line.
var logPrefix = regexp.MustCompile(`^\s*[^\s:]+\.go:\d+: `)

// reason is what a skipped test said: its output without go test's frame
// lines and the file:line prefixes.
func reason(lines []string) string {
	var parts []string
	for _, l := range lines {
		if frame.MatchString(l) {
			continue
		}
		if l = strings.TrimSpace(logPrefix.ReplaceAllString(l, "")); l != "" {
			parts = append(parts, l)
		}
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " / ")
}
