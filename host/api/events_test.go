package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/host/process"
)

// TestEventsReplayThenFollow: the stream is text/event-stream, replays,
// then follows until the domain ends it with exit, and stops following.
func TestEventsReplayThenFollow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	done := &process.Process{ProcessSummary: process.ProcessSummary{PID: 1, State: process.Idle}}
	f.procs.procs = []*process.Process{done}
	f.procs.replay = []process.Event{{Type: process.EventState, State: process.Running}, {Type: process.EventStdout, Text: "a"}}
	f.procs.live = make(chan process.Event, 3)
	f.procs.live <- process.Event{Type: process.EventOutput, Output: map[string]any{"k": 1}}
	f.procs.live <- process.Event{Type: process.EventStderr, Text: "b"}
	f.procs.live <- process.Event{Type: process.EventExit, Process: done}
	close(f.procs.live)
	f.procs.stopped = make(chan struct{})
	rec := f.api.Get("/processes/1/events")
	wantStatus(t, rec, http.StatusOK, nil)
	if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var events []string
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, name)
		}
	}
	if got := strings.Join(events, ","); got != "state,stdout,output,stderr,exit" {
		t.Errorf("events %s, want state,stdout,output,stderr,exit:\n%s", got, rec.Body.String())
	}
	for _, data := range []string{`"state":"running"`, `"text":"a"`, `"patch":{"k":1}`, `"text":"b"`, `"pid":1`} {
		if !strings.Contains(rec.Body.String(), data) {
			t.Errorf("stream lacks %s:\n%s", data, rec.Body.String())
		}
	}
	select {
	case <-f.procs.stopped:
	default:
		t.Error("the follower was not stopped")
	}
}

// TestEventsOfAMissingProcessAre404: answered before the stream starts, as
// a problem, not as an empty stream.
func TestEventsOfAMissingProcessAre404(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	wantProblem(t, f.api.Get("/processes/7/events"), http.StatusNotFound)
}
