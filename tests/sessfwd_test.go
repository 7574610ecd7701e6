package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clusterSession is the part of a session the scale-out tests read.
type clusterSession struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	EndReason string `json:"endReason"`
	HostID    string `json:"hostId"`
}

// TestScaleOutSessions: a session started on A is used through B and C as
// if they were A: its state survives runs through different hosts, a file
// put through B is read through C, and DELETE through C ends it. A request already forwarded is not
// forwarded again: it is answered 409 naming the session's host.
func TestScaleOutSessions(t *testing.T) {
	t.Parallel()
	hs := startCluster(t, 3)
	a, b, c := hs[0], hs[1], hs[2]
	var ses clusterSession
	if st, _ := a.do("POST", "/sessions", map[string]any{}, &ses); st != http.StatusCreated || ses.HostID == "" {
		t.Fatalf("create on A: %d %+v", st, ses)
	}
	var seen clusterSession
	if c.do("GET", "/sessions/"+ses.ID, nil, &seen); seen.HostID != ses.HostID || seen.State != "ready" {
		t.Fatalf("read through C: %+v, want A's %+v", seen, ses)
	}

	if p := b.run("x = 1", map[string]any{"session": ses.ID}); p.exit() != "success" || p.HostID != ses.HostID {
		t.Fatalf("x = 1 through B: %+v", p)
	}
	if p := c.run("x += 1\nprint(x)", map[string]any{"session": ses.ID}); p.exit() != "success" || p.Stdout != "2\n" {
		t.Fatalf("x += 1 through C: %+v", p)
	}

	if st, _, body := b.raw("PUT", "/sessions/"+ses.ID+"/files/data%2Fin.txt", "application/octet-stream", []byte("through B")); st != http.StatusNoContent {
		t.Fatalf("put through B: %d %s", st, body)
	}
	if st, _, body := c.raw("GET", "/sessions/"+ses.ID+"/files/data%2Fin.txt", "", nil); st != http.StatusOK || string(body) != "through B" {
		t.Fatalf("get through C: %d %q", st, body)
	}
	if p := a.run("print(open('data/in.txt').read())", map[string]any{"session": ses.ID}); p.Stdout != "through B\n" {
		t.Fatalf("the file put through B, read by the program on A: %+v", p)
	}

	// As a forwarded request arrives at a host that does not run the
	// session: served there, never sent on.
	var prob problem
	if st := b.forwarded("POST", "/processes", fmt.Sprintf(`{"code": "print(x)", "session": %q}`, ses.ID), &prob); st != http.StatusConflict || !strings.Contains(prob.Detail, ses.HostID) {
		t.Fatalf("a forwarded request at B: %d %+v, want 409 naming host %s", st, prob, ses.HostID)
	}

	if st, _ := c.do("DELETE", "/sessions/"+ses.ID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("delete through C: %d", st)
	}
	if b.do("GET", "/sessions/"+ses.ID, nil, &seen); seen.State != "ended" || seen.EndReason != "deleted" {
		t.Fatalf("after DELETE through C, read through B: %+v", seen)
	}
}

