// Package docmap checks that docs/architecture.md, the map of the code,
// names every Go package and names none that is gone.
package docmap

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// row is a line of the package table: its first cell names one or more
// packages in backquotes.
var row = regexp.MustCompile("^\\| (`[^|]+`(?:, `[^|]+`)*) \\|")

// named is a backquoted name in such a cell.
var named = regexp.MustCompile("`([^`]+)`")

// TestArchitectureMapsEveryPackage: each directory under cmd/, envs/ and
// host/ holding non-test Go files is a row of the table, and each row names
// a directory that exists.
func TestArchitectureMapsEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	mapped := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, n := range named.FindAllStringSubmatch(m[1], -1) {
			mapped[strings.TrimSuffix(n[1], "/")] = true
		}
	}
	packages := map[string]bool{}
	for _, top := range []string{"cmd", "envs", "host"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				rel, _ := filepath.Rel(root, filepath.Dir(path))
				packages[filepath.ToSlash(rel)] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var missing, gone []string
	for p := range packages {
		if !mapped[p] {
			missing = append(missing, p)
		}
	}
	for m := range mapped {
		if _, err := os.Stat(filepath.Join(root, m)); err != nil {
			gone = append(gone, m)
		}
	}
	sort.Strings(missing)
	sort.Strings(gone)
	if len(missing) > 0 {
		t.Errorf("docs/architecture.md has no row for %v", missing)
	}
	if len(gone) > 0 {
		t.Errorf("docs/architecture.md names %v, which do not exist", gone)
	}
	if len(packages) < 20 {
		t.Fatalf("found only %d packages: the walk is wrong", len(packages))
	}
}
