package python

import (
	"archive/zip"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/mail"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/sync/singleflight"

	"github.com/cyrnel/cyrnel/envs/module"
)

// PackageSource is where declared packages come from, named by the
// operator at start-up, and where their environments are kept.
type PackageSource struct {
	Index     string       // a PEP 503 simple index (serve --package-index)
	FindLinks string       // a directory of wheels (serve --find-links)
	CacheDir  string       // built environments, by content hash (<data-dir>/packages)
	Client    *http.Client // fetches from Index; nil: http.DefaultClient
}

// Package installs read wheels only: the host fetches each wheel, checks it
// against the index's and its own RECORD's hashes and unpacks it into the
// environment's site directory. No package code runs, on the host or in the
// sandbox: there is no build step and no install hook in a wheel.
const maxWheelBytes = 256 << 20

// builds makes each environment once when several set-ups ask for it.
var builds singleflight.Group

// requirement is one entry of config.packages.
type requirement struct {
	name  string // as written
	norm  string // PEP 503 normalised
	specs []versionSpec
}

type versionSpec struct{ op, version string }

var (
	reqName  = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(.*)$`)
	reqSpec  = regexp.MustCompile(`^(==|!=|>=|<=|>|<)\s*([A-Za-z0-9.+!-]+)$`)
	normRuns = regexp.MustCompile(`[-_.]+`)
)

func normalize(name string) string { return strings.ToLower(normRuns.ReplaceAllString(name, "-")) }

func parseRequirement(s string) (requirement, error) {
	m := reqName.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return requirement{}, fmt.Errorf("%q is not a requirement: a name, optionally with version specifiers (numpy, pandas==2.1.4, rich>=13,<14)", s)
	}
	r := requirement{name: m[1], norm: normalize(m[1])}
	if rest := strings.TrimSpace(m[2]); rest != "" {
		for _, part := range strings.Split(rest, ",") {
			sm := reqSpec.FindStringSubmatch(strings.TrimSpace(part))
			if sm == nil {
				return requirement{}, fmt.Errorf("%q: %q is not a version specifier this host supports (==, !=, >=, <=, >, <)", s, strings.TrimSpace(part))
			}
			r.specs = append(r.specs, versionSpec{sm[1], sm[2]})
		}
	}
	return r, nil
}

// compareVersions orders dotted versions, numeric parts as numbers.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		x, y := "0", "0"
		if i < len(as) {
			x = as[i]
		}
		if i < len(bs) {
			y = bs[i]
		}
		xi, errX := strconv.Atoi(x)
		yi, errY := strconv.Atoi(y)
		switch {
		case errX == nil && errY == nil && xi != yi:
			if xi < yi {
				return -1
			}
			return 1
		case (errX != nil || errY != nil) && x != y:
			return strings.Compare(x, y)
		}
	}
	return 0
}

func (r requirement) allows(version string) bool {
	for _, s := range r.specs {
		c := compareVersions(version, s.version)
		ok := map[string]bool{"==": c == 0, "!=": c != 0, ">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0}[s.op]
		if !ok {
			return false
		}
	}
	return true
}

// dist is one file the source offers for a project.
type dist struct {
	filename, url, sha256 string
}

// wheelTags reads a wheel's file name: {name}-{version}(-{build})?-{py}-{abi}-{platform}.whl.
func wheelTags(filename string) (name, version string, py, abi, plat []string, ok bool) {
	parts := strings.Split(strings.TrimSuffix(filename, ".whl"), "-")
	if !strings.HasSuffix(filename, ".whl") || (len(parts) != 5 && len(parts) != 6) {
		return "", "", nil, nil, nil, false
	}
	n := len(parts)
	return parts[0], parts[1], strings.Split(parts[n-3], "."), strings.Split(parts[n-2], "."), strings.Split(parts[n-1], "."), true
}

// compatible says whether a wheel runs on CPython pyVersion (3.11.2) on
// this Linux machine: pure Python, or built for this CPython (or its
// stable ABI) on linux or manylinux for this architecture.
func compatible(filename, pyVersion, arch string) bool {
	_, _, py, abi, plat, ok := wheelTags(filename)
	if !ok {
		return false
	}
	v := strings.Split(pyVersion, ".")
	if len(v) < 2 {
		return false
	}
	cp := "cp" + v[0] + v[1]
	pyOK := slices.ContainsFunc(py, func(t string) bool {
		return t == "py3" || t == "py"+v[0]+v[1] || t == cp || (strings.HasPrefix(t, "cp3") && slices.Contains(abi, "abi3") && compareVersions(t[3:], v[1]) <= 0)
	})
	abiOK := slices.ContainsFunc(abi, func(t string) bool { return t == "none" || t == "abi3" || t == cp })
	platOK := slices.ContainsFunc(plat, func(t string) bool {
		return t == "any" || t == "linux_"+arch || (strings.HasPrefix(t, "manylinux") && strings.HasSuffix(t, "_"+arch))
	})
	return pyOK && abiOK && platOK
}

// candidates lists what the source offers for a project.
func (src PackageSource) candidates(ctx context.Context, norm string) ([]dist, error) {
	if src.FindLinks != "" {
		entries, err := os.ReadDir(src.FindLinks)
		if err != nil {
			return nil, fmt.Errorf("find-links directory: %w", err)
		}
		var out []dist
		for _, e := range entries {
			if distName(e.Name()) == norm {
				out = append(out, dist{filename: e.Name(), url: filepath.Join(src.FindLinks, e.Name())})
			}
		}
		return out, nil
	}
	if src.Index == "" {
		return nil, errors.New("no package index: the server was started without --package-index or --find-links")
	}
	base, err := url.Parse(strings.TrimSuffix(src.Index, "/") + "/" + norm + "/")
	if err != nil {
		return nil, fmt.Errorf("package index: %w", err)
	}
	body, err := src.get(ctx, base.String(), 16<<20)
	if errors.Is(err, errNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	doc, err := html.Parse(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("package index page of %s: %w", norm, err)
	}
	var out []dist
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode || n.Data != "a" {
			continue
		}
		for _, a := range n.Attr {
			if a.Key != "href" {
				continue
			}
			u, err := base.Parse(a.Val)
			if err != nil {
				continue
			}
			d := dist{filename: path.Base(u.Path), url: u.String()}
			if h, ok := strings.CutPrefix(u.Fragment, "sha256="); ok {
				d.sha256 = h
			}
			u.Fragment = ""
			d.url = u.String()
			out = append(out, d)
		}
	}
	return out, nil
}

// distName is the normalised project name of a distribution file name.
func distName(filename string) string {
	if name, _, _, _, _, ok := wheelTags(filename); ok {
		return normalize(name)
	}
	for _, ext := range []string{".tar.gz", ".zip", ".tar.bz2"} {
		if stem, ok := strings.CutSuffix(filename, ext); ok {
			if i := strings.LastIndex(stem, "-"); i > 0 {
				return normalize(stem[:i])
			}
		}
	}
	return ""
}

var errNotFound = errors.New("not found")

func (src PackageSource) get(ctx context.Context, u string, limit int64) ([]byte, error) {
	client := src.Client
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("package index: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, errNotFound
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("package index: GET %s: %s", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("package index: GET %s: %w", u, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("package index: %s is larger than %d bytes", u, limit)
	}
	return b, nil
}

// pickWheel picks the highest version of r that has a compatible wheel.
func pickWheel(r requirement, ds []dist, pyVersion, arch string) (dist, string, error) {
	var best dist
	bestVersion, sdists := "", 0
	for _, d := range ds {
		_, v, _, _, _, ok := wheelTags(d.filename)
		if !ok {
			if distName(d.filename) != "" {
				sdists++
			}
			continue
		}
		if compatible(d.filename, pyVersion, arch) && r.allows(v) && (bestVersion == "" || compareVersions(v, bestVersion) > 0) {
			best, bestVersion = d, v
		}
	}
	switch {
	case bestVersion != "":
		return best, bestVersion, nil
	case len(ds) == 0:
		return dist{}, "", fmt.Errorf("%s: no such package in the package index", r.name)
	case sdists == len(ds):
		return dist{}, "", fmt.Errorf("%s: only source distributions are offered; this host installs wheels only, so that no package's build code runs", r.name)
	}
	return dist{}, "", fmt.Errorf("%s: no wheel matches the version asked for and CPython %s on linux_%s", r.name, pyVersion, arch)
}

// fetch returns a wheel's bytes, checked against the index's hash.
func (src PackageSource) fetch(ctx context.Context, d dist) ([]byte, error) {
	var b []byte
	var err error
	if src.FindLinks != "" {
		b, err = os.ReadFile(d.url)
	} else {
		b, err = src.get(ctx, d.url, maxWheelBytes)
	}
	if err != nil {
		return nil, err
	}
	if d.sha256 != "" {
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != strings.ToLower(d.sha256) {
			return nil, fmt.Errorf("%s: its sha256 is not the index's", d.filename)
		}
	}
	return b, nil
}

// unpack installs a wheel into site: every file its RECORD lists, with the
// hash RECORD gives; .data/purelib and platlib go into site, the rest of
// .data (scripts, headers, data) is left out. It returns the wheel's
// dependencies (Requires-Dist without an extra).
func unpack(filename string, wheel []byte, site string) ([]string, error) {
	zr, err := zip.NewReader(strings.NewReader(string(wheel)), int64(len(wheel)))
	if err != nil {
		return nil, fmt.Errorf("%s: not a zip: %w", filename, err)
	}
	record, meta, err := wheelRecord(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		rel, ok := installPath(f.Name)
		if !ok {
			return nil, fmt.Errorf("%s: %q leaves the site directory", filename, f.Name)
		}
		want, listed := record[f.Name]
		if !listed && !strings.HasSuffix(f.Name, ".dist-info/RECORD") {
			return nil, fmt.Errorf("%s: %s is not in its RECORD", filename, f.Name)
		}
		if rel == "" {
			continue
		}
		if err := writeChecked(f, filepath.Join(site, rel), want); err != nil {
			return nil, fmt.Errorf("%s: %w", filename, err)
		}
	}
	return requires(meta), nil
}

// wheelRecord reads the dist-info's RECORD (path → sha256, "" when none)
// and METADATA.
func wheelRecord(zr *zip.Reader) (map[string]string, []byte, error) {
	var record, meta []byte
	for _, f := range zr.File {
		dir, base := path.Split(f.Name)
		if strings.Count(f.Name, "/") != 1 || !strings.HasSuffix(dir, ".dist-info/") || (base != "RECORD" && base != "METADATA") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, nil, err
		}
		b, err := io.ReadAll(io.LimitReader(rc, 16<<20))
		rc.Close()
		if err != nil {
			return nil, nil, err
		}
		if base == "RECORD" {
			record = b
		} else {
			meta = b
		}
	}
	if record == nil || meta == nil {
		return nil, nil, errors.New("no .dist-info with RECORD and METADATA: not a wheel")
	}
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(record)))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ",")
		if len(fields) < 2 || fields[0] == "" {
			continue
		}
		out[strings.Trim(fields[0], `"`)] = strings.TrimPrefix(fields[1], "sha256=")
	}
	return out, meta, nil
}

