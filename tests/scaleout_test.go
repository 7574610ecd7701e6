package tests

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/pgtest"
)

// newSecretsKey is a fresh CYRNEL_SECRETS_KEY.
func newSecretsKey(t testing.TB) string {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(key)
}

// startCluster starts n hosts at once on one fresh schema, sharing the API key
// and the secrets key, each with its own data directory.
func startCluster(t testing.TB, n int, extra ...string) []*host {
	t.Helper()
	return startClusterOn(t, pgtest.URL(t), n, extra...)
}

// startClusterOn is startCluster on the database at url.
func startClusterOn(t testing.TB, url string, n int, extra ...string) []*host {
	t.Helper()
	env := append([]string{
		"CYRNEL_DB_URL=" + pgtest.Schema(t, url),
		"CYRNEL_SECRETS_KEY=" + newSecretsKey(t),
		"CYRNEL_API_KEY=" + newSecretsKey(t),
	}, extra...)
	hosts := make([]*host, n)
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Go(func() { hosts[i] = start(t, "", env...) })
	}
	wg.Wait()
	for _, h := range hosts {
		if h == nil {
			t.FailNow()
		}
	}
	return hosts
}

// events reads a process's event stream through h to its end and returns
// the events' types and the last event's data.
func (h *host) events(pid int64) (types []string, last map[string]any) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/processes/%d/events", h.base, pid), nil)
	req.Header.Set("Authorization", "Bearer "+h.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if typ, ok := strings.CutPrefix(sc.Text(), "event:"); ok {
			types = append(types, strings.TrimSpace(typ))
			continue
		}
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		last = map[string]any{}
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &last); err != nil {
			h.t.Fatalf("event %q: %v", data, err)
		}
	}
	return types, last
}

// TestScaleOutProcesses: three hosts started at once on a fresh schema run
// what they receive; any host follows, waits on, kills, deletes and re-runs
// an execution another host runs.
func TestScaleOutProcesses(t *testing.T) {
	t.Parallel()
	hs := startCluster(t, 3)
	ids := map[string]int{}
	for i := range 6 {
		h := hs[i%3]
		p := h.run(fmt.Sprintf("print(%d)", i), nil)
		if p.exit() != "success" || p.Stdout != fmt.Sprintf("%d\n", i) {
			t.Fatalf("on host %d: %+v", i%3, p)
		}
		if prev, ok := ids[p.HostID]; ok && prev != i%3 {
			t.Fatalf("host ids: %s ran on host %d and %d", p.HostID, prev, i%3)
		}
		ids[p.HostID] = i % 3
	}
	if len(ids) != 3 {
		t.Fatalf("executions ran on %d hosts, want each on the one that received it: %v", len(ids), ids)
	}
	a, b, c := hs[0], hs[1], hs[2]

	// Followed through B while A runs it: output as it comes, then exit.
	var p proc
	a.do("POST", "/processes", map[string]any{"code": "import time\nprint('tick', flush=True)\ntime.sleep(1.5)\nprint('tock', flush=True)"}, &p)
	types, last := b.events(p.PID)
	if len(types) == 0 || types[len(types)-1] != "exit" || !strings.Contains(strings.Join(types, ","), "stdout") {
		t.Fatalf("events through another host: %v", types)
	}
	if last["exitState"] != "success" || last["stdout"] != "tick\ntock\n" {
		t.Fatalf("exit event through another host: %v", last)
	}

	// A long one on A: B sees its output so far, B's wait times out, C
	// kills it within a second, B's wait then returns it finished.
	a.do("POST", "/processes", map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(60)", "timeoutMs": 120000}, &p)
	got := b.waitFor(p.PID, func(p proc) bool { return strings.Contains(p.Stdout, "started") })
	if got.State != "running" || got.HostID != ids2(ids, 0) {
		t.Fatalf("running on A, read through B: %+v", got)
	}
	var w proc
	if b.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=300", p.PID), nil, &w); w.State != "running" {
		t.Fatalf("wait through B before the kill: %+v", w)
	}
	var prob problem
	if st, _ := c.do("DELETE", fmt.Sprintf("/processes/%d", p.PID), nil, &prob); st != 409 {
		t.Fatalf("delete of a running process through C: %d", st)
	}
	t0 := time.Now()
	if st, _ := c.do("POST", fmt.Sprintf("/processes/%d/kill", p.PID), nil, &w); st != 200 {
		t.Fatalf("kill through C: %d %+v", st, w)
	}
	b.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=10000", p.PID), nil, &w)
	if took := time.Since(t0); w.State != "idle" || w.exit() != "canceled" || w.reason() != "killed" || took > 3*time.Second {
		t.Fatalf("killed through C, waited through B (%v): %+v", took, w)
	}

	// Re-run through C: it runs on C; delete through B.
	var re proc
	if st, _ := c.do("POST", fmt.Sprintf("/processes/%d/run", p.PID), map[string]any{"force": true}, &re); st != 200 {
		t.Fatalf("re-run through C: %d", st)
	}
	if re.HostID != ids2(ids, 2) {
		t.Fatalf("re-run through C ran on %s, want C", re.HostID)
	}
	if st, _ := b.do("POST", fmt.Sprintf("/processes/%d/kill", p.PID), nil, nil); st != 200 {
		t.Fatalf("kill of the re-run through B: %d", st)
	}
	a.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=10000", p.PID), nil, &w)
	if w.State != "idle" || w.Runs != 2 {
		t.Fatalf("re-run killed through B, waited through A: %+v", w)
	}
	if st, _ := b.do("DELETE", fmt.Sprintf("/processes/%d", p.PID), nil, nil); st != 204 {
		t.Fatalf("delete through B: %d", st)
	}
	if st, _ := a.do("GET", fmt.Sprintf("/processes/%d", p.PID), nil, nil); st != 404 {
		t.Fatalf("deleted through B, read through A: %d", st)
	}
}

