package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// dreddDir holds the pinned Dredd, the Node.js it runs on and the hooks
// (`make dredd` installs them).
const dreddDir = "testdata/dredd"

// dreddSummary is Dredd's last line: "complete: 300 passing, 0 failing, 0
// errors, 47 skipped, 347 total".
var dreddSummary = regexp.MustCompile(`complete: (\d+) passing, (\d+) failing, (\d+) errors, (\d+) skipped, (\d+) total`)

// TestDredd runs Dredd over every transaction of the committed OpenAPI 3.0
// document against the built server. The hooks (testdata/dredd/hooks.js)
// give each transaction a key and the objects made here, provoke the error
// statuses a client can meet, and skip the few nobody can provoke on a
// healthy single host, each with its reason. Dredd checks each answer's
// status, headers and body against the document: none may fail.
func TestDredd(t *testing.T) {
	t.Parallel()
	node, err := filepath.Abs(filepath.Join(dreddDir, "node_modules", ".bin", "node"))
	if err == nil {
		_, err = os.Stat(node)
	}
	if err != nil {
		t.Fatalf("Dredd is not installed (%v): run `make dredd`", err)
	}
	document, err := filepath.Abs("../openapi/openapi-3.0.json")
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, "", "CYRNEL_MAX_SESSIONS=4")
	fixtures, err := json.Marshal(dreddFixtures(t, h))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("node_modules", "dredd", "bin", "dredd"), document, h.base,
		"--hookfiles", "hooks.js", "--color=false", "--loglevel", "error")
	cmd.Dir = dreddDir
	cmd.Env = append(os.Environ(), "CYRNEL_DREDD_FIXTURES="+string(fixtures), "CYRNEL_DREDD_DOCUMENT="+document)
	out, err := cmd.CombinedOutput()
	m := dreddSummary.FindSubmatch(out)
	if m == nil {
		t.Fatalf("Dredd did not finish (%v):\n%s", err, out)
	}
	n := func(i int) int { v, _ := strconv.Atoi(string(m[i])); return v }
	passing, failing, errs, skipped, total := n(1), n(2), n(3), n(4), n(5)
	reasons := regexp.MustCompile(`(?m)^hook: skip: .+: .+$`).FindAll(out, -1)
	t.Logf("Dredd: %d transactions, %d passing, %d skipped (each with its reason):\n%s", total, passing, skipped, joinLines(reasons))
	if err != nil || failing != 0 || errs != 0 || passing+skipped != total || skipped != len(reasons) || passing == 0 {
		t.Fatalf("Dredd: %d passing, %d failing, %d errors, %d skipped (%d with a reason) of %d (%v):\n%s",
			passing, failing, errs, skipped, len(reasons), total, err, out)
	}
}

func joinLines(lines [][]byte) string {
	var s string
	for _, l := range lines {
		s += string(l) + "\n"
	}
	return s
}

// dreddFixture is what the hooks need: the keys, the objects path
// parameters name, and the bodies that make or change them.
type dreddFixture struct {
	Base   string            `json:"base"`
	Keys   map[string]string `json:"keys"`
	IDs    map[string]any    `json:"ids"`
	Bodies map[string]any    `json:"bodies"`
}

// dreddFixtures makes one object per transaction that uses it up (deleted,
// decided, killed) and one for those that only read.
func dreddFixtures(t *testing.T, h *host) dreddFixture {
	t.Helper()
	up := newUpstream(t)
	addPetstore(t, h, up)
	service := func(id, serverURL string) map[string]any {
		return map[string]any{
			"id": id, "adapter": "openapi", "source": map[string]any{"content": fixture(t, "swagger-petstore-3.0.yaml")},
			"config":  map[string]any{"serverUrl": serverURL, "allowPrivateNetwork": true},
			"secrets": map[string]any{"api_key": serviceSecret},
		}
	}
	// A tool whose upstream is gone answers 502.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for _, s := range []map[string]any{service("offline", gone.URL), service("doomed", up.URL)} {
		if st, _ := h.do("POST", "/services", s, nil); st != http.StatusCreated {
			t.Fatalf("create service %s: %d", s["id"], st)
		}
	}
	if st, _ := h.do("PATCH", "/tools/petstore/deletePet", map[string]any{"enabled": false}, nil); st != http.StatusOK {
		t.Fatalf("disable deletePet: %d", st)
	}
	setPolicies(t, h, "allow", [2]string{"petstore.findPetsByStatus", "ask"})
	ask := "cyrnel.services.petstore.findPetsByStatus(status='available')"
	_, approve := approvalOf(t, h, ask, 0)
	_, deny := approvalOf(t, h, ask, 0)

	pid := h.run("open('out.csv', 'w').write('a,b\\n1,2\\n')\nprint('hi')\ncyrnel.output({'n': 1})", nil).PID
	var running proc
	h.do("POST", "/processes", map[string]any{"code": "import time\ntime.sleep(600)", "timeoutMs": 600000}, &running)
	h.waitFor(running.PID, func(p proc) bool { return p.State == "running" })

	s := h.newSession(map[string]any{})
	for _, f := range []string{"in.csv", "gone.csv"} {
		if st, _, b := h.raw("PUT", "/sessions/"+s.ID+"/files/"+f, "text/csv", []byte("a,b\n1,2\n")); st != http.StatusNoContent {
			t.Fatalf("upload %s: %d %s", f, st, b)
		}
	}
	ended := h.newSession(map[string]any{})
	if st, _ := h.do("DELETE", "/sessions/"+ended.ID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("end session: %d", st)
	}
	var moduleConfig map[string]any
	if st, _ := h.do("GET", "/modules/python/config", nil, &moduleConfig); st != http.StatusOK {
		t.Fatalf("module config: %d", st)
	}
	return dreddFixture{
		Base: h.base,
		Keys: map[string]string{"admin": h.key, "runner": h.newKey("dredd-runner", "runner").Key, "approver": h.newKey("dredd-approver", "approver").Key},
		IDs: map[string]any{
			"approval": approve.ID, "approvalDeny": deny.ID,
			"key": h.newKey("dredd-read", "runner").ID, "keyDelete": h.newKey("dredd-revoke", "runner").ID,
			"pid": pid, "pidDelete": h.run("pass", nil).PID, "pidRun": h.run("print(1)", nil).PID, "pidRunning": running.PID,
			"module": "python", "service": "petstore", "serviceDelete": "doomed", "offlineService": "offline",
			"tool": "getPetById", "disabledTool": "deletePet",
			"session": s.ID, "sessionDelete": h.newSession(map[string]any{}).ID, "sessionEnded": ended.ID,
		},
		Bodies: map[string]any{
			"moduleConfig":   moduleConfig,
			"service":        service("dredd", up.URL),
			"serviceConfig":  map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true},
			"serviceSecrets": map[string]any{"api_key": serviceSecret},
			"invoke":         map[string]any{"parameters": map[string]any{"petId": 1}},
		},
	}
}
