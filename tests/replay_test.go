package tests

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestReplayOfAFinishedProcessHasItsDisplays: a follower that arrives after
// the process ended is told every display, in order (the replay left them
// out), as GET /processes/{pid}/displays lists them; in a session too.
func TestReplayOfAFinishedProcessHasItsDisplays(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	s := h.newSession(map[string]any{})
	for _, extra := range []map[string]any{nil, session(s.ID)} {
		p := h.run("cyrnel.display('first')\nprint('between')\ncyrnel.display({'n': 2})\n'last'", extra)
		if p.exit() != "success" {
			t.Fatalf("%s %s", p.exit(), p.Stderr)
		}
		listed := h.displays(p.PID)
		replayed := h.sseDisplays(p.PID)
		if len(listed) != 3 || fmt.Sprint(replayed) != fmt.Sprint(listed) {
			t.Fatalf("session %v: replayed %+v, listed %+v", extra != nil, replayed, listed)
		}
		for i, d := range replayed {
			if d.Index != i {
				t.Fatalf("out of order: %+v", replayed)
			}
		}
		if replayed[2].Kind != "result" || replayed[2].Data["text/plain"] != "'last'" {
			t.Fatalf("the final expression: %+v", replayed[2])
		}
	}
}

// TestSessionDownloadsAFileOverTheOldLimit: a 10 MiB file a program wrote in
// its session downloads whole, streamed (it was 422 at path.path, past
// 8 MiB), with its Content-Length; a small one still does (control).
func TestSessionDownloadsAFileOverTheOldLimit(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	s := h.newSession(map[string]any{})
	p := h.run("import hashlib, os\ndata = os.urandom(10 << 20)\nopen('big.bin', 'wb').write(data)\n"+
		"open('small.txt', 'w').write('small')\nprint(hashlib.sha256(data).hexdigest())", session(s.ID))
	if p.exit() != "success" {
		t.Fatalf("%s %s", p.exit(), p.Stderr)
	}
	st, hdr, b := h.raw("GET", "/sessions/"+s.ID+"/files/big.bin", "", nil)
	if st != http.StatusOK || len(b) != 10<<20 || hdr.Get("Content-Length") != fmt.Sprint(10<<20) {
		t.Fatalf("download: %d, %d bytes, Content-Length %q: %.200s", st, len(b), hdr.Get("Content-Length"), b)
	}
	if sum := fmt.Sprintf("%x\n", sha256.Sum256(b)); sum != p.Stdout {
		t.Fatalf("downloaded %s, wrote %s", sum, p.Stdout)
	}
	if hdr.Get("Content-Disposition") != `attachment; filename=big.bin` || hdr.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("headers: %v", hdr)
	}
	if st, _, b := h.raw("GET", "/sessions/"+s.ID+"/files/small.txt", "", nil); st != http.StatusOK || string(b) != "small" {
		t.Fatalf("small: %d %q", st, b)
	}
	if st, _, _ := h.raw("GET", "/sessions/"+s.ID+"/files/missing.txt", "", nil); st != http.StatusNotFound {
		t.Fatalf("missing: %d", st)
	}
}

// TestProcessThatEndedItsSessionSaysWhy: a program that ignores the kill
// costs its session, and the killed process's error says so (it was empty).
func TestProcessThatEndedItsSessionSaysWhy(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	s := h.newSession(map[string]any{})
	var created proc
	h.do("POST", "/processes", map[string]any{"session": s.ID, "code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ignoring', flush=True)\nwhile True:\n    time.sleep(0.01)"}, &created)
	h.waitFor(created.PID, func(p proc) bool { return p.Stdout != "" })
	h.do("POST", fmt.Sprintf("/processes/%d/kill", created.PID), nil, nil)
	p := h.waitFor(created.PID, func(p proc) bool { return p.State == "idle" })
	if p.exit() != "canceled" || p.reason() != "killed" || !strings.Contains(p.Error, "session "+s.ID+" ended with this execution (killed)") {
		t.Fatalf("killed: %s %s %q", p.exit(), p.reason(), p.Error)
	}
	var got sessionView
	h.do("GET", "/sessions/"+s.ID, nil, &got)
	if got.State != "ended" || got.EndReason != "killed" {
		t.Fatalf("session: %+v", got)
	}
}
