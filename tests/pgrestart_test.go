package tests

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/pgtest"
)

// TestPostgresFaultsDuringLoad: three hosts on a PostgreSQL of the test's
// own, load from six clients across them, and the database restarted
// (`pg_ctl restart -m fast`) and, separately, stopped immediate (a crash:
// recovery at the next start) for 20 s, four times the lease, each
// mid-load. While it is down every host's /health/ready says 503 and
// requests are answered 503 with Retry-After, never 500. After each
// return: a policy, an environment switch, a kill and an approval made
// through one host take effect on the others within 3 s; a session on A
// used through every host keeps its state; a program running on C through
// the fault ends success with its output kept; no row of the load sent
// before the return is live 30 s after it; a run whose wait ended while
// the database was down was answered 201, live, and its result landed
// after the return. Every execution accepted (201)
// reaches its final state once (one run, one row) with its own output,
// equal to what its answer said when it had ended; no 503 leaves a row.
// Last, a SIGKILLed host's session ends host_lost, seen through another.
func TestPostgresFaultsDuringLoad(t *testing.T) {
	t.Parallel()
	srv := pgtest.NewServer(t)
	const ttl = 5 * time.Second
	const stopped = 20 * time.Second
	hs := startClusterOn(t, srv.URL(), 3, "CYRNEL_LEASE_TTL="+ttl.String())
	a, b, c := hs[0], hs[1], hs[2]
	approver := servePets(t, a)

	// A session on A, used through every host after each fault.
	var ses clusterSession
	if st, _ := a.do("POST", "/sessions", map[string]any{}, &ses); st != http.StatusCreated {
		t.Fatalf("create a session on A: %d", st)
	}
	if p := a.run("x = 0", map[string]any{"session": ses.ID}); p.exit() != "success" {
		t.Fatalf("x = 0 in A's session: %+v", p)
	}
	x := 0
	// A session on C, whose host is SIGKILLed last.
	var lost clusterSession
	if st, _ := c.do("POST", "/sessions", map[string]any{}, &lost); st != http.StatusCreated {
		t.Fatalf("create a session on C: %d", st)
	}

	load := startRestartLoad(hs, 6)
	defer load.finish()
	more := func(what string, n int) {
		t.Helper()
		from := load.accepted()
		load.until(t, what, 60*time.Second, func(s map[int]int) bool { return s[http.StatusCreated] >= from+n })
	}

	var acrossPID int64 // a run answered while the database was down
	faults := []struct {
		name   string
		runFor time.Duration // the program on C: through the fault and past it
		block  string        // the tool a policy set after it blocks
		fault  func() time.Time
	}{
		{"pg_ctl restart -m fast", 5 * time.Second, "pets.addPet", func() time.Time {
			srv.Restart("fast")
			return time.Now()
		}},
		{"stopped -m immediate for 20 s", stopped + 5*time.Second, "pets.deletePet", func() (back time.Time) {
			back, acrossPID = stopDuringLoad(t, srv, hs, stopped)
			return back
		}},
	}
	for _, f := range faults {
		pythonEverywhere(t, hs)
		more("work accepted before: "+f.name, 10)
		cross := startCrossing(t, a, c, f.runFor)
		down := time.Now()
		back := f.fault()
		t.Logf("%s: the database back after %v", f.name, back.Sub(down).Round(time.Millisecond))

		took := converge(t, hs, approver, cross, back, "typescript", f.block)
		took["session through B"] = sessionThroughEvery(t, []*host{b, c, a}, ses.ID, &x, back)
		readiness(t, hs, http.StatusOK, time.Until(back.Add(3*time.Second)))
		took["no live rows"] = noLiveRows(t, b, load, back)
		if acrossPID != 0 {
			// Its final write, tried again, landed after the return.
			if p := b.wait(acrossPID); p.exit() != "success" || p.Stdout != "across\n" || p.Runs != 1 {
				t.Errorf("the run that ended while the database was down: %+v", p)
			}
		}
		more("work accepted after: "+f.name, 10)

		if p := a.wait(cross.long.PID); p.exit() != "success" || p.Stdout != "started\nsurvived\n" || p.Runs != 1 || p.HostID != cross.long.HostID {
			t.Errorf("%s: the program running on C through it: %+v", f.name, p)
		}
		t.Logf("%s: requests sent while the database was down, by status: %v; from the return: %v", f.name, load.between(down, back), roundAll(took))
	}

	answers := load.finish()
	t.Logf("%d requests: by status %v", len(answers), load.statuses)
	checkAnswers(t, hs, answers)

	// A SIGKILLed host's session ends host_lost (the lease judged on the
	// database's clock, which went away twice).
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
	t.Logf("C's session ended host_lost %v after the SIGKILL (lease %v)", sessionLost(t, a, lost, ttl, time.Now()).Round(time.Millisecond), ttl)
}