// ids2 is the host id of host i (from the round-robin run).
func ids2(ids map[string]int, i int) string {
	for id, n := range ids {
		if n == i {
			return id
		}
	}
	return ""
}

// TestScaleOutHostLost: a host SIGKILLed mid-run, never restarted: another
// host finishes its execution as failed, host_lost, within the lease bound.
func TestScaleOutHostLost(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	hs := startCluster(t, 2, "CYRNEL_LEASE_TTL="+ttl.String())
	a, b := hs[0], hs[1]
	var p proc
	a.do("POST", "/processes", map[string]any{"code": "import time\nprint('up', flush=True)\ntime.sleep(120)", "timeoutMs": 300000}, &p)
	b.waitFor(p.PID, func(p proc) bool { return p.State == "running" })
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	t0 := time.Now()
	var w proc
	// The bound: the lease runs out within ttl of the last renewal, and a
	// live host looks every ttl/3.
	b.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=%d", p.PID, (3*ttl).Milliseconds()), nil, &w)
	if w.State != "idle" || w.exit() != "failed" || w.reason() != "host_lost" {
		t.Fatalf("after %v: %+v", time.Since(t0), w)
	}
	if took := time.Since(t0); took > ttl+ttl/3+time.Second {
		t.Fatalf("host_lost after %v, more than the lease bound", took)
	}
}

// TestScaleOutConfiguration: a service imported, disabled and deleted on
// one host is used through another; the environment switched through one
// host is active on the others.
func TestScaleOutConfiguration(t *testing.T) {
	t.Parallel()
	hs := startCluster(t, 3)
	a, b, c := hs[0], hs[1], hs[2]
	importPets(t, a)
	call := "print(cyrnel.services.pets.getPetById(petId=1))"
	eventually(t, "the imported service used through B", func() bool {
		p := b.run(call, nil)
		return p.exit() == "success" && strings.Contains(p.Stdout, "doggie")
	})
	if st, _ := a.do("PATCH", "/services/pets", map[string]any{"enabled": false}, nil); st != 200 {
		t.Fatalf("disable on A: %d", st)
	}
	eventually(t, "the disabled service refused through C", func() bool { return c.run(call, nil).exit() == "failed" })
	if st, _ := a.do("DELETE", "/services/pets", nil, nil); st != 204 {
		t.Fatalf("delete on A: %d", st)
	}
	eventually(t, "the deleted service gone on B", func() bool {
		st, _ := b.do("GET", "/services/pets", nil, nil)
		var tools struct {
			Items []any `json:"items"`
		}
		b.do("GET", "/tools", nil, &tools)
		return st == 404 && len(tools.Items) == 0 && b.run(call, nil).exit() == "failed"
	})

	if st, _ := a.do("PUT", "/tool-policies", map[string]any{"default": "block", "rules": []any{}}, nil); st != 200 {
		t.Fatalf("tool policies on A: %d", st)
	}
	eventually(t, "the tool policies set on A read through C", func() bool {
		var set struct {
			Default string `json:"default"`
		}
		c.do("GET", "/tool-policies", nil, &set)
		return set.Default == "block"
	})

	if st, _ := b.do("PUT", "/environment", map[string]any{"module": "typescript"}, nil); st != 200 {
		t.Fatalf("switch through B: %d", st)
	}
	for i, h := range []*host{a, c} {
		eventually(t, fmt.Sprintf("host %d runs TypeScript", i), func() bool {
			var env struct {
				Active struct {
					Module string `json:"module"`
				} `json:"active"`
			}
			h.do("GET", "/environment", nil, &env)
			return env.Active.Module == "typescript" && h.run("const x: number = 2; console.log(x * 21);", nil).Stdout == "42\n"
		})
	}
}

