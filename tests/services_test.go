package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fixtures are the real OpenAPI documents the adapter's own tests use, kept
// once in the repository.
const fixtures = "../host/adapters/openapi/testdata"

func fixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// upstream is a loopback API that records what it receives.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	Method, Path, Query string
	URI                 string // as sent, before any decoding
	Header              http.Header
	Body                string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.RequestURI, r.Header.Clone(), string(body)})
		u.mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/404") {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"message":"no such pet"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "query": r.URL.RawQuery, "name": "doggie"})
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) last(t *testing.T) recorded {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("upstream received nothing")
	}
	return u.reqs[len(u.reqs)-1]
}

func TestEveryFixtureImportsOrIsRefusedCleanly(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	entries, err := os.ReadDir(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		if !strings.Contains(e.Name(), ".json") && !strings.Contains(e.Name(), ".yaml") {
			continue
		}
		var svc struct {
			ToolCount int `json:"toolCount"`
		}
		var prob problem
		st, _ := h.do("POST", "/services", map[string]any{
			"id": fmt.Sprintf("s%d", i), "adapter": "openapi", "source": map[string]any{"content": fixture(t, e.Name())},
		}, &svc)
		switch {
		case st == http.StatusCreated:
			t.Logf("%s: %d tools", e.Name(), svc.ToolCount)
		case st >= 400 && st < 500:
			h.do("POST", "/services", map[string]any{"id": fmt.Sprintf("r%d", i), "adapter": "openapi", "source": map[string]any{"content": fixture(t, e.Name())}}, &prob)
			t.Logf("%s refused: %s", e.Name(), prob.Detail)
		default:
			t.Errorf("%s: status %d", e.Name(), st)
		}
	}
	// A broken document is a 422 naming the source, never a 5xx.
	var prob problem
	if st, _ := h.do("POST", "/services", map[string]any{"id": "bad", "adapter": "openapi", "source": map[string]any{"content": "{not: [valid"}}, &prob); st != 422 || prob.Errors[0].Location != "body.source" {
		t.Fatalf("broken document: %d %+v", st, prob)
	}
	if st, _ := h.do("POST", "/services", map[string]any{"id": "1bad", "adapter": "openapi", "source": map[string]any{"content": "{}"}}, &prob); st != 422 {
		t.Fatalf("bad id: %d", st)
	}
	if st, _ := h.do("POST", "/services", map[string]any{"id": "x", "adapter": "nope", "source": map[string]any{"content": "{}"}}, &prob); st != 422 {
		t.Fatalf("bad adapter: %d", st)
	}
}

