// Package sizes checks that no hand-written source file grows past the
// size the project keeps files under (docs/decisions.md, "Sizes").
package sizes

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxLines is the most lines a hand-written source file may have.
const maxLines = 600

// allowed are the files over maxLines for now, each with why. A file that
// is split must leave the list: the test fails while it stays.
var allowed = map[string]string{}

// sources are the extensions of the source files the check counts.
var sources = map[string]bool{".go": true, ".py": true, ".js": true, ".ts": true, ".mjs": true, ".sh": true}

// generated is the header that marks a generated file (the Go convention,
// also written by other generators after # or //).
var generated = regexp.MustCompile(`(?m)^(//|#) Code generated .* DO NOT EDIT\.$`)

// TestHandWrittenFilesStaySmall counts the lines of every source file git
// tracks, tests included, except vendored code, test data and generated
// files.
func TestHandWrittenFilesStaySmall(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files (the check counts the files git tracks): %v", err)
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if !handWrittenSource(name) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if generated.Match(b[:min(len(b), 1024)]) {
			continue
		}
		n := bytes.Count(b, []byte("\n"))
		if len(b) > 0 && b[len(b)-1] != '\n' {
			n++
		}
		_, listed := allowed[name]
		seen[name] = true
		switch {
		case n > maxLines && !listed:
			t.Errorf("%s has %d lines, more than %d: split it along the seams it names", name, n, maxLines)
		case n <= maxLines && listed:
			t.Errorf("%s has %d lines, no more than %d: take it off the allow-list", name, n, maxLines)
		}
	}
	for name := range allowed {
		if !seen[name] {
			t.Errorf("%s is on the allow-list but is not a tracked hand-written source file", name)
		}
	}
}

func handWrittenSource(name string) bool {
	if !sources[path.Ext(name)] || strings.HasSuffix(name, ".gen.go") {
		return false
	}
	for _, dir := range strings.Split(path.Dir(name), "/") {
		if dir == "vendor" || dir == "testdata" || dir == "node_modules" {
			return false
		}
	}
	return true
}
