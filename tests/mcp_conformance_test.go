package tests

import (
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// conformanceDir holds the pinned @modelcontextprotocol/conformance and the
// Node.js it needs (package.json, package-lock.json; `make mcp-conformance`
// installs them).
const conformanceDir = "testdata/mcp-conformance"

// TestMCPConformance runs the official MCP conformance suite (its active
// server scenarios) against the built server with a runner key. The
// scenarios that need the reference server's fixture tools, prompts or
// resources are listed with their reason in expected-failures.yaml; the
// suite fails when one of them passes (the list is stale) as well as when
// any other scenario fails or warns.
func TestMCPConformance(t *testing.T) {
	t.Parallel()
	node, err := filepath.Abs(filepath.Join(conformanceDir, "node_modules", ".bin", "node"))
	if err == nil {
		_, err = os.Stat(node)
	}
	if err != nil {
		if reason := os.Getenv("CYRNEL_TEST_NO_MCP_CONFORMANCE"); reason != "" {
			t.Skipf("the MCP conformance suite is not installed (CYRNEL_TEST_NO_MCP_CONFORMANCE: %s)", reason)
		}
		t.Fatalf("the MCP conformance suite is not installed (%v): run `make mcp-conformance`, or set CYRNEL_TEST_NO_MCP_CONFORMANCE=<why>", err)
	}
	h := start(t, "")
	key := h.newKey("conformance", "runner").Key
	target, err := url.Parse(h.base)
	if err != nil {
		t.Fatal(err)
	}
	// The suite's client sends no Authorization header: this loopback
	// proxy adds the runner key and passes everything else as it came
	// (the Host header too, which the DNS rebinding scenario varies).
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
			r.Out.Header.Set("Authorization", "Bearer "+key)
		},
		FlushInterval: -1,
	})
	t.Cleanup(proxy.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		"server", "--url", proxy.URL+"/mcp", "--expected-failures", "expected-failures.yaml", "--output-dir", t.TempDir())
	cmd.Dir = conformanceDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("conformance suite: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	if ctx.Err() != nil || len(out) == 0 {
		t.Fatalf("the conformance suite did not run: %v", ctx.Err())
	}
}