func TestToolsFromPython(t *testing.T) {
	t.Parallel()
	const secret = "sekret-9f1c2e7a"
	h := start(t, "")
	up := newUpstream(t)
	var svc struct {
		ID         string   `json:"id"`
		Enabled    bool     `json:"enabled"`
		SecretsSet []string `json:"secretsSet"`
		Tools      []struct {
			ID string `json:"id"`
		} `json:"tools"`
	}
	st, _ := h.do("POST", "/services", map[string]any{
		"id": "petstore", "adapter": "openapi", "source": map[string]any{"content": fixture(t, "swagger-petstore-3.0.yaml")},
		"config": map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true},
	}, &svc)
	if st != http.StatusCreated || !svc.Enabled || len(svc.Tools) != 19 {
		t.Fatalf("import: %d %+v", st, svc)
	}

	// Path parameter, no secret: the request goes out without credentials.
	p := h.run("r = cyrnel.services.petstore.getPetById(petId=7)\ncyrnel.output({'r': r})", nil)
	if p.exit() != "success" {
		t.Fatalf("getPetById: %+v", p)
	}
	got := up.last(t)
	if got.Method != "GET" || got.Path != "/pet/7" || got.Header.Get("api_key") != "" {
		t.Fatalf("wire request: %+v", got)
	}
	r := p.Output["r"].(map[string]any)
	if r["status"] != 200.0 || r["body"].(map[string]any)["name"] != "doggie" {
		t.Fatalf("result: %v", r)
	}

	// With the secret set, it is applied by the host.
	var set struct {
		Set []string `json:"set"`
	}
	if st, _ := h.do("PUT", "/services/petstore/secrets", map[string]any{"api_key": secret}, &set); st != 200 || len(set.Set) != 1 || set.Set[0] != "/api_key" {
		t.Fatalf("set secrets: %d %+v", st, set)
	}
	p = h.run("cyrnel.services.petstore.getPetById(petId=8)", nil)
	if got = up.last(t); p.exit() != "success" || got.Header.Get("api_key") != secret {
		t.Fatalf("secret not applied: %+v %+v", p, got.Header)
	}

	// Query parameters and a JSON body; a non-2xx answer is a result.
	p = h.run(strings.Join([]string{
		"s = cyrnel.services.petstore",
		"a = s.findPetsByStatus(status='sold')",
		"b = s.addPet(body={'name': 'rex', 'photoUrls': []})",
		"c = s.getPetById(petId=404)",
		"cyrnel.output({'c': c['status']})",
	}, "\n"), nil)
	if p.exit() != "success" || p.Output["c"] != 404.0 {
		t.Fatalf("calls: %+v", p)
	}
	up.mu.Lock()
	reqs := append([]recorded(nil), up.reqs...)
	up.mu.Unlock()
	find, add := reqs[len(reqs)-3], reqs[len(reqs)-2]
	if find.Path != "/pet/findByStatus" || find.Query != "status=sold" {
		t.Fatalf("query: %+v", find)
	}
	var sent map[string]any
	if err := json.Unmarshal([]byte(add.Body), &sent); err != nil || add.Method != "POST" || sent["name"] != "rex" || add.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("body: %+v", add)
	}

	// Invalid arguments raise ToolError naming the field; nothing is sent.
	before := len(reqs)
	p = h.run("try:\n    cyrnel.services.petstore.getPetById(petId='seven')\nexcept cyrnel.ToolError as e:\n    print(e)", nil)
	if p.exit() != "success" || !strings.Contains(p.Stdout, "/petId") {
		t.Fatalf("invalid argument: %+v", p)
	}
	up.mu.Lock()
	after := len(up.reqs)
	up.mu.Unlock()
	if after != before {
		t.Fatal("an invalid call reached the upstream API")
	}

	// The secret is nowhere a program can look: its environment, its
	// command line, its working directory.
	p = h.run(strings.Join([]string{
		"import os",
		// Built from its reverse so the program's own code, which is stored
		// with the process, does not contain it.
		"secret = " + fmt.Sprintf("%q", reverse(secret)) + "[::-1]",
		"hits = [k for k, v in os.environ.items() if secret in v]",
		"paths = ['/proc/self/environ', '/proc/self/cmdline'] + [os.path.join(d, f) for d, _, fs in os.walk('.') for f in fs]",
		"for path in paths:",
		"    if secret.encode() in open(path, 'rb').read(): hits.append(path)",
		"cyrnel.output({'hits': hits, 'looked': len(paths)})",
	}, "\n"), nil)
	if p.exit() != "success" || len(p.Output["hits"].([]any)) != 0 {
		t.Fatalf("secret visible inside the interpreter: %+v", p)
	}

	// Disabling a tool, then the service, makes them uncallable, and says so.
	h.do("PATCH", "/tools/petstore/getPetById", map[string]any{"enabled": false}, nil)
	p = h.run("cyrnel.services.petstore.getPetById(petId=1)", nil)
	if p.exit() != "failed" || !strings.Contains(p.Error, "no enabled tool") {
		t.Fatalf("disabled tool: %+v", p)
	}
	var prob problem
	if st, _ := h.do("POST", "/tools/petstore/getPetById/invoke", map[string]any{"parameters": map[string]any{"petId": 1}}, &prob); st != 409 || !strings.Contains(prob.Detail, "disabled") {
		t.Fatalf("invoke disabled tool: %d %+v", st, prob)
	}
	h.do("PATCH", "/services/petstore", map[string]any{"enabled": false}, nil)
	if st, _ := h.do("POST", "/tools/petstore/findPetsByStatus/invoke", map[string]any{"parameters": map[string]any{}}, &prob); st != 409 {
		t.Fatalf("invoke tool of disabled service: %d %+v", st, prob)
	}
	h.do("PATCH", "/services/petstore", map[string]any{"enabled": true}, nil)

	// Refresh keeps the disabled flag.
	var ref struct {
		Added   []string `json:"added"`
		Removed []string `json:"removed"`
	}
	h.do("POST", "/services/petstore/refresh", nil, &ref)
	var tool struct {
		Enabled bool `json:"enabled"`
	}
	h.do("GET", "/tools/petstore/getPetById", nil, &tool)
	if tool.Enabled || len(ref.Added) != 0 || len(ref.Removed) != 0 {
		t.Fatalf("refresh: %+v enabled=%v", ref, tool.Enabled)
	}

	// The secret never comes back in a response.
	for _, path := range []string{"/services", "/services/petstore", "/services/petstore/secrets", "/services/petstore/config", "/tools/petstore/getPetById"} {
		var body string
		h.do("GET", path, nil, &body)
		if strings.Contains(body, secret) {
			t.Fatalf("%s leaks the secret", path)
		}
	}

	// Deleted: gone from code and from the API.
	if st, _ := h.do("DELETE", "/services/petstore", nil, nil); st != 204 {
		t.Fatalf("delete: %d", st)
	}
	p = h.run("cyrnel.services.petstore", nil)
	if p.exit() != "failed" || !strings.Contains(p.Error, "no enabled service") {
		t.Fatalf("after delete: %+v", p)
	}
	if st, _ := h.do("GET", "/tools/petstore/getPetById", nil, &prob); st != 404 {
		t.Fatalf("tool after delete: %d", st)
	}

	// The secret is in no file of the data directory (sealed at rest).
	filepath.Walk(h.dataDir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), secret) {
			t.Errorf("secret in plain text in %s", path)
		}
		return nil
	})
}

