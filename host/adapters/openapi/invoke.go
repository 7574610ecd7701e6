package openapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/cyrnel/cyrnel/envs/module"
)

// errCallTimeout tells the call's own timeout from a deadline of the caller.
var errCallTimeout = errors.New("tool call timed out")

// Invoke makes the HTTP request of one tool call and returns
// {"status", "headers", "body"}. A non-2xx status is a result; only a request
// that cannot be made or answered (bad server URL, transport error, timeout,
// oversize response) is an error. Errors name the method and URL without its
// query string, which may carry an API key.
func (a *Adapter) Invoke(ctx context.Context, in module.InvokeInput) (any, error) {
	svc := a.service(in.ServiceID)
	if svc == nil {
		return nil, fmt.Errorf("openapi: service %q is not loaded", in.ServiceID)
	}
	td := svc.tools[in.ToolID]
	if td == nil {
		return nil, fmt.Errorf("openapi: service %q has no tool %q", in.ServiceID, in.ToolID)
	}
	params, err := normalizeParams(in.Parameters)
	if err != nil {
		return nil, fmt.Errorf("openapi: %s.%s: %w", in.ServiceID, in.ToolID, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, svc.timeout, errCallTimeout)
	defer cancel()
	req, secretHeaders, err := svc.request(ctx, td, params)
	if err != nil {
		return nil, &module.ToolError{Code: module.ToolInvalidParameters, Err: fmt.Errorf("openapi: %s.%s: %w", in.ServiceID, in.ToolID, err)}
	}
	label := req.Method + " " + redact(req.URL)
	// No usable answer arrived: a transport error, whatever the cause.
	fail := func(err error) error {
		if context.Cause(ctx) == errCallTimeout {
			err = fmt.Errorf("%s: timed out after %s: %w", label, svc.timeout, context.DeadlineExceeded)
		} else {
			err = fmt.Errorf("%s: %w", label, err)
		}
		return &module.ToolError{Code: module.ToolTransportError, Err: err}
	}
	resp, err := a.clientFor(svc.allowPrivate, secretHeaders).Do(req)
	if err != nil {
		return nil, fail(unwrapURLError(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, a.opts.MaxResponseBytes+1))
	if err != nil {
		return nil, fail(fmt.Errorf("reading response: %w", err))
	}
	if int64(len(data)) > a.opts.MaxResponseBytes {
		return nil, &module.ToolError{Code: module.ToolUpstreamError, Status: resp.StatusCode,
			Err: fmt.Errorf("%s: response body larger than the %d-byte limit", label, a.opts.MaxResponseBytes)}
	}
	out := map[string]any{
		"status":  resp.StatusCode,
		"headers": responseHeaders(resp.Header),
	}
	body, b64 := decodeBody(resp.Header.Get("Content-Type"), data)
	out["body"] = body
	if b64 {
		out["bodyEncoding"] = "base64"
	}
	return out, nil
}

// clientFor returns the client for a call whose credentials travel in the
// headers named: net/http drops Authorization and Cookie when a redirect
// leaves the host, but not an API key's own header, so this client does.
func (a *Adapter) clientFor(allowPrivate bool, secretHeaders []string) *http.Client {
	if len(secretHeaders) == 0 {
		return a.client(allowPrivate)
	}
	c := *a.client(allowPrivate)
	next := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Host != via[0].URL.Host {
			for _, h := range secretHeaders {
				req.Header.Del(h)
			}
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// redact is the URL without query and credentials, for error messages.
func redact(u *url.URL) string {
	c := *u
	c.RawQuery, c.ForceQuery, c.User, c.Fragment = "", false, nil, ""
	return c.String()
}

// normalizeParams makes sure parameters are plain decoded JSON (the host may
// hand over typed Go values), converting through JSON only when needed.
func normalizeParams(p map[string]any) (map[string]any, error) {
	if isPlainJSON(p) {
		return p, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("parameters are not JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("parameters are not JSON: %w", err)
	}
	return out, nil
}

func isPlainJSON(v any) bool {
	switch x := v.(type) {
	case nil, string, bool, float64, json.Number:
		return true
	case map[string]any:
		for _, e := range x {
			if !isPlainJSON(e) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range x {
			if !isPlainJSON(e) {
				return false
			}
		}
		return true
	}
	return false
}

// request builds the HTTP request of one call, and names the headers that
// carry credentials.
func (s *service) request(ctx context.Context, td *toolDomain, params map[string]any) (*http.Request, []string, error) {
	base, err := s.baseURL(td)
	if err != nil {
		return nil, nil, err
	}
	path := td.Path
	var query, cookies []string
	header := http.Header{}
	for _, p := range td.Params {
		v, ok := params[p.Property]
		if !ok || v == nil {
			if p.In == "path" {
				return nil, nil, fmt.Errorf("missing path parameter %q", p.Property)
			}
			continue
		}
		if p.ContentType != "" {
			v = contentValue(p.ContentType, v)
		}
		switch p.In {
		case "path":
			path = strings.ReplaceAll(path, "{"+p.Name+"}", pathValue(p, v))
		case "query":
			query = append(query, queryPairs(p.Name, p.Style, p.Explode, p.AllowReserved, v)...)
		case "header":
			header.Set(p.Name, headerValue(p, v))
		case "cookie":
			cookies = append(cookies, cookiePairs(p, v)...)
		}
	}
	if i := strings.IndexByte(path, '{'); i >= 0 {
		return nil, nil, fmt.Errorf("path %s: parameter %s has no value", td.Path, path[i:])
	}

	var body io.Reader
	if td.Body != nil {
		if v, ok := params["body"]; ok && v != nil {
			data, ct, err := encodeBody(td.Body, v)
			if err != nil {
				return nil, nil, fmt.Errorf("body: %w", err)
			}
			body = bytes.NewReader(data)
			header.Set("Content-Type", ct)
		}
	}

	secretHeaders := s.authenticate(td, header, &query, &cookies)
	if len(cookies) > 0 {
		header.Set("Cookie", strings.Join(cookies, "; "))
	}
	target := base + path
	if len(query) > 0 {
		target += "?" + strings.Join(query, "&")
	}
	req, err := http.NewRequestWithContext(ctx, td.Method, target, body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", td.Method, base+path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return req, secretHeaders, nil
}

// contentValue serialises the value of a parameter defined by content.
func contentValue(mediaType string, v any) any {
	if _, ok := v.(string); ok && !isJSONMedia(mediaType) {
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return scalar(v)
	}
	return string(b)
}

// baseURL picks the server: config serverUrl, else the operation's (or its
// path item's) first server, else the document's, else "/" as OpenAPI
// says; fills its variables from config, else their defaults; and resolves a
// relative URL against the document's URL.
func (s *service) baseURL(td *toolDomain) (string, error) {
	raw, vars := "/", map[string]serverVariable(nil)
	switch {
	case s.serverURL != "":
		raw = s.serverURL
	case len(td.Servers) > 0:
		raw, vars = td.Servers[0].URL, td.Servers[0].Variables
	case len(s.domain.Servers) > 0:
		raw, vars = s.domain.Servers[0].URL, s.domain.Servers[0].Variables
	}
	var b strings.Builder
	rest := raw
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			b.WriteString(rest)
			break
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return "", fmt.Errorf("server URL %q: unclosed variable", raw)
		}
		name := rest[open+1 : open+end]
		b.WriteString(rest[:open])
		val, ok := s.variables[name]
		if !ok {
			v, declared := vars[name]
			if !declared {
				return "", fmt.Errorf("server URL %q: variable %q has no value (set it in config variables)", raw, name)
			}
			val = v.Default
		}
		b.WriteString(val)
		rest = rest[open+end+1:]
	}
	u, err := url.Parse(b.String())
	if err != nil {
		return "", fmt.Errorf("server URL %q: %w", raw, err)
	}
	if !u.IsAbs() {
		if s.domain.SourceURL == "" {
			return "", fmt.Errorf("server URL %q is relative and the document was not read from a URL: set config serverUrl", raw)
		}
		src, err := url.Parse(s.domain.SourceURL)
		if err != nil {
			return "", fmt.Errorf("source URL %q: %w", s.domain.SourceURL, err)
		}
		u = src.ResolveReference(u)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("server URL %q: scheme %q is not http or https", u.Redacted(), u.Scheme)
	}
	u.RawQuery, u.Fragment = "", ""
	return strings.TrimRight(u.String(), "/"), nil
}

// encodeBody serialises the body in the tool's media type and returns the
// Content-Type to send.
func encodeBody(b *body, v any) ([]byte, string, error) {
	mt := b.MediaType
	switch {
	case isJSONMedia(mt):
		data, err := json.Marshal(v)
		return data, mt, err
	case isFormMedia(mt):
		data, err := formBody(v, b.Encoding)
		return []byte(data), mt, err
	case isMultipartMedia(mt):
		return multipartBody(v, b.Encoding)
	}
	s, isString := v.(string)
	if strings.Contains(mt, "*") || mt == "" {
		// A wildcard says nothing to send: bytes for a string, else JSON.
		if isString {
			return []byte(s), "application/octet-stream", nil
		}
		data, err := json.Marshal(v)
		return data, "application/json", err
	}
	if isString {
		return []byte(s), mt, nil
	}
	switch v.(type) {
	case map[string]any, []any:
		data, err := json.Marshal(v)
		return data, mt, err
	}
	return []byte(scalar(v)), mt, nil
}

// authenticate applies the first security requirement whose secrets are all
// set: the operation's requirements, else the document's. A requirement
// naming no scheme (anonymous access) is only the fallback when none can be
// met. A document that declares no security at all but has schemes gets
// each scheme tried alone, in name order, so a configured secret is used.
// It returns the names of the headers it set.
func (s *service) authenticate(td *toolDomain, header http.Header, query, cookies *[]string) []string {
	var reqs []requirement
	switch {
	case td.Security != nil:
		reqs = *td.Security
	case s.domain.Security != nil:
		reqs = *s.domain.Security
	default:
		for _, name := range sortedKeys(s.domain.SecuritySchemes) {
			reqs = append(reqs, requirement{name})
		}
	}
	for _, r := range reqs {
		if len(r) == 0 || !s.satisfied(r) {
			continue
		}
		var set []string
		for _, name := range r {
			if h := s.apply(s.domain.SecuritySchemes[name], s.secrets[name], header, query, cookies); h != "" {
				set = append(set, h)
			}
		}
		return set
	}
	return nil
}

func (s *service) satisfied(r requirement) bool {
	for _, name := range r {
		scheme, ok := s.domain.SecuritySchemes[name]
		if !ok {
			return false
		}
		secret := s.secrets[name]
		switch {
		case scheme.Type == "http" && scheme.Scheme == "basic":
			m, ok := secret.(map[string]any)
			if !ok {
				return false
			}
			if u, _ := m["username"].(string); u == "" {
				return false
			}
		case scheme.Type == "apiKey", scheme.Type == "http", scheme.Type == "oauth2", scheme.Type == "openIdConnect":
			if str, _ := secret.(string); str == "" {
				return false
			}
		default: // mutualTLS and unknown types: nothing a request can carry
			return false
		}
	}
	return true
}

// apply applies one scheme's secret and returns the header it set, if any.
func (s *service) apply(scheme securityScheme, secret any, header http.Header, query, cookies *[]string) string {
	switch scheme.Type {
	case "apiKey":
		v := secret.(string)
		switch scheme.In {
		case "header":
			header.Set(scheme.Name, v)
			return scheme.Name
		case "query":
			*query = append(*query, escape(scheme.Name)+"="+escape(v))
		case "cookie":
			*cookies = append(*cookies, escapeCookie(scheme.Name)+"="+escapeCookie(v))
		}
	case "http":
		switch scheme.Scheme {
		case "basic":
			m := secret.(map[string]any)
			user, _ := m["username"].(string)
			pass, _ := m["password"].(string)
			header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
		case "bearer":
			header.Set("Authorization", "Bearer "+secret.(string))
		default:
			header.Set("Authorization", httpSchemeName(scheme.Scheme)+" "+secret.(string))
		}
		return "Authorization"
	case "oauth2", "openIdConnect":
		header.Set("Authorization", "Bearer "+secret.(string))
		return "Authorization"
	}
	return ""
}

// responseHeaders lower-cases header names; a header sent once is a string,
// one sent several times a list.
func responseHeaders(h http.Header) map[string]any {
	out := make(map[string]any, len(h))
	for k, v := range h {
		name := strings.ToLower(k)
		if len(v) == 1 {
			out[name] = v[0]
			continue
		}
		list := make([]any, len(v))
		for i, x := range v {
			list[i] = x
		}
		out[name] = list
	}
	return out
}

// decodeBody decodes JSON bodies (numbers kept exact), returns other UTF-8
// bodies as text and anything else in base64 (second result true). An empty
// body is nil.
func decodeBody(contentType string, data []byte) (any, bool) {
	if len(data) == 0 {
		return nil, false
	}
	if isJSONMedia(contentType) || contentType == "" {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) == nil && dec.Decode(new(any)) == io.EOF {
			return v, false
		}
	}
	if utf8.Valid(data) {
		return string(data), false
	}
	return base64.StdEncoding.EncodeToString(data), true
}