// stopDuringLoad stops srv immediate (a crash) for stopped, with a run in
// flight through B whose wait ends while it is down, and checks that
// meanwhile every host is unready and answers runs 503 with Retry-After. It
// returns when the database was back and the in-flight run's pid.
func stopDuringLoad(t *testing.T, srv *pgtest.Server, hs []*host, stopped time.Duration) (time.Time, int64) {
	t.Helper()
	across := postAcrossStop(t, hs[1])
	srv.Stop("immediate")
	down := time.Now()
	// Its wait ended while the database was down: still it was created,
	// and says so (a 503 would have it run again).
	got := <-across
	if got.status != http.StatusCreated || got.p.State == "idle" {
		t.Fatalf("a run whose wait ended while the database was down was answered %d %+v, want 201 and live", got.status, got.p)
	}
	readiness(t, hs, http.StatusServiceUnavailable, 10*time.Second)
	for i, h := range hs {
		var prob problem
		if st, hdr := h.do("POST", "/processes", map[string]any{"code": "print(1)"}, &prob); st != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
			t.Fatalf("a run through host %d while the database is down: %d %v %+v", i, st, hdr, prob)
		}
	}
	time.Sleep(time.Until(down.Add(stopped))) // the outage's length: the scenario, not synchronisation
	srv.Start()
	return time.Now(), got.p.PID
}

// pythonEverywhere switches back to Python through the first host if
// another environment is active, and waits until every host runs it.
// Python before each fault, TypeScript switched to after it: its setup
// takes tens of milliseconds, so what is measured is how soon a switch
// reaches the others, not a Python pool's start (over a second here under
// load, on the host switched through and then on each other one).
func pythonEverywhere(t *testing.T, hs []*host) {
	t.Helper()
	if activeModule(hs[0]) == "python" {
		return
	}
	if st, _ := hs[0].do("PUT", "/environment", map[string]any{"module": "python"}, nil); st != http.StatusOK {
		t.Fatalf("switch back to python: %d", st)
	}
	eventuallyWithin(t, 10*time.Second, "python again on every host", func() bool {
		return activeModule(hs[1]) == "python" && activeModule(hs[2]) == "python"
	})
}

// sessionThroughEvery runs x += 1 in session ses through each host in turn,
// the first within 3 s of the database's return at back (its host holds
// its lease again; 503 with Retry-After until then): each prints the next
// *x. It returns when the first was answered.
func sessionThroughEvery(t *testing.T, hs []*host, ses string, x *int, back time.Time) time.Duration {
	t.Helper()
	var first time.Duration
	for i, h := range hs {
		*x++
		var p proc
		st := h.served(time.Until(back.Add(3*time.Second)), "POST", "/processes", map[string]any{"code": "x += 1\nprint(x)", "session": ses, "waitMs": 60000}, &p)
		if st != http.StatusCreated || p.exit() != "success" || p.Stdout != fmt.Sprintf("%d\n", *x) {
			t.Fatalf("x += 1 in the session through %s, %v after the return: %d %+v", h.base, time.Since(back).Round(time.Millisecond), st, p)
		}
		if i == 0 {
			first = time.Since(back)
		}
	}
	return first
}

// servePets imports a petstore whose getPetById answers doggie through a,
// its getPetById asking for approval, and returns an approver's key: the
// programs run as the bootstrap key, which never decides its own calls.
func servePets(t *testing.T, a *host) string {
	t.Helper()
	importPets(t, a)
	setPolicies(t, a, "allow", [2]string{"pets.getPetById", "ask"})
	return reviewer(a).key
}

// importPets imports the petstore as service "pets" on h, its server a
// loopback upstream that answers every call with one pet; the upstream ends
// with the test.
func importPets(t testing.TB, h *host) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":1,"name":"doggie"}`))
	}))
	t.Cleanup(up.Close)
	if st, _ := h.do("POST", "/services", map[string]any{
		"id": "pets", "adapter": "openapi", "source": map[string]any{"content": fixture(t, "swagger-petstore-3.0.yaml")},
		"config": map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true},
	}, nil); st != http.StatusCreated {
		t.Fatalf("import pets: %d", st)
	}
	return up
}

