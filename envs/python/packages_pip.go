package python

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cyrnel/cyrnel/envs/affinity"
	"github.com/cyrnel/cyrnel/envs/module"
)

// pipWheels is where Debian's python3-pip-whl keeps pip as a wheel, which
// any CPython 3.7+ runs without installing it.
const pipWheels = "/usr/share/python-wheels"

// resolveTimeout bounds one resolution (pip's own network timeouts apply
// to each request).
const resolveTimeout = 10 * time.Minute

// findPip returns the path of a pip wheel.
func findPip() (string, error) {
	found, _ := filepath.Glob(filepath.Join(pipWheels, "pip-*.whl"))
	if len(found) == 0 {
		return "", fmt.Errorf("no pip to resolve packages with: %s/pip-*.whl is missing (Debian: apt-get install python3-pip-whl)", pipWheels)
	}
	slices.Sort(found)
	return found[len(found)-1], nil
}

// pipReport is the part of pip's installation report (pip install
// --dry-run --report) the host reads: what pip would install, from where.
type pipReport struct {
	Install []struct {
		DownloadInfo struct {
			URL         string `json:"url"`
			ArchiveInfo struct {
				Hash   string            `json:"hash"`
				Hashes map[string]string `json:"hashes"`
			} `json:"archive_info"`
		} `json:"download_info"`
		Metadata struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"metadata"`
	} `json:"install"`
}

// resolved is one wheel of a resolution.
type resolved struct {
	dist
	pkg Package
}

// resolve asks pip which wheels make up the environment of reqs, without
// installing anything: pip install --dry-run --report, wheels only, from
// the operator's source only, through gate (the only network pip is
// given: --proxy, with no environment variable to name another or exempt a
// host). pip runs as the declared interpreter (so its tags and markers are
// the interpreter's), isolated and without site (no .pth file runs), with
// the wheel's pip first on sys.path; with req.system, the interpreter's
// site directories are on its path, so what is installed there satisfies
// a dependency. Each line pip prints goes to progress. A requirement pip
// cannot satisfy, or whose file is outside the allowed origins, is a
// ConfigError.
func (src PackageSource) resolve(ctx context.Context, req buildRequest, reqs []requirement, gate *gate, progress func(string)) ([]resolved, error) {
	pip, err := findPip()
	if err != nil {
		return nil, &module.ConfigError{Field: "packages", Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	work, err := os.MkdirTemp("", "cyrnel-pip-")
	if err != nil {
		return nil, fmt.Errorf("packages: %w", err)
	}
	defer os.RemoveAll(work)
	report := filepath.Join(work, "report.json")
	paths := []string{pip}
	if req.system {
		paths = append(paths, req.site...)
	}
	boot := "import sys, runpy; sys.path[:0] = sys.argv.pop(1).split('\\n'); sys.argv[0] = 'pip'; runpy.run_module('pip', run_name='__main__', alter_sys=True)"
	args := []string{"-I", "-S", "-c", boot, strings.Join(paths, "\n"),
		"install", "--dry-run", "--report", report, "--only-binary=:all:", "--isolated", "--no-input",
		"--disable-pip-version-check", "--no-cache-dir", "--progress-bar", "off", "--proxy", gate.url}
	if !req.system {
		args = append(args, "--ignore-installed")
	}
	if src.FindLinks != "" {
		args = append(args, "--no-index", "--find-links", src.FindLinks)
	} else {
		args = append(args, "--index-url", src.Index)
	}
	cmd := exec.CommandContext(ctx, req.exe, append(append(args, "--"), req.packages...)...)
	// Only these: no *_PROXY, NO_PROXY, PIP_*, REQUESTS_CA_BUNDLE or
	// NETRC, and a HOME without .netrc or pip.conf.
	cmd.Dir, cmd.Env = work, []string{"HOME=" + work, "LANG=C.UTF-8", "PATH=/usr/bin:/bin"}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("packages: %w", err)
	}
	var stderr tailBuffer
	cmd.Stderr = &stderr
	if err := affinity.Process.Spawn(cmd.Start); err != nil {
		return nil, fmt.Errorf("packages: run pip: %w", err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			progress(line)
		}
	}
	_, _ = io.Copy(io.Discard, stdout) // a line beyond the scanner's limit
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("packages: resolving with pip: %w", ctx.Err())
		}
		if u := gate.firstRefused(); u != "" {
			return nil, refusedFile(reqs, u, stderr.String())
		}
		return nil, src.pipFailed(ctx, reqs, stderr.String())
	}
	return readReport(report)
}

func readReport(file string) ([]resolved, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("packages: pip's report: %w", err)
	}
	var r pipReport
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("packages: pip's report: %w", err)
	}
	out := make([]resolved, 0, len(r.Install))
	for _, in := range r.Install {
		u, err := url.Parse(in.DownloadInfo.URL)
		if err != nil {
			return nil, fmt.Errorf("packages: pip's report: %w", err)
		}
		sum := in.DownloadInfo.ArchiveInfo.Hashes["sha256"]
		if h, ok := strings.CutPrefix(in.DownloadInfo.ArchiveInfo.Hash, "sha256="); ok && sum == "" {
			sum = h
		}
		out = append(out, resolved{
			dist: dist{filename: path.Base(u.Path), url: in.DownloadInfo.URL, sha256: sum},
			pkg:  Package{Name: in.Metadata.Name, Version: in.Metadata.Version},
		})
	}
	return out, nil
}

var (
	pipNoMatch = regexp.MustCompile(`No matching distribution found for ([A-Za-z0-9._-]+)`)
	pipParent  = regexp.MustCompile(`satisfies the requirement ([A-Za-z0-9._-]+)[^\n]*? \(from ([A-Za-z0-9._-]+)\)`)
)

// pipFailed turns pip's complaint into an error at the declared package
// it concerns: the one pip could not find, or the one whose dependency it
// is (packages when pip names neither, as for conflicting versions). A
// project the source offers only as source distributions is said so.
func (src PackageSource) pipFailed(ctx context.Context, reqs []requirement, stderr string) error {
	reason := pipReason(stderr)
	field := "packages"
	declared := func(name string) int {
		return slices.IndexFunc(reqs, func(r requirement) bool { return r.norm == normalize(name) })
	}
	m := pipNoMatch.FindStringSubmatch(stderr)
	if m == nil {
		return &module.ConfigError{Field: field, Err: errors.New(reason)}
	}
	missing := m[1]
	if i := declared(missing); i >= 0 {
		field = fmt.Sprintf("packages[%d]", i)
	} else if p := pipParent.FindStringSubmatch(stderr); p != nil && normalize(p[1]) == normalize(missing) {
		if i := declared(p[2]); i >= 0 {
			field = fmt.Sprintf("packages[%d]", i)
		}
		reason = fmt.Sprintf("%s needs %s, which cannot be installed: %s", p[2], missing, reason)
	}
	if ds, err := src.candidates(ctx, normalize(missing)); err == nil && len(ds) > 0 && !slices.ContainsFunc(ds, func(d dist) bool { return strings.HasSuffix(d.filename, ".whl") }) {
		reason = fmt.Sprintf("%s: only source distributions are offered; this host installs wheels only, so that no package's build code runs (%s)", missing, reason)
	}
	return &module.ConfigError{Field: field, Err: errors.New(reason)}
}

// refusedFile is the error of a resolution during which pip asked the gate
// for u, outside the allowed origins: at the declared package whose file
// u is (packages for a dependency's), with pip's words when u does not
// name a file (a CONNECT names only a host).
func refusedFile(reqs []requirement, u, stderr string) error {
	name := fileProject(u)
	err := notTheIndex(u)
	if name == "" {
		err = fmt.Errorf("%w (%s)", err, pipReason(stderr))
	}
	return &module.ConfigError{Field: wheelField(reqs, name), Err: err}
}

// pipReason is what pip said went wrong, its error lines joined.
func pipReason(stderr string) string {
	var lines []string
	for _, l := range strings.Split(stderr, "\n") {
		if l = strings.TrimSpace(strings.TrimPrefix(l, "ERROR: ")); l != "" && !strings.HasPrefix(l, "[notice]") {
			lines = append(lines, l)
		}
	}
	return "pip: " + strings.Join(lines, "; ")
}

// tailBuffer keeps the last tailBytes written to it: pip's complaint is
// at the end of what it prints.
type tailBuffer struct{ b []byte }

const tailBytes = 16 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailBytes {
		t.b = t.b[len(t.b)-tailBytes:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(bytes.ToValidUTF8(t.b, nil)) }
