package tests

import (
	"fmt"
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
