package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/pgtest"
)

// restartLoad is load from several clients across hosts: programs that each
// print a token of their own, sent until stop. It signals each answer.
type restartLoad struct {
	hosts []*host
	stop  chan struct{}
	wg    sync.WaitGroup

	mu       sync.Mutex
	answers  []tokenAnswer
	statuses map[int]int
	changed  chan struct{} // a receive follows each new answer
}

// tokenAnswer is one request of the load and what it was answered.
type tokenAnswer struct {
	token  string
	status int // 0: the request itself failed
	p      proc
}

func startRestartLoad(hosts []*host, clients int) *restartLoad {
	l := &restartLoad{hosts: hosts, stop: make(chan struct{}), statuses: map[int]int{}, changed: make(chan struct{}, 1)}
	for c := range clients {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				token := fmt.Sprintf("c%d-%d", c, i)
				a := postToken(hosts[(c+i)%len(hosts)], token)
				l.mu.Lock()
				l.answers = append(l.answers, a)
				l.statuses[a.status]++
				l.mu.Unlock()
				select {
				case l.changed <- struct{}{}:
				default:
				}
				if a.status == http.StatusServiceUnavailable {
					select { // as a client told Retry-After would: not a tight loop
					case <-l.stop:
						return
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		})
	}
	return l
}

// until waits for cond on the counts of answers by status, failing the test
// after limit.
func (l *restartLoad) until(t *testing.T, what string, limit time.Duration, cond func(statuses map[int]int) bool) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ok := cond(l.statuses)
		counts := fmt.Sprint(l.statuses)
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-l.changed:
		case <-deadline.C:
			t.Fatalf("%s: not within %v (answers by status: %s)", what, limit, counts)
		}
	}
}

// accepted is how many were answered 201 so far.
func (l *restartLoad) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.statuses[http.StatusCreated]
}

func (l *restartLoad) finish() []tokenAnswer {
	close(l.stop)
	l.wg.Wait()
	return l.answers
}

// postToken runs a program printing token through h, waiting for it.
func postToken(h *host, token string) tokenAnswer {
	code := fmt.Sprintf("import time\ntime.sleep(0.2)\nprint(%q)", token)
	body, _ := json.Marshal(map[string]any{"code": code, "ref": token, "waitMs": 20000})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.base+"/processes", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return tokenAnswer{token: token}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := tokenAnswer{token: token, status: resp.StatusCode}
	if resp.StatusCode == http.StatusCreated {
		json.Unmarshal(b, &a.p)
	}
	return a
}

// readiness polls every host's /health/ready until each answers want,
// failing the test after limit.
func readiness(t *testing.T, hosts []*host, want int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for i, h := range hosts {
		for {
			st, _ := h.do("GET", "/health/ready", nil, nil)
			if st == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("host %d: /health/ready answers %d, not %d within %v", i, st, want, limit)
			}
			time.Sleep(100 * time.Millisecond) // polling a condition, not synchronising
		}
	}
}

// allProcesses lists every process through h, page by page.
func allProcesses(t *testing.T, h *host) []proc {
	t.Helper()
	var all []proc
	cursor := ""
	for {
		var page struct {
			Items      []proc `json:"items"`
			NextCursor string `json:"nextCursor"`
			HasMore    bool   `json:"hasMore"`
		}
		path := "/processes?limit=100"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		if st, _ := h.do("GET", path, nil, &page); st != http.StatusOK {
			t.Fatalf("list processes: %d", st)
		}
		all = append(all, page.Items...)
		if !page.HasMore {
			return all
		}
		cursor = page.NextCursor
	}
}

