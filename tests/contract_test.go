package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// probeHeader marks a request sent to provoke an error: the proxy does not
// validate it (it is meant to be wrong) but does validate the answer.
const probeHeader = "X-Contract-Probe"

// contract is a validating proxy in front of a host: every request and
// response that passes is checked by kin-openapi's openapi3filter against
// the committed OpenAPI 3.0 document (openapi/openapi-3.0.json), statuses
// included.
type contract struct {
	router routers.Router
	srv    *httptest.Server
	mu     sync.Mutex
	bad    []string
	seen   map[string]bool // "METHOD /path status" answered
}

var registerDecoders sync.Once

// validated puts a validating proxy in front of h and returns a host that
// talks through it.
func validated(t *testing.T, h *host) (*host, *contract) {
	t.Helper()
	registerDecoders.Do(func() {
		text := func(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
			b, err := io.ReadAll(r)
			return string(b), err
		}
		openapi3filter.RegisterBodyDecoder("text/event-stream", text)
		openapi3filter.RegisterBodyDecoder("text/markdown", text)
	})
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../openapi/openapi-3.0.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("openapi-3.0.json is not a valid OpenAPI 3.0 document: %v", err)
	}
	c := &contract{seen: map[string]bool{}}
	target, err := url.Parse(h.base)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = c.checkResponse
	// The router is made before the proxy serves: its handlers read it.
	c.srv = httptest.NewUnstartedServer(c.handler(rp))
	doc.Servers = openapi3.Servers{{URL: "http://" + c.srv.Listener.Addr().String()}}
	if c.router, err = legacy.NewRouter(doc); err != nil {
		t.Fatal(err)
	}
	c.srv.Start()
	t.Cleanup(c.srv.Close)
	p := *h
	p.base = c.srv.URL
	return &p, c
}

type inputKey struct{}

var filterOptions = &openapi3filter.Options{
	IncludeResponseStatus: true,
	AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
}

func (c *contract) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		probe := r.Header.Get(probeHeader) != ""
		r.Header.Del(probeHeader)
		find := r.Clone(r.Context())
		find.URL.Scheme, find.URL.Host = "http", c.srv.Listener.Addr().String() // localhost or 127.0.0.1
		route, params, err := c.router.FindRoute(find)
		if err != nil {
			c.fail("%s %s: not in the document: %v", r.Method, r.URL.Path, err)
			http.Error(w, "not in the document", http.StatusBadGateway)
			return
		}
		in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: filterOptions}
		if !probe {
			r.Body = io.NopCloser(bytes.NewReader(body))
			if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
				c.fail("request %s %s (%d bytes, %s): %v", r.Method, r.URL.Path, len(body), r.Header.Get("Content-Type"), err)
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), inputKey{}, in)))
	})
}

// checkResponse validates the response as it streams past: when the proxy
// closes its body (an event stream included), what went through is checked.
func (c *contract) checkResponse(resp *http.Response) error {
	in := resp.Request.Context().Value(inputKey{}).(*openapi3filter.RequestValidationInput)
	key := fmt.Sprintf("%s %s %d", in.Request.Method, in.Route.Path, resp.StatusCode)
	c.mu.Lock()
	c.seen[key] = true
	c.mu.Unlock()
	resp.Body = &teeCheck{ReadCloser: resp.Body, done: func(b []byte) {
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
			Header: resp.Header, Body: io.NopCloser(bytes.NewReader(b)), Options: filterOptions}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			c.fail("response %s %s → %d: %v", in.Request.Method, in.Request.URL.Path, resp.StatusCode, err)
		}
	}}
	return nil
}

type teeCheck struct {
	io.ReadCloser
	buf  bytes.Buffer
	once sync.Once
	done func([]byte)
}

func (t *teeCheck) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.buf.Write(p[:n])
	return n, err
}

func (t *teeCheck) Close() error {
	t.once.Do(func() { t.done(t.buf.Bytes()) })
	return t.ReadCloser.Close()
}

func (c *contract) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bad = append(c.bad, fmt.Sprintf(format, args...))
}

// violations stops the proxy (waiting for what is in flight) and returns
// what it found.
func (c *contract) violations() ([]string, map[string]bool) {
	c.srv.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bad, c.seen
}

