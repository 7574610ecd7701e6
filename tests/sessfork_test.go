package tests

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"
)

// Sessions are forked from the environment's template, not started: the
// server's only children are the templates (the default preload, asyncio,
// has two: one with it and one without, for programs that do not await),
// and a session's interpreter is below the one with the whole preload (the
// child of its session's init). A session keeps what it
// started with across a configuration change: its template lives on for it
// beside the new one, and ends once the session has ended, leaving no
// process behind.
func TestSessionsForkFromTheTemplate(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	h.run("pass", nil)
	waitSettled(t, h)
	if ok, why := templateStatus(h); !ok {
		if reason := os.Getenv("CYRNEL_TEST_NO_SANDBOX"); reason != "" {
			t.Skipf("no forking template on this machine: %s (CYRNEL_TEST_NO_SANDBOX: %s)", why, reason)
		}
		t.Fatalf("no forking template on this machine: %s; set CYRNEL_TEST_NO_SANDBOX=<why> to skip", why)
	}
	server := h.cmd.Process.Pid
	kids := childPids(server)
	withAsyncio := slices.IndexFunc(kids, preloadsAsyncio)
	if len(kids) != 2 || withAsyncio < 0 {
		t.Fatalf("the server's children are %v, want the two templates", kids)
	}
	old, lean := kids[withAsyncio], kids[1-withAsyncio]
	s := h.newSession(map[string]any{})
	// The session names its process (PR_SET_NAME), which the host sees.
	if p := h.run("import ctypes\nctypes.CDLL(None).prctl(15, b'sessmark', 0, 0, 0)\nx = 41", session(s.ID)); p.exit() != "success" {
		t.Fatalf("x = 41: %s %s", p.exit(), p.Stderr)
	}
	if got := childPids(server); len(got) != 2 || !slices.Contains(got, old) || !slices.Contains(got, lean) {
		t.Fatalf("with a session the server's children are %v, want the templates %d and %d alone: the session was not forked", got, old, lean)
	}
	if !slices.ContainsFunc(below(old), func(pid int) bool {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return string(comm) == "sessmark\n"
	}) {
		t.Fatalf("no process below the template %d is the session's interpreter", old)
	}

	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"preload": []string{}}, nil); st != http.StatusOK {
		t.Fatalf("change the config: %d", st)
	}
	h.run("pass", nil)
	waitSettled(t, h)
	kids = childPids(server)
	if len(kids) != 2 || !slices.Contains(kids, old) || slices.Contains(kids, lean) {
		t.Fatalf("after a config change the server's children are %v, want the session's template %d and a new one", kids, old)
	}
	if p := h.run("print(x + 1)", session(s.ID)); p.exit() != "success" || p.Stdout != "42\n" {
		t.Fatalf("the session after a config change: %s %q %s", p.exit(), p.Stdout, p.Stderr)
	}
	if st, _ := h.do("DELETE", "/sessions/"+s.ID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("delete session: %d", st)
	}
	deadline := time.Now().Add(30 * time.Second)
	for slices.Contains(childPids(server), old) {
		if time.Now().After(deadline) {
			t.Fatalf("the old template %d outlived its last session by 30 s", old)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := childPids(server); len(got) != 1 {
		t.Fatalf("after the session ended the server's children are %v, want the new template alone", got)
	}
}
