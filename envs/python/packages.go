package python

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/net/html"
)

// PackageSource is where declared packages come from, named by the
// operator at start-up, and where their environments are kept.
type PackageSource struct {
	Index     string       // a PEP 503 simple index (serve --package-index)
	FileHosts []string     // other origins the index may link files at (serve --package-host)
	FindLinks string       // a directory of wheels (serve --find-links)
	CacheDir  string       // built environments, by content hash (<data-dir>/packages)
	Client    *http.Client // fetches from Index; nil: a client of its own, with no redirect off the allowed origins
}

// Package installs read wheels only: the host fetches each wheel, checks it
// against the index's and its own RECORD's hashes and unpacks it into the
// environment's site directory. No package code runs, on the host or in the
// sandbox: there is no build step and no install hook in a wheel.
const maxWheelBytes = 256 << 20

// requirement is one entry of config.packages: a project name, optional
// extras and version specifiers (pip's form without markers or URLs, so
// that nothing but the operator's source is named).
type requirement struct {
	name string // as written
	norm string // PEP 503 normalised
}

var (
	reqForm  = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[\s*[A-Za-z0-9._-]+(?:\s*,\s*[A-Za-z0-9._-]+)*\s*\])?\s*(.*)$`)
	reqSpec  = regexp.MustCompile(`^(===|==|!=|~=|>=|<=|>|<)\s*[A-Za-z0-9.+!*-]+$`)
	normRuns = regexp.MustCompile(`[-_.]+`)
)

func normalize(name string) string { return strings.ToLower(normRuns.ReplaceAllString(name, "-")) }

func parseRequirement(s string) (requirement, error) {
	m := reqForm.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return requirement{}, fmt.Errorf("%q is not a requirement: a name, optionally with extras and version specifiers (numpy, pandas==2.1.4, rich>=13,<14, requests[socks]~=2.31)", s)
	}
	if rest := strings.TrimSpace(m[3]); rest != "" {
		for _, part := range strings.Split(rest, ",") {
			if !reqSpec.MatchString(strings.TrimSpace(part)) {
				return requirement{}, fmt.Errorf("%q: %q is not a version specifier (==, !=, ~=, >=, <=, >, <, ===; no markers or URLs)", s, strings.TrimSpace(part))
			}
		}
	}
	return requirement{name: m[1], norm: normalize(m[1])}, nil
}

// dist is one file the source offers for a project.
type dist struct {
	filename, url, sha256 string
}

// wheelName is the project name in a wheel's file name:
// {name}-{version}(-{build})?-{py}-{abi}-{platform}.whl.
func wheelName(filename string) (string, bool) {
	parts := strings.Split(strings.TrimSuffix(filename, ".whl"), "-")
	if !strings.HasSuffix(filename, ".whl") || (len(parts) != 5 && len(parts) != 6) {
		return "", false
	}
	return parts[0], true
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
	if name, ok := wheelName(filename); ok {
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := src.client().Do(req)
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

// fetch returns the bytes of a wheel pip chose, checked against the sha256
// pip computed or the index gave: the file pip resolved is the one
// unpacked. A file URL must name a wheel in the find-links directory, an
// http(s) URL one on the index's origin or a file host's.
func (src PackageSource) fetch(ctx context.Context, d dist) ([]byte, error) {
	u, err := url.Parse(d.url)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.filename, err)
	}
	var b []byte
	switch u.Scheme {
	case "file":
		if src.FindLinks == "" || filepath.Dir(u.Path) != filepath.Clean(src.FindLinks) {
			return nil, fmt.Errorf("%s: %s is not in the find-links directory", d.filename, d.url)
		}
		b, err = os.ReadFile(u.Path)
	case "http", "https":
		if !src.origins()[origin(u)] {
			return nil, notTheIndex(d.url)
		}
		b, err = src.get(ctx, d.url, maxWheelBytes)
	default:
		return nil, fmt.Errorf("%s: cannot fetch %s", d.filename, d.url)
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	if d.sha256 == "" || hex.EncodeToString(sum[:]) != strings.ToLower(d.sha256) {
		return nil, fmt.Errorf("%s: its sha256 is not the one pip resolved", d.filename)
	}
	return b, nil
}

// unpack installs a wheel into site: every file its RECORD lists, with the
// hash RECORD gives; .data/purelib and platlib go into site, the rest of
// .data (scripts, headers, data) is left out.
func unpack(filename string, wheel []byte, site string) error {
	zr, err := zip.NewReader(bytes.NewReader(wheel), int64(len(wheel)))
	if err != nil {
		return fmt.Errorf("%s: not a zip: %w", filename, err)
	}
	record, err := wheelRecord(zr)
	if err != nil {
		return fmt.Errorf("%s: %w", filename, err)
	}
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		rel, ok := installPath(f.Name)
		if !ok {
			return fmt.Errorf("%s: %q leaves the site directory", filename, f.Name)
		}
		want, listed := record[f.Name]
		if !listed && !strings.HasSuffix(f.Name, ".dist-info/RECORD") {
			return fmt.Errorf("%s: %s is not in its RECORD", filename, f.Name)
		}
		if rel == "" {
			continue
		}
		if err := writeChecked(f, filepath.Join(site, rel), want); err != nil {
			return fmt.Errorf("%s: %w", filename, err)
		}
	}
	return nil
}

// wheelRecord reads the dist-info's RECORD (a CSV of path, hash, size):
// path → sha256 ("" when none). A wheel without RECORD and METADATA is
// refused.
func wheelRecord(zr *zip.Reader) (map[string]string, error) {
	var record []byte
	hasMeta := false
	for _, f := range zr.File {
		dir, base := path.Split(f.Name)
		if strings.Count(f.Name, "/") != 1 || !strings.HasSuffix(dir, ".dist-info/") {
			continue
		}
		switch base {
		case "METADATA":
			hasMeta = true
		case "RECORD":
			rc, err := f.Open()
			if err != nil {
				return nil, err
			}
			record, err = io.ReadAll(io.LimitReader(rc, 16<<20))
			rc.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	if record == nil || !hasMeta {
		return nil, errors.New("no .dist-info with RECORD and METADATA: not a wheel")
	}
	rows, err := csv.NewReader(bytes.NewReader(record)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("RECORD: %w", err)
	}
	out := map[string]string{}
	for _, fields := range rows {
		if len(fields) < 2 || fields[0] == "" {
			continue
		}
		out[fields[0]] = strings.TrimPrefix(fields[1], "sha256=")
	}
	return out, nil
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
