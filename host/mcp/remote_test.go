package mcp

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/store"
)

// placedSessions: "here" runs on this host (A), "there" on B, "gone" has
// ended on B; End records what it ended here.
type placedSessions struct {
	mu    sync.Mutex
	ended []string
}

func (*placedSessions) Create(context.Context, session.CreateInput) (*store.Session, error) {
	return nil, errors.New("not used")
}

func (*placedSessions) Get(_ context.Context, id string) (*store.Session, error) {
	switch id {
	case "here":
		return &store.Session{ID: id, State: string(session.Ready), HostID: "A"}, nil
	case "there":
		return &store.Session{ID: id, State: string(session.Ready), HostID: "B"}, nil
	case "gone":
		return &store.Session{ID: id, State: string(session.Ended), HostID: "B"}, nil
	}
	return nil, errors.New("session " + id + " not found")
}

func (s *placedSessions) endedHere() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ended...)
}

func (s *placedSessions) End(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = append(s.ended, id)
	return nil
}

// remoteCall is what a call to another host carried.
type remoteCall struct {
	op, host, auth, session, code string
}

type fakeRemote struct {
	mu    sync.Mutex
	calls []remoteCall
	err   error
}

func (*fakeRemote) Self() string { return "A" }

func (r *fakeRemote) seen() []remoteCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]remoteCall(nil), r.calls...)
}

func (r *fakeRemote) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

func (r *fakeRemote) CreateProcess(_ context.Context, host, auth string, in process.CreateInput) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, remoteCall{"create", host, auth, in.Session, in.Code})
	return 9, r.err
}

func (r *fakeRemote) EndSession(_ context.Context, host, auth, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, remoteCall{"end", host, auth, id, ""})
	return r.err
}

// TestSessionOnAnotherHost: run_code and end_session naming a session
// another host runs go to that host with the call's Authorization; a
// session here, an ended one or an unknown one is answered here as before;
// a host that cannot be reached is an error naming the session.
func TestSessionOnAnotherHost(t *testing.T) {
	t.Parallel()
	procs := &fakeProcesses{final: process.Process{ProcessSummary: process.ProcessSummary{PID: 9, State: process.Idle, ExitState: ptr("success"), Reason: ptr("completed")}, Stdout: "2\n"}}
	sessions, remote := &placedSessions{}, &fakeRemote{}
	s := connect(t, Deps{Processes: procs, Environments: fakeEnvironments{}, Tools: &fakeTools{}, Sessions: sessions, Remote: remote})

	res, text := call(t, s, "run_code", map[string]any{"code": "print(x)", "session": "there"})
	if res.IsError || !strings.Contains(text, "stdout:\n2") {
		t.Fatalf("a run in B's session: %s", text)
	}
	for _, id := range []string{"here", "gone", "nobody"} {
		call(t, s, "run_code", map[string]any{"code": "1", "session": id})
	}
	created, _, _ := procs.seen()
	if len(created) != 3 || created[0].Session != "here" || created[1].Session != "gone" || created[2].Session != "nobody" {
		t.Fatalf("created here: %+v, want the runs in sessions here, ended and unknown", created)
	}
	if _, text := call(t, s, "end_session", map[string]any{"session": "there"}); !strings.Contains(text, "ended") {
		t.Fatalf("end B's session: %s", text)
	}
	call(t, s, "end_session", map[string]any{"session": "here"})
	if ended := sessions.endedHere(); len(ended) != 1 || ended[0] != "here" {
		t.Fatalf("ended here: %v", ended)
	}
	want := []remoteCall{{"create", "B", "Bearer k1", "there", "print(x)"}, {"end", "B", "Bearer k1", "there", ""}}
	if calls := remote.seen(); len(calls) != len(want) || calls[0] != want[0] || calls[1] != want[1] {
		t.Fatalf("calls to B: %+v, want %+v", calls, want)
	}

	remote.fail(errors.New("host B cannot be reached now; try again"))
	if res, text := call(t, s, "run_code", map[string]any{"code": "1", "session": "there"}); !res.IsError || !strings.Contains(text, "session there: host B cannot be reached") {
		t.Fatalf("B unreachable: %s", text)
	}
}
