package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// tsCheckDir holds the TypeScript clients' generators, their runtime and
// the scenarios (openapi/ts-check; `make ts-check` installs them from the
// pinned package-lock.json, with the Node.js they need).
const tsCheckDir = "../openapi/ts-check"

// tsScenario is one line a scenario script prints.
type tsScenario struct {
	Client   string `json:"client"`
	Scenario string `json:"scenario"`
	OK       bool   `json:"ok"`
	Error    string `json:"error"`
}

// TestTypeScriptClients generates the TypeScript clients from the committed
// document (openapi-typescript with openapi-fetch, and @hey-api/openapi-ts
// with its zod response validators), type-checks them with the scenarios,
// and runs each client's scenarios against the built server through the
// validating proxy: health, running code, waiting for a process, listing
// processes, a session's file upload and download, errors read as RFC 9457
// problems. A scenario fails on a wrong answer, hey-api's zod schemas on a
// JSON body the 3.1 document does not describe, and the proxy on any
// request or response the 3.0 document does not describe.
func TestTypeScriptClients(t *testing.T) {
	t.Parallel()
	node, err := filepath.Abs(filepath.Join(tsCheckDir, "node_modules", ".bin", "node"))
	if err == nil {
		_, err = os.Stat(node)
	}
	if err != nil {
		t.Fatalf("the TypeScript clients' tools are not installed (%v): run `make ts-check`", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// npm puts node_modules/.bin first on PATH: the generators and tsc run
	// on the pinned Node.js.
	build := exec.CommandContext(ctx, "npm", "run", "--silent", "check")
	build.Dir = tsCheckDir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("generate and type-check the clients: %v\n%s", err, out)
	}

	h0 := start(t, "")
	h, c := validated(t, h0)
	const perClient = 6
	for _, script := range []string{"openapi-fetch", "hey-api"} {
		cmd := exec.CommandContext(ctx, node, filepath.Join("dist", "scenarios", script+".js"))
		cmd.Dir = tsCheckDir
		cmd.Env = append(os.Environ(), "CYRNEL_URL="+h.base, "CYRNEL_API_KEY="+h.key)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		ran := 0
		lines := bufio.NewScanner(bytes.NewReader(out))
		for lines.Scan() {
			var s tsScenario
			if err := json.Unmarshal(lines.Bytes(), &s); err != nil {
				t.Errorf("%s: not a scenario line: %q", script, lines.Text())
				continue
			}
			ran++
			if !s.OK {
				t.Errorf("%s: %s: %s", s.Client, s.Scenario, s.Error)
			}
		}
		if err != nil || ran != perClient {
			t.Errorf("%s: %d of %d scenarios reported (%v)\n%s", script, ran, perClient, err, stderr.Bytes())
		}
	}
	bad, _ := c.violations()
	for _, v := range bad {
		t.Error(v)
	}
}