// postAcrossStop sends through h a program that ends after the database
// is stopped, asking to wait for it longer than it runs but shorter than
// the outage, and returns once its row is stored; its answer arrives on
// the channel.
func postAcrossStop(t *testing.T, h *host) <-chan tokenAnswer {
	t.Helper()
	answer := make(chan tokenAnswer, 1)
	go func() {
		answer <- postCode(h, "across", polyglot("import time\ntime.sleep(2)\nprint('across')",
			"await new Promise(r => setTimeout(r, 2000));\nconsole.log('across');"), 4*time.Second)
	}()
	eventually(t, "the row of a run sent before the stop", func() bool {
		var list struct {
			Items []proc `json:"items"`
		}
		h.do("GET", "/processes?ref=across", nil, &list)
		return len(list.Items) == 1 && list.Items[0].State == "running"
	})
	return answer
}

// crossing is what runs across a database fault, started before it.
type crossing struct {
	long     proc   // on C: runs through the fault, then prints survived
	sleeper  proc   // on A: killed through B after the return
	asking   proc   // on A: its tool call waits on an approval
	approval string // decided through C after the return
}

// startCrossing starts the programs of a crossing, in whichever environment
// is active, and returns once the first two run and the approval is pending.
func startCrossing(t *testing.T, a, c *host, runFor time.Duration) crossing {
	t.Helper()
	var x crossing
	start := func(h *host, what, code string, p *proc) {
		t.Helper()
		if st, _ := h.do("POST", "/processes", map[string]any{"code": code, "timeoutMs": 180000}, p); st != http.StatusCreated {
			t.Fatalf("%s: %d", what, st)
		}
	}
	start(c, "a long program on C", polyglot(
		fmt.Sprintf("import time\nprint('started', flush=True)\ntime.sleep(%g)\nprint('survived')", runFor.Seconds()),
		fmt.Sprintf("console.log('started');\nawait new Promise(r => setTimeout(r, %d));\nconsole.log('survived');", runFor.Milliseconds())), &x.long)
	start(a, "a sleeper on A", polyglot(
		"import time\nprint('started', flush=True)\ntime.sleep(150)",
		"console.log('started');\nawait new Promise(r => setTimeout(r, 150000));"), &x.sleeper)
	start(a, "a tool call on A", polyglot(
		"print(cyrnel.services.pets.getPetById(petId=1))",
		"console.log(JSON.stringify(await cyrnel.services.pets.tools.getPetById.invoke({petId: 1})));"), &x.asking)
	c.waitFor(x.long.PID, func(p proc) bool { return p.Stdout == "started\n" })
	a.waitFor(x.sleeper.PID, func(p proc) bool { return p.Stdout == "started\n" })
	var listed struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	eventually(t, "the approval, read through C", func() bool {
		c.do("GET", fmt.Sprintf("/approvals?state=pending&pid=%d", x.asking.PID), nil, &listed)
		return len(listed.Items) == 1
	})
	x.approval = listed.Items[0].ID
	return x
}

