package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cyrnel/cyrnel/openapi/client"
)

// bearer adds the API key to every request of an MCP client.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

func mcpSession(t *testing.T, h *host) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "cyrnel-e2e", Version: "1"}, nil)
	s, err := c.Connect(deadline(t), &mcp.StreamableClientTransport{
		Endpoint:   h.base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{h.key, http.DefaultTransport}},
	}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func call(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	r, err := s.CallTool(deadline(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

func textOf(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// structured decodes a result's structured content.
func structured[T any](t *testing.T, r *mcp.CallToolResult) T {
	t.Helper()
	var v T
	b, err := json.Marshal(r.StructuredContent)
	if err == nil {
		err = json.Unmarshal(b, &v)
	}
	if err != nil {
		t.Fatalf("structured content %v: %v", r.StructuredContent, err)
	}
	return v
}

type runResult struct {
	PID       int64          `json:"pid"`
	ExitState string         `json:"exitState"`
	Reason    string         `json:"reason"`
	Error     string         `json:"error"`
	Output    map[string]any `json:"output"`
	Stdout    string         `json:"stdout"`
	Stderr    string         `json:"stderr"`
}

func TestMCP(t *testing.T) {
	t.Parallel()
	h := start(t, "", "CYRNEL_API_KEY=mcp-key")
	ctx := deadline(t)

	// The endpoint is behind the API key like every other route.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the key: %d", resp.StatusCode)
	}
	anon := mcp.NewClient(&mcp.Implementation{Name: "anon", Version: "1"}, nil)
	if _, err := anon.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.base + "/mcp", MaxRetries: -1}, nil); err == nil {
		t.Fatal("an MCP client without the key connected")
	}

	s := mcpSession(t, h)
	tools, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var docs string
	h.do("GET", "/environment/docs", nil, &docs)
	byName := map[string]*mcp.Tool{}
	for _, tool := range tools.Tools {
		byName[tool.Name] = tool
	}
	for _, name := range []string{"run_code", "environment_docs", "search_tools", "tool_docs"} {
		if byName[name] == nil {
			t.Fatalf("no tool %s in %v", name, tools.Tools)
		}
	}
	if !strings.Contains(byName["run_code"].Description, docs) {
		t.Fatalf("run_code's description lacks the environment docs:\n%s", byName["run_code"].Description)
	}

	t.Run("run_code", func(t *testing.T) {
		r := call(t, s, "run_code", map[string]any{"code": "print('hi')\ncyrnel.output({'answer': 42})"})
		out := structured[runResult](t, r)
		if r.IsError || out.ExitState != "success" || out.Reason != "completed" || out.Stdout != "hi\n" || out.Output["answer"] != 42.0 {
			t.Fatalf("run_code: %+v %q", out, textOf(r))
		}
		if text := textOf(r); !strings.Contains(text, "exit: success") || !strings.Contains(text, `"answer":42`) || !strings.Contains(text, "hi") {
			t.Fatalf("run_code text: %q", text)
		}
		// The run is an ordinary process.
		var p proc
		h.do("GET", "/processes/"+strconv.FormatInt(out.PID, 10), nil, &p)
		if p.Ref != "mcp" || p.Stdout != "hi\n" {
			t.Fatalf("process behind run_code: %+v", p)
		}

		r = call(t, s, "run_code", map[string]any{"code": "raise ValueError('boom')"})
		if out = structured[runResult](t, r); !r.IsError || out.ExitState != "failed" || out.Error != "ValueError: boom" || !strings.Contains(out.Stderr, "Traceback") {
			t.Fatalf("failing code: %+v", out)
		}
		r = call(t, s, "run_code", map[string]any{"code": "while True: pass", "timeoutMs": 300})
		if out = structured[runResult](t, r); !r.IsError || out.ExitState != "timeout" {
			t.Fatalf("timeout: %+v", out)
		}
		if r = call(t, s, "run_code", map[string]any{"code": " "}); !r.IsError || !strings.Contains(textOf(r), "code is empty") {
			t.Fatalf("empty code: %q", textOf(r))
		}
	})

	t.Run("environment_docs", func(t *testing.T) {
		if r := call(t, s, "environment_docs", nil); r.IsError || textOf(r) != docs {
			t.Fatalf("environment_docs: %q", textOf(r))
		}
	})

	t.Run("discover a tool and call it from code", func(t *testing.T) {
		up := newUpstream(t)
		c := apiClient(t, h)
		content := fixture(t, "petstore-3.0.yaml")
		must[*client.CreateServiceResponse](t)(c.CreateServiceWithResponse(ctx, client.CreateServiceJSONRequestBody{
			Id: "petstore", Adapter: "openapi", Source: client.SourceStruct{Content: &content},
			Config: &map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true},
		}))

		r := call(t, s, "search_tools", map[string]any{"query": "pet by id", "includeDocs": true})
		found := structured[struct {
			Tools []struct {
				ServiceID, ToolID, Name, Description, Docs string
			} `json:"tools"`
		}](t, r)
		if r.IsError || len(found.Tools) == 0 || found.Tools[0].ToolID != "showPetById" || found.Tools[0].ServiceID != "petstore" {
			t.Fatalf("search_tools: %+v", found)
		}
		if !strings.Contains(found.Tools[0].Docs, "cyrnel.services.petstore.showPetById(") {
			t.Fatalf("search result docs: %q", found.Tools[0].Docs)
		}
		r = call(t, s, "run_code", map[string]any{"code": "r = cyrnel.services.petstore.showPetById(petId='7')\ncyrnel.output({'status': r['status'], 'name': r['body']['name']})"})
		if out := structured[runResult](t, r); r.IsError || out.Output["status"] != 200.0 || out.Output["name"] != "doggie" {
			t.Fatalf("calling the tool from code: %+v", out)
		}
		if got := up.last(t); got.Path != "/pets/7" {
			t.Fatalf("upstream saw %+v", got)
		}

		r = call(t, s, "tool_docs", map[string]any{"serviceId": "petstore", "toolId": "showPetById"})
		if r.IsError || textOf(r) != found.Tools[0].Docs {
			t.Fatalf("tool_docs: %q", textOf(r))
		}
		if r = call(t, s, "tool_docs", map[string]any{"serviceId": "petstore", "toolId": "nope"}); !r.IsError {
			t.Fatalf("docs of a missing tool: %q", textOf(r))
		}
		r = call(t, s, "search_tools", map[string]any{})
		if all := structured[struct{ Tools []any }](t, r); len(all.Tools) != 3 {
			t.Fatalf("search_tools without a query: %+v", all)
		}
	})
}
