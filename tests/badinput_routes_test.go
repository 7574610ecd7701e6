package tests

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// oddBytes are path parameter values (already percent-encoded) that are not
// identifiers: NUL and other control bytes, invalid UTF-8, an overlong NUL,
// dot segments, spaces and line breaks.
var oddBytes = []string{"a%00b", "%00", "a%01b", "%7F", "%FF%FE", "%C0%80", "a%0Ab", "a%20b", "%2E%2E", "%2E", "a%25b", "%E2%80%AE"}

// sqlText is what an answer must never carry: the database's own words.
var sqlText = regexp.MustCompile(`(?i)\bsql|sqlite|postgres|pq: |pgx|\bselect\b.*\bfrom\b|\binsert into\b|\bwhere\b.*=|syntax error|invalid byte sequence|SQLSTATE|constraint failed`)

// specRoute is one operation of the served OpenAPI document.
type specRoute struct {
	method, path string
	params       map[string]string // path parameter → schema type
	query        []string          // query parameters
}

// specRoutes reads the server's own OpenAPI document: every operation with
// its path parameters.
func specRoutes(t *testing.T, h *host) []specRoute {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name   string `json:"name"`
				In     string `json:"in"`
				Schema struct {
					Type string `json:"type"`
				} `json:"schema"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	if st, _ := h.do("GET", "/openapi.json", nil, &doc); st != http.StatusOK {
		t.Fatalf("openapi.json: %d", st)
	}
	var out []specRoute
	for path, ops := range doc.Paths {
		for method, op := range ops {
			r := specRoute{method: strings.ToUpper(method), path: path, params: map[string]string{}}
			for _, p := range op.Parameters {
				switch p.In {
				case "path":
					r.params[p.Name] = p.Schema.Type
				case "query":
					r.query = append(r.query, p.Name)
				}
			}
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path+out[i].method < out[j].path+out[j].method })
	return out
}

// TestOddBytesInPathParametersAreNot5xx: every operation of the spec, each
// of its path parameters in turn given NUL, other control bytes, invalid
// UTF-8 and dot segments (the others a plain value), answers 4xx, never a
// 5xx, and no answer carries the database's words.
func TestOddBytesInPathParametersAreNot5xx(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	routes := specRoutes(t, h)
	tried := 0
	for _, r := range routes {
		for name := range r.params {
			for _, odd := range oddBytes {
				target := r.path
				for other, typ := range r.params {
					v := "x"
					if typ == "integer" {
						v = "1"
					}
					if other == name {
						v = odd
					}
					target = strings.ReplaceAll(target, "{"+other+"}", v)
				}
				st, body := h.rawRequest(r.method, target)
				tried++
				if st >= 500 {
					t.Errorf("%s %s (%s): %d %s", r.method, target, name, st, body)
				}
				if sqlText.MatchString(body) {
					t.Errorf("%s %s (%s): %d carries SQL text: %s", r.method, target, name, st, body)
				}
			}
		}
	}
	if tried < 100 {
		t.Fatalf("control: only %d requests from %d operations; the spec was not read", tried, len(routes))
	}
	// Ids in a body reach the same lookups.
	for _, body := range []map[string]any{
		{"code": "1", "session": "a\x00b"}, {"code": "1", "session": "\xff"}, {"code": "1", "session": "ses_nope"},
	} {
		var text string
		if st, _ := h.do("POST", "/processes", body, &text); st < 400 || st >= 500 || sqlText.MatchString(text) {
			t.Errorf("POST /processes %q: %d %s", body["session"], st, text)
		}
	}
	// Control: the pattern knows the database's words as answers carried
	// them (SQLite's, then PostgreSQL's).
	for _, old := range []string{`run_code: get session a\x00b: SQL logic error: unrecognized token: "!" (1)`,
		`get session \xff: ERROR: invalid byte sequence for encoding "UTF8": 0xff (SQLSTATE 22021)`} {
		if !sqlText.MatchString(old) {
			t.Errorf("control: the SQL pattern misses %q", old)
		}
	}
}

// TestOddBytesInQueryParametersAreNot5xx: every query parameter of every
// read in the spec, given NUL, other control bytes and invalid UTF-8,
// answers 4xx, never a 5xx, and no answer carries the database's words; so
// does a session's ref with a NUL (a filter or a label the store is asked
// for, as a path's id is).
func TestOddBytesInQueryParametersAreNot5xx(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	tried := 0
	for _, r := range specRoutes(t, h) {
		if r.method != "GET" {
			continue
		}
		target := r.path
		for name, typ := range r.params {
			v := "x"
			if typ == "integer" {
				v = "999999"
			}
			target = strings.ReplaceAll(target, "{"+name+"}", v)
		}
		for _, q := range r.query {
			for _, odd := range oddBytes {
				st, body := h.rawRequest("GET", target+"?"+q+"="+odd)
				tried++
				if st >= 500 || sqlText.MatchString(body) {
					t.Errorf("GET %s?%s=%s: %d %s", target, q, odd, st, body)
				}
			}
		}
	}
	if tried < 200 {
		t.Fatalf("control: only %d requests; the spec's query parameters were not read", tried)
	}
	var prob problem
	if st, _ := h.do("POST", "/sessions", map[string]any{"ref": "a\x00b"}, &prob); st != http.StatusUnprocessableEntity || len(prob.Errors) != 1 || prob.Errors[0].Location != "body.ref" {
		t.Errorf("a session's ref with a NUL: %d %+v, want 422 at body.ref", st, prob)
	}
	// Control: the same filters and label, well-formed, are answered.
	for _, target := range []string{"/tool-calls?serviceId=petstore&toolId=getPetById", "/processes?ref=r", "/tools?q=pet"} {
		if st, body := h.rawRequest("GET", target); st != http.StatusOK {
			t.Errorf("control: GET %s: %d %s", target, st, body)
		}
	}
	if st, _ := h.do("POST", "/sessions", map[string]any{"ref": "a b"}, nil); st != http.StatusCreated {
		t.Errorf("control: a session's plain ref: %d", st)
	}
}

// rawRequest sends method target with a JSON body of {} for methods that
// carry one, and returns the status and body; a transport error fails.
func (h *host) rawRequest(method, target string) (int, string) {
	h.t.Helper()
	var body io.Reader
	if method == "POST" || method == "PUT" || method == "PATCH" {
		body = strings.NewReader("{}")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60e9)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, h.base+target, body)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, target, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+h.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b)
}

// TestMCPRunCodeWithOddSessionIsNotSQL: run_code naming a session id with a
// NUL answers a tool error in the tool's words, never the database's.
func TestMCPRunCodeWithOddSessionIsNotSQL(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	s := mcpSession(t, h)
	for _, id := range []string{"a\x00b", "\x00", "ses_\xff", "ses_nope"} {
		r := call(t, s, "run_code", map[string]any{"code": "print(1)", "session": id})
		text := textOf(r)
		b, _ := json.Marshal(r.StructuredContent)
		if !r.IsError || sqlText.MatchString(text) || sqlText.MatchString(string(b)) {
			t.Errorf("session %q: error %v, %q %s", id, r.IsError, text, b)
		}
	}
}
