package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oasdiff/yaml"
)

// fetch reads a document from an http(s) URL, bounded in size and time,
// through the same guard as the service's tool calls.
func (a *Adapter) fetch(ctx context.Context, rawURL string, allowPrivate bool) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("source url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("source url %q: only http and https are supported", redact(u))
	}
	// Messages name the URL without query or credentials, which may be
	// secret.
	label := redact(u)
	ctx, cancel := context.WithTimeout(ctx, a.opts.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", label, err)
	}
	req.Header.Set("Accept", "application/json, application/yaml;q=0.9, */*;q=0.8")
	resp, err := a.client(allowPrivate).Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", label, unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("fetch %s: status %s", label, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, a.opts.MaxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", label, err)
	}
	if int64(len(data)) > a.opts.MaxDocumentBytes {
		return nil, fmt.Errorf("fetch %s: document larger than %d bytes", label, a.opts.MaxDocumentBytes)
	}
	return data, nil
}

// unwrapURLError drops net/http's `Get "url": ` prefix, which the callers
// replace with their own context.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// parseDocument reads an OpenAPI 3.x or Swagger 2.0 document, JSON or YAML,
// into the kin-openapi 3 model (2.0 is converted). External references are
// never followed. A document kin-openapi refuses as written gets one more try
// after the compatibility rewrites in compat.go.
func parseDocument(ctx context.Context, data []byte) (*openapi3.T, error) {
	data, err := toJSON(data)
	if err != nil {
		return nil, err
	}
	major, key, quoted, err := detectVersion(data)
	if err != nil {
		return nil, err
	}
	if !quoted {
		data = quoteVersion(data, key)
	}
	doc, err := loadJSON(ctx, data, major)
	if err == nil {
		return doc, nil
	}
	fixed, changed, cerr := compat(data)
	if cerr != nil || !changed {
		return nil, describeLoadError(err)
	}
	doc, err2 := loadJSON(ctx, fixed, major)
	if err2 != nil {
		return nil, describeLoadError(err)
	}
	return doc, nil
}

func describeLoadError(err error) error {
	if strings.Contains(err.Error(), "disallowed external reference") {
		return fmt.Errorf("document refers outside itself (external references are not allowed): %w", err)
	}
	return fmt.Errorf("load document: %w", err)
}

// toJSON returns data as JSON: YAML (a superset) is converted, with YAML 1.1
// timestamps left as the strings they were written as.
func toJSON(data []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("empty document")
	}
	if trimmed[0] == '{' && json.Valid(trimmed) {
		return trimmed, nil
	}
	var raw json.RawMessage
	if _, err := yaml.Unmarshal(data, &raw, yaml.DecodeOpts{DisableTimestamps: true}); err != nil {
		return nil, fmt.Errorf("parse document: neither JSON nor YAML: %w", err)
	}
	return raw, nil
}

// detectVersion reads the "openapi" or "swagger" key and returns the major
// version (2 or 3), the key, and whether its value is a string as it should
// be (YAML reads an unquoted 2.0 as a number).
func detectVersion(data []byte) (major int, key string, quoted bool, err error) {
	var probe struct {
		OpenAPI json.RawMessage `json:"openapi"`
		Swagger json.RawMessage `json:"swagger"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return 0, "", false, fmt.Errorf("parse document: not an object: %w", err)
	}
	version := func(raw json.RawMessage) (string, bool) {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, true
		}
		return string(raw), false
	}
	switch {
	case probe.OpenAPI != nil:
		v, quoted := version(probe.OpenAPI)
		if strings.HasPrefix(v, "3.") || v == "3" {
			return 3, "openapi", quoted, nil
		}
		return 0, "", false, fmt.Errorf("unsupported OpenAPI version %s (3.x and Swagger 2.0 are supported)", v)
	case probe.Swagger != nil:
		v, quoted := version(probe.Swagger)
		if f, err := strconv.ParseFloat(v, 64); err == nil && f == 2 {
			return 2, "swagger", quoted, nil
		}
		return 0, "", false, fmt.Errorf("unsupported Swagger version %s (2.0 is supported)", v)
	}
	return 0, "", false, errors.New("not an OpenAPI document: no \"openapi\" or \"swagger\" version key")
}

func newLoader(ctx context.Context) *openapi3.Loader {
	l := openapi3.NewLoader()
	l.IsExternalRefsAllowed = false
	l.Context = ctx
	return l
}

// loadJSON hands the document to kin-openapi. Documents are untrusted and the
// library has panicked on malformed ones (a null path item in a 2.0
// document, found by FuzzDefinition), so a panic is a refused document, not a
// failed request.
func loadJSON(ctx context.Context, data []byte, major int) (doc *openapi3.T, err error) {
	defer func() {
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("the document is malformed (the OpenAPI loader failed: %v)", r)
		}
	}()
	if major == 3 {
		return newLoader(ctx).LoadFromData(data)
	}
	var doc2 openapi2.T
	if err := json.Unmarshal(data, &doc2); err != nil {
		return nil, err
	}
	return openapi2conv.ToV3WithLoader(&doc2, newLoader(ctx), nil)
}

// quoteVersion turns the number in `"swagger": 2.0` into the string the model
// expects. (Only called for such documents: it re-encodes the top level.)
func quoteVersion(data []byte, key string) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return data
	}
	top[key], _ = json.Marshal(string(top[key]))
	out, err := json.Marshal(top)
	if err != nil {
		return data
	}
	return out
}