// eventually checks cond until it holds, for at most 3 s: configuration
// changes reach the other hosts within about a second.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, 3*time.Second, what, cond)
}

// eventuallyWithin is eventually with a bound of its own, for a condition
// that waits on slow work (a package build, which is pip's start-up and
// resolution).
func eventuallyWithin(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition, not synchronising
	}
}

// TestScaleOutSecretsKey: on PostgreSQL a host without the shared key, or
// with another key, refuses to start and says to share CYRNEL_SECRETS_KEY.
func TestScaleOutSecretsKey(t *testing.T) {
	t.Parallel()
	db := "CYRNEL_DB_URL=" + pgtest.Schema(t, pgtest.URL(t))
	first := start(t, "", db, "CYRNEL_SECRETS_KEY="+newSecretsKey(t))
	first.stop()
	for name, env := range map[string][]string{
		"another key": {db, "CYRNEL_SECRETS_KEY=" + newSecretsKey(t)},
		"no key":      {db, "CYRNEL_SECRETS_KEY="},
	} {
		cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir())
		cmd.Env = append(cmd.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "CYRNEL_SECRETS_KEY") || !strings.Contains(string(out), "share") {
			t.Fatalf("%s: want a refusal naming the shared CYRNEL_SECRETS_KEY, got %v:\n%s", name, err, out)
		}
	}
}

// TestScaleOutApprovals: an approval a program on A waits on is decided
// through B and the program goes on at once; when A dies with a program
// suspended on an approval, the approval expires and the program ends
// host_lost.
func TestScaleOutApprovals(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	hs := startCluster(t, 2, "CYRNEL_LEASE_TTL="+ttl.String())
	a, b := hs[0], hs[1]
	importPets(t, a)
	setPolicies(t, a, "allow", [2]string{"pets.getPetById", "ask"})
	pending := func(pid int64) approvalView {
		var listed struct {
			Items []approvalView `json:"items"`
		}
		eventually(t, "a pending approval read through B", func() bool {
			b.do("GET", fmt.Sprintf("/approvals?state=pending&pid=%d", pid), nil, &listed)
			return len(listed.Items) == 1
		})
		return listed.Items[0]
	}
	call := map[string]any{"code": "print(cyrnel.services.pets.getPetById(petId=1))", "timeoutMs": 120000}

	var p proc
	a.do("POST", "/processes", call, &p)
	apr := pending(p.PID)
	// The program runs as the bootstrap key, which never decides its own
	// calls: an approver key (in the shared database) decides through B.
	if st, _ := b.withKey(reviewer(a).key).do("POST", "/approvals/"+apr.ID+"/approve", nil, nil); st != 200 {
		t.Fatalf("approve through B: %d", st)
	}
	var w proc
	b.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=5000", p.PID), nil, &w)
	if w.exit() != "success" || !strings.Contains(w.Stdout, "doggie") {
		t.Fatalf("approved through B, the call on A did not go on: %+v", w)
	}

	a.do("POST", "/processes", call, &p)
	apr = pending(p.PID)
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	b.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=%d", p.PID, (3*ttl).Milliseconds()), nil, &w)
	if w.reason() != "host_lost" {
		t.Fatalf("suspended on the dead host: %+v", w)
	}
	var got approvalView
	if b.do("GET", "/approvals/"+apr.ID, nil, &got); got.State != "expired" {
		t.Fatalf("the dead host's approval: %+v", got)
	}
}

// TestScaleOutDrain: a host told to stop (SIGTERM) lets what it runs finish
// within half its shutdown time instead of ending it, and gives its lease
// up; the result is read through another host.
func TestScaleOutDrain(t *testing.T) {
	t.Parallel()
	hs := startCluster(t, 2)
	a, b := hs[0], hs[1]
	var p proc
	a.do("POST", "/processes", map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(2)\nprint('done')"}, &p)
	a.waitFor(p.PID, func(p proc) bool { return strings.Contains(p.Stdout, "started") })
	a.stop()
	var w proc
	b.do("GET", fmt.Sprintf("/processes/%d", p.PID), nil, &w)
	if w.exit() != "success" || w.Stdout != "started\ndone\n" {
		t.Fatalf("running on a draining host: %+v", w)
	}
}
