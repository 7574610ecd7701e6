package python

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// archTags names this machine's architecture as wheel platform tags do.
var archTags = map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686"}

// buildInto builds the environment in a directory of its own next to dir
// and renames it into place: a reader never sees half an environment, and
// two hosts sharing the data directory build it at most twice, keeping one.
func buildInto(ctx context.Context, src PackageSource, dir, key string, reqs []requirement, version string) (*built, error) {
	if err := os.MkdirAll(src.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("packages: %w", err)
	}
	tmp, err := os.MkdirTemp(src.CacheDir, ".build-"+key+"-")
	if err != nil {
		return nil, fmt.Errorf("packages: %w", err)
	}
	defer os.RemoveAll(tmp)
	// Readable by the sandboxes' uids.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("packages: %w", err)
	}
	site := filepath.Join(tmp, "site")
	b := &built{Hash: key, Requires: map[string][]string{}}
	for i, r := range reqs {
		field := fmt.Sprintf("packages[%d]", i)
		ds, err := src.candidates(ctx, r.norm)
		if err != nil {
			return nil, &module.ConfigError{Field: field, Err: err}
		}
		d, v, err := pickWheel(r, ds, version, archTags[runtime.GOARCH])
		if err != nil {
			return nil, &module.ConfigError{Field: field, Err: err}
		}
		wheel, err := src.fetch(ctx, d)
		if err != nil {
			return nil, &module.ConfigError{Field: field, Err: err}
		}
		deps, err := unpack(d.filename, wheel, site)
		if err != nil {
			return nil, &module.ConfigError{Field: field, Err: err}
		}
		b.Packages = append(b.Packages, Package{Name: r.name, Version: v})
		b.Requires[r.norm] = deps
	}
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "cyrnel-env.json"), raw, 0o644); err != nil {
		return nil, fmt.Errorf("packages: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another host built it first: use theirs.
		if existing, rerr := readBuilt(dir); rerr == nil {
			return existing, nil
		}
		return nil, fmt.Errorf("packages: %w", err)
	}
	b.Site = filepath.Join(dir, "site")
	return b, nil
}

// checkDependencies refuses an environment whose packages need one that is
// neither declared nor in the base: dependencies are not resolved, the
// declared list is the whole environment (a lock file).
func checkDependencies(b *built, packages []string, base []Package) error {
	have := map[string]bool{}
	for _, p := range append(append([]Package{}, b.Packages...), base...) {
		have[normalize(p.Name)] = true
	}
	for i, p := range packages {
		r, _ := parseRequirement(p)
		var missing []string
		for _, d := range b.Requires[r.norm] {
			if !have[normalize(d)] {
				missing = append(missing, d)
			}
		}
		if len(missing) > 0 {
			return &module.ConfigError{Field: fmt.Sprintf("packages[%d]", i), Err: fmt.Errorf(
				"%s needs %s: declare it too (dependencies are not resolved: the list is the whole environment), or set systemSitePackages if the interpreter has it",
				r.name, strings.Join(missing, ", "))}
		}
	}
	return nil
}

// collectBuilds removes the environments under dir that keep does not name
// and nothing has used for grace (their directory's modification time is
// refreshed at each use), and build directories left by a crash.
func collectBuilds(dir string, keep map[string]bool, grace time.Duration) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if keep[e.Name()] {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < grace {
			continue
		}
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}
