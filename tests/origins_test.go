package tests

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// hostRequest sends method path to h with the given Host and Origin (empty:
// the real host, no Origin) and returns the status.
func hostRequest(t *testing.T, h *host, method, path, hostName, origin, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, h.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if hostName != "" {
		req.Host = hostName
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	req.Header.Set("Authorization", "Bearer "+h.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// TestForeignOriginsAndHostsAreRefused: with a valid key, the MCP endpoint
// refuses a foreign Origin (the MCP specification's 403: a page of another
// site, or one that rebound its DNS name to this server), and every route
// refuses a Host this server does not answer to. The controls: no Origin
// (a client that is not a browser), the server's own origin and Host, and
// names the operator added with CYRNEL_ALLOWED_HOSTS pass.
func TestForeignOriginsAndHostsAreRefused(t *testing.T) {
	t.Parallel()
	h := start(t, "", "CYRNEL_ALLOWED_HOSTS=cyrnel.internal, https://agents.example:8443")
	self := strings.TrimPrefix(h.base, "http://")
	port := self[strings.LastIndexByte(self, ':'):]
	for _, c := range []struct {
		name, method, path, host, origin, body string
		want                                   int
	}{
		{"MCP, foreign origin", "POST", "/mcp", "", "http://evil.example", mcpInitialize, http.StatusForbidden},
		{"MCP, rebound name", "POST", "/mcp", "evil.example" + port, "http://evil.example" + port, mcpInitialize, http.StatusForbidden},
		{"MCP, origin null", "POST", "/mcp", "", "null", mcpInitialize, http.StatusForbidden},
		{"REST, foreign Host", "GET", "/processes", "evil.example" + port, "", "", http.StatusForbidden},
		{"REST, foreign origin", "GET", "/processes", "", "https://evil.example", "", http.StatusForbidden},
		{"control: MCP, no origin", "POST", "/mcp", "", "", mcpInitialize, http.StatusOK},
		{"control: MCP, own origin", "POST", "/mcp", "", h.base, mcpInitialize, http.StatusOK},
		{"control: MCP, localhost origin", "POST", "/mcp", "localhost" + port, "http://localhost" + port, mcpInitialize, http.StatusOK},
		{"control: MCP, added origin", "POST", "/mcp", "", "https://agents.example:8443", mcpInitialize, http.StatusOK},
		{"control: REST, own Host", "GET", "/processes", "", "", "", http.StatusOK},
		{"control: REST, added Host", "GET", "/processes", "CYRNEL.internal" + port, "", "", http.StatusOK},
		{"control: health, any Host", "GET", "/health", "evil.example", "", "", http.StatusOK},
	} {
		if got := hostRequest(t, h, c.method, c.path, c.host, c.origin, c.body); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