// TestPostgresRestartDuringLoad: two hosts on a PostgreSQL of the test's
// own, load from eight clients across them, and the database restarted
// (`pg_ctl restart -m fast`), then stopped immediate (a crash: recovery at
// the next start) for longer than the lease and started again, each
// mid-load. While it is down every host's /health/ready says 503 and
// requests are answered 503 with Retry-After, never 500; once it is back
// readiness returns and work is accepted again. Every
// execution accepted (201) reaches its final state once (one run, one row)
// with its own output, equal to what its answer said when it had ended. A
// session on one host used through the other keeps its state across both,
// and a policy and a kill made through one host reach the other after.
func TestPostgresRestartDuringLoad(t *testing.T) {
	t.Parallel()
	srv := pgtest.NewServer(t)
	const ttl = 4 * time.Second
	hs := startClusterOn(t, srv.URL(), 2, "CYRNEL_LEASE_TTL="+ttl.String())
	load := startRestartLoad(hs, 8)
	defer func() {
		select {
		case <-load.stop:
		default:
			load.finish()
		}
	}()
	more := func(what string, n int) {
		t.Helper()
		from := load.accepted()
		load.until(t, what, 60*time.Second, func(s map[int]int) bool { return s[http.StatusCreated] >= from+n })
	}

	// A session on A, used through B across both outages, keeps its state.
	var ses clusterSession
	if st, _ := hs[0].do("POST", "/sessions", map[string]any{}, &ses); st != http.StatusCreated {
		t.Fatalf("create a session on A: %d", st)
	}
	inSession := func(code, want string) {
		t.Helper()
		if p := hs[1].run(code, map[string]any{"session": ses.ID}); p.exit() != "success" || p.Stdout != want {
			t.Fatalf("%q in A's session through B: %+v", code, p)
		}
	}
	inSession("x = 0", "")

	more("work accepted before the restart", 10)
	t0 := time.Now()
	srv.Restart("fast")
	t.Logf("pg_ctl restart -m fast took %v", time.Since(t0).Round(time.Millisecond))
	more("work accepted after the fast restart", 10)
	readiness(t, hs, http.StatusOK, 10*time.Second)
	inSession("x += 1", "")

	// Stopped as a crash, for longer than the lease.
	before := load.accepted()
	srv.Stop("immediate")
	down := time.Now()
	readiness(t, hs, http.StatusServiceUnavailable, 10*time.Second)
	for i, h := range hs {
		var prob problem
		if st, hdr := h.do("POST", "/processes", map[string]any{"code": "print(1)"}, &prob); st != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
			t.Fatalf("a run through host %d while the database is down: %d %v %+v", i, st, hdr, prob)
		}
	}
	time.Sleep(time.Until(down.Add(ttl + time.Second))) // the outage's length, past the lease: a parameter of the scenario
	t0 = time.Now()
	srv.Start()
	back := time.Now()
	t.Logf("down %v; pg_ctl start (crash recovery) took %v", back.Sub(down).Round(time.Millisecond), back.Sub(t0).Round(time.Millisecond))
	// The session's host holds a lease again, and B forwards to it, within
	// 3 s of the return (503 with Retry-After until then).
	for {
		var p proc
		st, _ := hs[1].do("POST", "/processes", map[string]any{"code": "x += 1\nprint(x)", "session": ses.ID, "waitMs": 60000}, &p)
		if st == http.StatusServiceUnavailable && time.Since(back) < 3*time.Second {
			time.Sleep(100 * time.Millisecond) // as a client told Retry-After would
			continue
		}
		if st != http.StatusCreated || p.exit() != "success" || p.Stdout != "2\n" {
			t.Fatalf("x += 1 in A's session through B, %v after the return: %d %+v", time.Since(back).Round(time.Millisecond), st, p)
		}
		t.Logf("A's session served through B %v after the return", time.Since(back).Round(time.Millisecond))
		break
	}
	readiness(t, hs, http.StatusOK, 3*time.Second)
	more("work accepted after the immediate stop", 10)
	acrossHosts(t, hs[0], hs[1])
	answers := load.finish()
	t.Logf("%d requests: by status %v (%d accepted before the immediate stop)", len(answers), load.statuses, before)

	rows := map[string][]proc{} // the load's, by token (the ref)
	for _, p := range allProcesses(t, hs[1]) {
		if strings.HasPrefix(p.Ref, "c") {
			rows[p.Ref] = append(rows[p.Ref], p)
		}
	}
	if answered := len(answers); len(rows) > answered {
		t.Errorf("%d tokens stored, more than the %d requests", len(rows), answered)
	}
	for _, a := range answers {
		switch a.status {
		case http.StatusCreated:
		case http.StatusServiceUnavailable:
			// Not accepted: a client retries it, so it must not run.
			if got := rows[a.token]; len(got) > 0 {
				t.Errorf("%s was answered 503, yet stored: %+v", a.token, got)
			}
			continue
		default:
			t.Errorf("%s was answered %d", a.token, a.status)
			continue
		}
		if got := rows[a.token]; len(got) != 1 || got[0].PID != a.p.PID {
			t.Errorf("%s, accepted as pid %d, is stored in %d rows: %+v", a.token, a.p.PID, len(got), got)
			continue
		}
		var final proc
		if st, _ := hs[0].do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=30000", a.p.PID), nil, &final); st != http.StatusOK {
			t.Errorf("wait for pid %d: %d", a.p.PID, st)
			continue
		}
		if final.State != "idle" || final.exit() != "success" || final.Stdout != a.token+"\n" || final.Runs != 1 {
			t.Errorf("%s (pid %d) ended %s %s/%s runs %d stdout %q error %q", a.token, a.p.PID, final.State, final.exit(), deref(final.Reason), final.Runs, final.Stdout, final.Error)
		}
		if a.p.State == "idle" && (a.p.exit() != final.exit() || a.p.Stdout != final.Stdout) {
			t.Errorf("%s (pid %d) was answered %s %q, stored %s %q", a.token, a.p.PID, a.p.exit(), a.p.Stdout, final.exit(), final.Stdout)
		}
	}
}

// acrossHosts: after the database came back, a policy set through a and a
// kill through b of a program on a take effect on the other host within 3 s
// (each host's notification connection was ended by the restart).
func acrossHosts(t *testing.T, a, b *host) {
	t.Helper()
	setPolicies(t, a, "allow", [2]string{"pets.*", "block"})
	eventually(t, "a policy set through A, in force on B", func() bool {
		var set struct {
			Rules []struct {
				Decision string `json:"decision"`
			} `json:"rules"`
		}
		b.do("GET", "/tool-policies", nil, &set)
		return len(set.Rules) == 1 && set.Rules[0].Decision == "block"
	})
	var sleeper proc
	if st, _ := a.do("POST", "/processes", map[string]any{"code": "import time\ntime.sleep(60)", "timeoutMs": 120000}, &sleeper); st != http.StatusCreated {
		t.Fatalf("a long program on A: %d", st)
	}
	if st, _ := b.do("POST", fmt.Sprintf("/processes/%d/kill", sleeper.PID), nil, nil); st != http.StatusOK {
		t.Fatalf("kill through B: %d", st)
	}
	eventually(t, "a kill through B of a program on A", func() bool {
		var p proc
		a.do("GET", fmt.Sprintf("/processes/%d", sleeper.PID), nil, &p)
		return p.State == "idle" && p.exit() == "canceled"
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
