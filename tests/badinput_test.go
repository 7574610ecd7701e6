package tests

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNULInIDsIs422: a NUL (or anything that is not an identifier) in a
// service, tool or module id, or in a free-text filter, is a 422 naming the
// parameter, never a 500 from the database.
func TestNULInIDsIs422(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	for path, loc := range map[string]string{
		"GET /services/a%00b":                      "path.id",
		"GET /services/a%00b/config":               "path.id",
		"PUT /services/a%00b/config":               "path.id",
		"GET /services/a%00b/secrets":              "path.id",
		"PATCH /services/a%00b":                    "path.id",
		"DELETE /services/a%00b":                   "path.id",
		"POST /services/a%00b/refresh":             "path.id",
		"GET /tools/a%00b/t":                       "path.serviceId",
		"GET /tools/s/t%00u":                       "path.toolId",
		"GET /tools/s/t%00u/docs":                  "path.toolId",
		"PATCH /tools/s/t%00u":                     "path.toolId",
		"POST /tools/s/t%00u/invoke":               "path.toolId",
		"GET /modules/a%00b":                       "path.id",
		"GET /modules/a%00b/config":                "path.id",
		"GET /tools?serviceId=a%00b":               "query.serviceId",
		"GET /tools?q=a%00b":                       "query.q",
		"GET /processes?ref=a%00b":                 "query.ref",
		"GET /services/a-b":                        "path.id",
		"GET /services/" + strings.Repeat("a", 65): "path.id",
	} {
		method, target, _ := strings.Cut(path, " ")
		var body any
		switch method {
		case "PUT":
			body = map[string]any{}
		case "PATCH":
			body = map[string]any{"enabled": true}
		case "POST":
			if !strings.HasSuffix(target, "/refresh") { // refresh takes no body (415 with one)
				body = map[string]any{"parameters": map[string]any{}}
			}
		}
		var prob problem
		st, _ := h.do(method, target, body, &prob)
		if st != http.StatusUnprocessableEntity || len(prob.Errors) == 0 || prob.Errors[0].Location != loc {
			t.Errorf("%s: %d %+v, want 422 at %s", path, st, prob, loc)
		}
	}
	// Control: a well-formed unknown id is still a 404.
	if st, _ := h.do("GET", "/services/nope", nil, nil); st != http.StatusNotFound {
		t.Errorf("unknown service: %d", st)
	}
}

// TestRequestBodiesAreJSON: only application/json (optionally
// charset=utf-8, any case) is read; anything else is a 415 naming the
// header, and nothing is created.
func TestRequestBodiesAreJSON(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	send := func(ct string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", h.base+"/processes", strings.NewReader(`{"code": "print(1)", "autorun": false}`))
		if ct != "-" {
			req.Header.Set("Content-Type", ct)
		}
		req.Header.Set("Authorization", "Bearer "+h.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusUnsupportedMediaType && !strings.Contains(string(b), `"location":"header.Content-Type"`) {
			t.Errorf("%q: the problem does not name the header: %s", ct, b)
		}
		return resp.StatusCode
	}
	for _, ct := range []string{"-", "", "application/json-patch+json", "application/merge-patch+json", "application/json; charset=utf-16",
		"text/plain", "application/x-www-form-urlencoded", "application/json; charset=utf-8; x=y", "application/json;;"} {
		if st := send(ct); st != http.StatusUnsupportedMediaType {
			t.Errorf("Content-Type %q: %d, want 415", ct, st)
		}
	}
	var list struct {
		Items []proc `json:"items"`
	}
	if h.do("GET", "/processes", nil, &list); len(list.Items) != 0 {
		t.Fatalf("a refused request created a process: %+v", list.Items)
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON; Charset=UTF-8"} {
		if st := send(ct); st != http.StatusCreated {
			t.Errorf("Content-Type %q: %d, want 201", ct, st)
		}
	}
	// A request with no body needs no Content-Type.
	req, _ := http.NewRequest("POST", h.base+"/processes/1/run", nil)
	req.Header.Set("Authorization", "Bearer "+h.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("bodiless run: %d", resp.StatusCode)
	}
}

// TestEmptyDatabaseIsRefused: a data directory whose database was emptied
// does not start afresh (dropping its history) but says what happened.
func TestEmptyDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, dir)
	h.run("print(1)", nil)
	h.stop()
	for _, f := range []string{"cyrnel.db-wal", "cyrnel.db-shm"} {
		os.Remove(filepath.Join(dir, f))
	}
	if err := os.Truncate(filepath.Join(dir, "cyrnel.db"), 0); err != nil {
		t.Fatal(err)
	}
	r := cli(t, dir, "", nil, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir)
	if r.code == 0 || !strings.Contains(r.stderr, "database is empty although the data directory was used before") {
		t.Fatalf("an emptied database: %+v", r)
	}
}