func TestToolListingAndDocs(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	h.do("POST", "/services", map[string]any{"id": "gh", "adapter": "openapi", "source": map[string]any{"content": fixture(t, "petstore-expanded-3.0.yaml")}}, nil)
	var page struct {
		Items []struct {
			ServiceID string `json:"serviceId"`
			ID        string `json:"id"`
		} `json:"items"`
		HasMore    bool    `json:"hasMore"`
		NextCursor *string `json:"nextCursor"`
	}
	// Ranked: the best match first (any word may match).
	h.do("GET", "/tools?serviceId=gh&q=PET+BY+ID", nil, &page)
	if len(page.Items) == 0 || page.Items[0].ID != "find_pet_by_id" {
		t.Fatalf("search: %+v", page)
	}
	var all []string
	h.do("GET", "/tools?limit=1", nil, &page)
	for {
		for _, it := range page.Items {
			all = append(all, it.ID)
		}
		if !page.HasMore {
			break
		}
		c := *page.NextCursor
		page.Items = nil
		h.do("GET", "/tools?limit=1&cursor="+c, nil, &page)
	}
	if len(all) != 4 {
		t.Fatalf("paging: %v", all)
	}
	var docs string
	h.do("GET", "/tools/gh/find_pet_by_id/docs", nil, &docs)
	if !strings.Contains(docs, "cyrnel.services.gh.find_pet_by_id(") || !strings.Contains(docs, "| `id` |") {
		t.Fatalf("docs: %s", docs)
	}
	// A program's help() shows the same docs, with a typed signature.
	p := h.run(`
import inspect
tool = cyrnel.services.gh.find_pet_by_id
help(tool)
cyrnel.output({"doc": tool.__doc__, "signature": str(inspect.signature(tool))})`, nil)
	if p.exit() != "success" || p.Output["doc"] != docs || p.Output["signature"] != "(*, id: int) -> dict" || !strings.Contains(p.Stdout, "## Result") {
		t.Fatalf("help(): %s/%s %q\n%v\n%s", p.exit(), p.reason(), p.Stderr, p.Output["signature"], p.Stdout)
	}
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// TestToolPathDotSegmentsAreEncoded (issue 22: "a tool path parameter of ..
// reaches the upstream as GET /get/.."): a path parameter of dots only
// reaches the upstream percent-encoded, from POST /tools/…/invoke and from
// a program, so no upstream or proxy resolves it to another path than the
// operation's. The control: dots inside a value, and a plain value, reach
// it as they are.
func TestToolPathDotSegmentsAreEncoded(t *testing.T) {
	t.Parallel()
	h, up := governed(t, "")
	for value, want := range map[string]string{"..": "/user/%2E%2E", ".": "/user/%2E", "a..b": "/user/a..b", "x": "/user/x"} {
		if st, _ := h.do("POST", "/tools/petstore/getUserByName/invoke", map[string]any{"parameters": map[string]any{"username": value}}, nil); st != http.StatusOK {
			t.Fatalf("invoke with username %q: %d", value, st)
		}
		if got := up.last(t).URI; got != want {
			t.Errorf("invoke: username %q reached the upstream as %s, want %s", value, got, want)
		}
		if p := h.run(fmt.Sprintf("cyrnel.services.petstore.getUserByName(username=%q)", value), nil); p.exit() != "success" {
			t.Fatalf("from code, username %q: %s/%s %s", value, p.exit(), p.reason(), p.Stderr)
		}
		if got := up.last(t).URI; got != want {
			t.Errorf("from code: username %q reached the upstream as %s, want %s", value, got, want)
		}
	}
}