// forwarded sends body as a request another host forwarded.
func (h *host) forwarded(method, path, body string, out any) int {
	h.t.Helper()
	req, err := http.NewRequest(method, h.base+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.key)
	req.Header.Set("Cyrnel-Forwarded-By", "elsewhere")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		h.t.Fatalf("%s %s: %d: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode
}

// TestScaleOutSessionHostLost: the host of a session is SIGKILLed. Until
// its lease runs out a request for the session through another host is
// answered 503 with Retry-After; within the lease bound the session ends
// host_lost, seen through the other host, which deletes it.
func TestScaleOutSessionHostLost(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	hs := startCluster(t, 2, "CYRNEL_LEASE_TTL="+ttl.String())
	a, b := hs[0], hs[1]
	var ses clusterSession
	if st, _ := a.do("POST", "/sessions", map[string]any{}, &ses); st != http.StatusCreated {
		t.Fatalf("create on A: %d", st)
	}
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	t0 := time.Now()
	// The lease was renewed within ttl/3 before the kill: it still lives.
	var prob problem
	st, hdr := b.do("POST", "/processes", map[string]any{"code": "print(1)", "session": ses.ID}, &prob)
	if st != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(prob.Detail, ses.HostID) {
		t.Fatalf("a run through B while A's lease lives: %d %v %+v", st, hdr, prob)
	}
	sessionLost(t, b, ses, ttl, t0)
	if st, _ := b.do("DELETE", "/sessions/"+ses.ID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("delete the lost session through B: %d", st)
	}
	var p proc
	if st, _ := b.do("POST", "/processes", map[string]any{"code": "print(1)", "session": ses.ID}, &p); st != http.StatusConflict {
		t.Fatalf("a run in the lost session: %d %+v, want 409", st, p)
	}
}

// sessionLost: ses, whose host was SIGKILLed at killed, ends host_lost
// within the lease bound, seen through h, and returns how long after the
// kill. The bound: the lease runs out within ttl of the last renewal, and a
// live host looks every ttl/3.
func sessionLost(t *testing.T, h *host, ses clusterSession, ttl time.Duration, killed time.Time) time.Duration {
	t.Helper()
	var seen clusterSession
	for h.do("GET", "/sessions/"+ses.ID, nil, &seen); seen.State != "ended"; h.do("GET", "/sessions/"+ses.ID, nil, &seen) {
		if took := time.Since(killed); took > ttl+ttl/3+time.Second {
			t.Fatalf("still %s after %v, more than the lease bound", seen.State, took)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition, not synchronising
	}
	if seen.EndReason != "host_lost" {
		t.Fatalf("the dead host's session: %+v", seen)
	}
	return time.Since(killed)
}

// TestScaleOutApprovalEvent: a program on A waits on an approval; B's event
// stream of it shows the approval event (with the approval's id), and,
// once it is approved through B, runs on to its exit.
func TestScaleOutApprovalEvent(t *testing.T) {
	t.Parallel()
	hs := startCluster(t, 2)
	a, b := hs[0], hs[1]
	importPets(t, a)
	setPolicies(t, a, "allow", [2]string{"pets.getPetById", "ask"})
	var p proc
	a.do("POST", "/processes", map[string]any{"code": "print(cyrnel.services.pets.getPetById(petId=1))", "timeoutMs": 120000}, &p)
	if p.HostID == "" {
		t.Fatalf("created on A: %+v", p)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/processes/%d/events", b.base, p.PID), nil)
	req.Header.Set("Authorization", "Bearer "+b.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var types []string
	approved := false
	for sc.Scan() {
		if typ, ok := strings.CutPrefix(sc.Text(), "event:"); ok {
			types = append(types, strings.TrimSpace(typ))
			continue
		}
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok || types[len(types)-1] != "approval" {
			continue
		}
		var apr approvalView
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &apr); err != nil || apr.ID == "" || apr.State != "pending" || apr.PID == nil || *apr.PID != p.PID {
			t.Fatalf("approval event through B: %s (%v)", data, err)
		}
		if approved {
			t.Fatalf("approval event twice through B: %v", types)
		}
		if st, _ := b.withKey(reviewer(a).key).do("POST", "/approvals/"+apr.ID+"/approve", nil, nil); st != 200 {
			t.Fatalf("approve through B: %d", st)
		}
		approved = true
	}
	if !approved || types[len(types)-1] != "exit" {
		t.Fatalf("B's stream of A's program: %v, want an approval event, then exit", types)
	}
	var w proc
	if b.do("GET", fmt.Sprintf("/processes/%d", p.PID), nil, &w); w.exit() != "success" || !strings.Contains(w.Stdout, "doggie") {
		t.Fatalf("approved through B: %+v", w)
	}
}