// installPath maps a wheel member to its place under site ("" to leave it
// out); ok is false for a path that would leave site.
func installPath(name string) (string, bool) {
	clean := path.Clean(name)
	if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") || clean != name {
		return "", false
	}
	first, rest, _ := strings.Cut(clean, "/")
	if strings.HasSuffix(first, ".data") {
		scheme, inner, _ := strings.Cut(rest, "/")
		if scheme == "purelib" || scheme == "platlib" {
			return inner, inner != ""
		}
		return "", true
	}
	return clean, true
}

func writeChecked(f *zip.File, dst, want string) error {
	rc, err := f.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), io.LimitReader(rc, maxWheelBytes))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if want != "" && base64.RawURLEncoding.EncodeToString(h.Sum(nil)) != want {
		return fmt.Errorf("%s: its hash is not the one its RECORD gives", f.Name)
	}
	return nil
}

// requires lists a METADATA's dependencies that apply whatever extras are
// asked for (no "extra ==" marker).
func requires(meta []byte) []string {
	msg, err := mail.ReadMessage(strings.NewReader(string(meta) + "\n\n"))
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range msg.Header["Requires-Dist"] {
		spec, marker, _ := strings.Cut(r, ";")
		if strings.Contains(marker, "extra") {
			continue
		}
		if m := reqName.FindStringSubmatch(strings.TrimSpace(spec)); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// built is an environment on disk: its site directory and what is in it.
type built struct {
	Hash     string              `json:"hash"`
	Site     string              `json:"-"`
	Packages []Package           `json:"packages"`
	Requires map[string][]string `json:"requires"` // each package's dependencies
}

// buildKey is the content hash of an environment: the interpreter, its
// version, the requirements (in order) and where they come from.
func buildKey(exe, version string, packages []string, src PackageSource) string {
	b, _ := json.Marshal([]any{exe, version, packages, src.Index, src.FindLinks})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// buildPackages returns the environment for packages, building it unless
// the cache has it. A package that cannot be installed is a ConfigError at
// packages[i]; base names the packages the environment may rely on besides
// its own (the interpreter's, with systemSitePackages).
func buildPackages(ctx context.Context, src PackageSource, exe, version string, packages []string, base []Package) (*built, error) {
	reqs := make([]requirement, len(packages))
	for i, p := range packages {
		r, err := parseRequirement(p)
		if err != nil {
			return nil, &module.ConfigError{Field: fmt.Sprintf("packages[%d]", i), Err: err}
		}
		reqs[i] = r
	}
	key := buildKey(exe, version, packages, src)
	// Absolute: the environment's site becomes a sandbox read path.
	cache, err := filepath.Abs(src.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("packages: %w", err)
	}
	src.CacheDir = cache
	dir := filepath.Join(cache, key)
	v, err, _ := builds.Do(dir, func() (any, error) {
		if b, err := readBuilt(dir); err == nil {
			return b, nil
		}
		return buildInto(ctx, src, dir, key, reqs, version)
	})
	if err != nil {
		return nil, err
	}
	b := v.(*built)
	if err := checkDependencies(b, packages, base); err != nil {
		return nil, err
	}
	return b, nil
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
