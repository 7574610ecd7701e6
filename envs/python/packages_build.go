package python

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Builds are this host's package builds: each environment is built once
// when several set-ups ask for it at once, and a build in progress (or the
// last failed one) is visible to Status while the set-up that asked for it
// waits. Every environment the host makes shares one.
type Builds struct {
	group singleflight.Group

	mu      sync.Mutex
	seq     uint64                 // counts the builds asked for
	running map[string]*buildState // by hash
	failed  *buildState            // the last build that failed
}

// NewBuilds returns an empty record of builds.
func NewBuilds() *Builds { return &Builds{running: map[string]*buildState{}} }

type buildState struct {
	seq      uint64
	hash     string
	progress string
	err      string
}

// begin records a build of hash asked for and returns its sequence number.
func (bs *Builds) begin(hash string) uint64 {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.seq++
	if s, ok := bs.running[hash]; ok {
		s.seq = bs.seq
	} else {
		bs.running[hash] = &buildState{seq: bs.seq, hash: hash, progress: "starting"}
	}
	return bs.seq
}

func (bs *Builds) progress(hash, line string) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if s, ok := bs.running[hash]; ok {
		s.progress = line
	}
}

func (bs *Builds) end(hash string, seq uint64, err error) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	delete(bs.running, hash)
	if err != nil {
		bs.failed = &buildState{seq: seq, hash: hash, err: err.Error()}
	}
}

// status is status.build for an environment whose own build is own (nil:
// none) and was asked for as since: a build running now, else the last
// failed one when it is newer, else own.
func (bs *Builds) status(own map[string]any, since uint64) map[string]any {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	var latest *buildState
	for _, s := range bs.running {
		if latest == nil || s.seq > latest.seq {
			latest = s
		}
	}
	switch {
	case latest != nil:
		return map[string]any{"state": "building", "hash": latest.hash, "progress": latest.progress}
	case bs.failed != nil && bs.failed.seq > since:
		return map[string]any{"state": "failed", "hash": bs.failed.hash, "error": bs.failed.err}
	}
	return own
}

// built is an environment on disk: its site directory and what is in it.
type built struct {
	Hash     string    `json:"hash"`
	Site     string    `json:"-"`
	Packages []Package `json:"packages"`
}

// buildKey is the content hash of an environment: the interpreter, its
// version, the requirements (in order), where they come from and, when
// the interpreter's own packages may satisfy dependencies, those.
func buildKey(exe, version string, packages []string, src PackageSource, base []Package) string {
	b, _ := json.Marshal([]any{exe, version, packages, src.Index, src.FindLinks, base})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// buildRequest is what an environment is built from.
type buildRequest struct {
	exe, version string
	site         []string  // the interpreter's site directories
	packages     []string  // config.packages
	base         []Package // the interpreter's packages, with systemSitePackages; nil without
	system       bool
}

// build returns the environment for req, building it unless the cache has
// it, and the build's sequence number. A package that cannot be installed
// is a ConfigError at packages[i] (packages when pip names none).
func (bs *Builds) build(ctx context.Context, log *slog.Logger, src PackageSource, req buildRequest) (*built, uint64, error) {
	reqs := make([]requirement, len(req.packages))
	for i, p := range req.packages {
		r, err := parseRequirement(p)
		if err != nil {
			return nil, 0, &module.ConfigError{Field: fmt.Sprintf("packages[%d]", i), Err: err}
		}
		reqs[i] = r
	}
	key := buildKey(req.exe, req.version, req.packages, src, req.base)
	// Absolute: the environment's site becomes a sandbox read path.
	cache, err := filepath.Abs(src.CacheDir)
	if err != nil {
		return nil, 0, fmt.Errorf("packages: %w", err)
	}
	src.CacheDir = cache
	dir := filepath.Join(cache, key)
	if b, err := readBuilt(dir); err == nil {
		return b, bs.next(), nil
	}
	seq := bs.begin(key)
	v, err, _ := bs.group.Do(dir, func() (any, error) {
		if b, err := readBuilt(dir); err == nil {
			return b, nil
		}
		log.Info("building python packages", "hash", key, "packages", req.packages)
		return buildInto(ctx, log, src, dir, key, reqs, req, func(line string) {
			log.Info("python packages", "hash", key, "progress", line)
			bs.progress(key, line)
		})
	})
	bs.end(key, seq, err)
	if err != nil {
		return nil, 0, err
	}
	return v.(*built), seq, nil
}

// next numbers a set-up that needs no build (found in the cache, or no
// packages): it is newer than any build that failed before it.
func (bs *Builds) next() uint64 {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.seq++
	return bs.seq
}

// buildInto resolves the environment with pip, fetches each wheel pip
// chose (checked against its sha256) and unpacks it, checked against its
// RECORD, in a directory of its own next to dir, then renames it into
// place: a reader never sees half an environment, and two hosts sharing
// the data directory build it at most twice, keeping one.
func buildInto(ctx context.Context, log *slog.Logger, src PackageSource, dir, key string, reqs []requirement, req buildRequest, progress func(string)) (*built, error) {
	gate, err := openGate(log, src.origins())
	if err != nil {
		return nil, err
	}
	wheels, err := src.resolve(ctx, req, reqs, gate, progress)
	gate.close()
	if err != nil {
		return nil, err
	}
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
	b := &built{Hash: key, Packages: []Package{}}
	for i, w := range wheels {
		progress(fmt.Sprintf("installing %d of %d: %s %s", i+1, len(wheels), w.pkg.Name, w.pkg.Version))
		wheel, err := src.fetch(ctx, w.dist)
		if err == nil {
			err = unpack(w.filename, wheel, site)
		}
		if err != nil {
			return nil, &module.ConfigError{Field: wheelField(reqs, w.pkg.Name), Err: err}
		}
		b.Packages = append(b.Packages, w.pkg)
	}
	slices.SortFunc(b.Packages, func(x, y Package) int { return cmp.Compare(normalize(x.Name), normalize(y.Name)) })
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

// wheelField is where a wheel that cannot be installed is reported: at the
// declared package of its name, else at packages (a dependency).
func wheelField(reqs []requirement, name string) string {
	if i := slices.IndexFunc(reqs, func(r requirement) bool { return r.norm == normalize(name) }); i >= 0 {
		return fmt.Sprintf("packages[%d]", i)
	}
	return "packages"
}

func readBuilt(dir string) (*built, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "cyrnel-env.json"))
	if err != nil {
		return nil, err
	}
	var b built
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, err
	}
	b.Site = filepath.Join(dir, "site")
	return &b, nil
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