// converge makes, as soon as the database is back (at back), a policy
// change through A (blocking block), an environment switch to module
// through C, a kill through B of x's sleeper on A and an approval through C
// of x's call on A, all at once, each sent again while it is answered 503,
// and requires each in force on the other hosts within 3 s of back. It
// returns how long after back each was.
func converge(t *testing.T, hs []*host, approver string, x crossing, back time.Time, module, block string) map[string]time.Duration {
	t.Helper()
	a, b, c := hs[0], hs[1], hs[2]
	limit := back.Add(3 * time.Second)
	var mu sync.Mutex
	took := map[string]time.Duration{}
	var wg sync.WaitGroup
	change := func(what string, send func() int, inForce func() bool) {
		wg.Go(func() {
			if st := send(); st != http.StatusOK {
				t.Errorf("%s: answered %d", what, st)
				return
			}
			mu.Lock()
			took[what+" answered"] = time.Since(back)
			mu.Unlock()
			for !inForce() {
				if time.Now().After(limit) {
					t.Errorf("%s: not in force within 3 s of the database's return", what)
					return
				}
				time.Sleep(50 * time.Millisecond) // polling what another process makes visible
			}
			mu.Lock()
			took[what] = time.Since(back)
			mu.Unlock()
		})
	}
	rules := []map[string]string{{"pattern": "pets.getPetById", "decision": "ask"}, {"pattern": block, "decision": "block"}}
	change("policy through A", func() int {
		return a.served(time.Until(limit), "PUT", "/tool-policies", map[string]any{"default": "allow", "rules": rules}, nil)
	}, func() bool {
		return policyIs(b, block) && policyIs(c, block)
	})
	change("environment through C", func() int {
		return c.served(time.Until(limit), "PUT", "/environment", map[string]any{"module": module}, nil)
	}, func() bool {
		return activeModule(a) == module && activeModule(b) == module
	})
	change("kill through B", func() int {
		return b.served(time.Until(limit), "POST", fmt.Sprintf("/processes/%d/kill", x.sleeper.PID), nil, nil)
	}, func() bool {
		var p proc
		c.do("GET", fmt.Sprintf("/processes/%d", x.sleeper.PID), nil, &p)
		return p.State == "idle" && p.exit() == "canceled"
	})
	change("approval through C", func() int {
		return c.withKey(approver).served(time.Until(limit), "POST", "/approvals/"+x.approval+"/approve", nil, nil)
	}, func() bool {
		var p proc
		b.do("GET", fmt.Sprintf("/processes/%d", x.asking.PID), nil, &p)
		return p.State == "idle" && p.exit() == "success" && strings.Contains(p.Stdout, "doggie")
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return took
}

func policyIs(h *host, block string) bool {
	var set struct {
		Rules []struct {
			Pattern  string `json:"pattern"`
			Decision string `json:"decision"`
		} `json:"rules"`
	}
	h.do("GET", "/tool-policies", nil, &set)
	return len(set.Rules) == 2 && set.Rules[1].Pattern == block && set.Rules[1].Decision == "block"
}

func activeModule(h *host) string {
	var env envStatus
	h.do("GET", "/environment", nil, &env)
	if env.Active == nil {
		return ""
	}
	return env.Active.Module
}

// served sends a request through h, again while it is answered 503 (as a
// client told Retry-After would), for at most limit.
func (h *host) served(limit time.Duration, method, path string, body, out any) int {
	h.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		st, _ := h.do(method, path, body, out)
		if st != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return st
		}
		time.Sleep(100 * time.Millisecond) // as a client told Retry-After would
	}
}

// noLiveRows: 30 s after the database's return at back, no row of the load
// sent before it is live (queued or running). It returns when none was.
func noLiveRows(t *testing.T, h *host, load *restartLoad, back time.Time) time.Duration {
	t.Helper()
	for {
		var live []proc
		for _, p := range allProcesses(t, h) {
			if strings.HasPrefix(p.Ref, "c") && p.State != "idle" && load.sentBefore(p.Ref, back) {
				live = append(live, p)
			}
		}
		if len(live) == 0 {
			return time.Since(back)
		}
		if time.Since(back) > 30*time.Second {
			t.Fatalf("%d rows of the load still live 30 s after the database's return: %+v", len(live), live)
		}
		time.Sleep(250 * time.Millisecond) // polling the rows, not synchronising
	}
}

// checkAnswers: every request of the load answered 201 ended success once,
// in one row, with its own output, as its answer said if it had ended; none
// answered 503 is stored; none was answered anything else.
func checkAnswers(t *testing.T, hs []*host, answers []tokenAnswer) {
	t.Helper()
	rows := map[string][]proc{} // the load's, by token (the ref)
	for _, p := range allProcesses(t, hs[1]) {
		if strings.HasPrefix(p.Ref, "c") {
			rows[p.Ref] = append(rows[p.Ref], p)
		}
	}
	if len(rows) > len(answers) {
		t.Errorf("%d tokens stored, more than the %d requests", len(rows), len(answers))
	}
	for _, a := range answers {
		switch a.status {
		case http.StatusCreated:
		case http.StatusServiceUnavailable:
			// Not accepted: a client retries it, so it must not run.
			if got := rows[a.token]; len(got) > 0 {
				t.Errorf("%s was answered 503, yet stored: pid %d %s %s/%s", a.token, got[0].PID, got[0].State, got[0].exit(), got[0].reason())
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

func roundAll(d map[string]time.Duration) map[string]time.Duration {
	for k, v := range d {
		d[k] = v.Round(time.Millisecond)
	}
	return d
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