// TestTrafficMatchesTheDocument sends the end-to-end suite's kind of
// traffic (programs with their output, files, displays and event streams;
// sessions and their files; a service, its tools and a tool call; policies,
// approvals, keys, the audit; every parameterless GET) through the
// validating proxy: no request or response may break the committed document.
func TestTrafficMatchesTheDocument(t *testing.T) {
	t.Parallel()
	h0 := start(t, "")
	h, c := validated(t, h0)
	for _, r := range specRoutes(t, h0) {
		if r.method == "GET" && len(r.params) == 0 && !strings.HasPrefix(r.path, "/openapi") {
			h.do("GET", r.path, nil, nil)
		}
	}
	up := newUpstream(t)
	addPetstore(t, h, up)
	h.do("GET", "/tools?q=find+pet+by+id", nil, nil)
	h.do("GET", "/tools/petstore/getPetById", nil, nil)
	h.do("GET", "/tools/petstore/getPetById/docs", nil, nil)
	h.do("POST", "/tools/petstore/getPetById/invoke", map[string]any{"parameters": map[string]any{"petId": 1}}, nil)
	h.do("PUT", "/tool-policies", map[string]any{"default": "allow", "rules": []map[string]string{{"pattern": "petstore.*", "decision": "allow"}}}, nil)

	p := h.run("import json\nopen('out.csv','w').write('a,b\\n1,2\\n')\nprint('hi')\n"+
		"import cyrnel\ncyrnel.output({'n': 1})\nr = cyrnel.services.petstore.getPetById(petId=7)\n", nil)
	base := fmt.Sprintf("/processes/%d", p.PID)
	for _, part := range []string{"", "/stdout", "/stderr", "/code", "/output", "/files", "/files/out.csv", "/displays", "/tool-calls", "/wait"} {
		if st, _ := h.do("GET", base+part, nil, nil); st != http.StatusOK {
			t.Errorf("GET %s%s: %d", base, part, st)
		}
	}
	h.waitFor(p.PID, func(q proc) bool { return q.State == "idle" })
	h.do("POST", base+"/run", map[string]any{"force": true}, nil)
	h.do("POST", base+"/kill", nil, nil)
	h.do("GET", "/processes?limit=2", nil, nil)

	s := h.newSession(map[string]any{})
	if st, _, b := h.raw("PUT", "/sessions/"+s.ID+"/files/in.csv", "application/octet-stream", []byte("x\n1\n")); st != http.StatusNoContent {
		t.Errorf("upload: %d %s", st, b)
	}
	h.do("GET", "/sessions/"+s.ID+"/files", nil, nil)
	h.do("GET", "/sessions/"+s.ID+"/files/in.csv", nil, nil)
	h.do("POST", "/processes", map[string]any{"code": "print(open('in.csv').read())", "session": s.ID, "waitMs": 30000}, nil)
	h.do("GET", "/sessions/"+s.ID, nil, nil)
	h.do("DELETE", "/sessions/"+s.ID+"/files/in.csv", nil, nil)
	h.do("DELETE", "/sessions/"+s.ID, nil, nil)

	k := h.newKey("contract", "runner")
	h.do("GET", "/keys/"+k.ID, nil, nil)
	h.do("DELETE", "/keys/"+k.ID, nil, nil)
	h.do("DELETE", base, nil, nil)

	bad, seen := c.violations()
	for _, v := range bad {
		t.Error(v)
	}
	if len(seen) < 40 {
		t.Errorf("only %d operation/status pairs went through the proxy", len(seen))
	}
}

// TestEveryAnsweredStatusIsDeclared drives error probes at every operation
// of the document through the validating proxy: without a key, with a key
// of a role that may not use it, for an id that does not exist, with
// malformed JSON, with a body of another media type, with an unknown query
// parameter. Each status answered must be one the operation declares, its
// body as declared. Nothing is changed: every probe is refused.
func TestEveryAnsweredStatusIsDeclared(t *testing.T) {
	t.Parallel()
	h0 := start(t, "")
	viewer := h0.newKey("probe", "approver").Key
	h, c := validated(t, h0)
	routes := specRoutes(t, h0)
	for _, r := range routes {
		target := r.path
		for name, typ := range r.params {
			v := "nope"
			if typ == "integer" {
				v = "999999"
			}
			target = strings.ReplaceAll(target, "{"+name+"}", v)
		}
		probes := []struct {
			key, contentType, query string
			body                    []byte
		}{
			{key: ""}, {key: viewer}, {key: h.key},
			{key: h.key, query: "?bogus=1"},
			{key: h.key, contentType: "application/json", body: []byte(`{"a": `)},
			{key: h.key, contentType: "text/csv", body: []byte("a,b\n")},
		}
		for _, p := range probes {
			if len(r.params) == 0 && p.key == h.key && p.body == nil && p.query == "" && r.method != "GET" {
				continue // would act: POST /keys, POST /processes with no body are not probes
			}
			req, err := http.NewRequest(r.method, h.base+target+p.query, bytes.NewReader(p.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(probeHeader, "1")
			if p.key != "" {
				req.Header.Set("Authorization", "Bearer "+p.key)
			}
			if p.contentType != "" {
				req.Header.Set("Content-Type", p.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 400 && r.method != "GET" {
				t.Errorf("probe %s %s%s (%s body) was accepted: %d", r.method, target, p.query, p.contentType, resp.StatusCode)
			}
		}
	}
	bad, seen := c.violations()
	for _, v := range bad {
		t.Error(v)
	}
	codes := map[string]bool{}
	for k := range seen {
		codes[k[strings.LastIndex(k, " ")+1:]] = true
	}
	for _, want := range []string{"400", "401", "403", "404", "415", "422"} {
		if !codes[want] {
			t.Errorf("no probe was answered %s: the probes do not reach what they test (%v)", want, codes)
		}
	}
}
