package tests

import (
	"errors"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

var gomaxprocs = regexp.MustCompile(`(?m)^go_sched_gomaxprocs_threads (\d+)$`)

// procsOf reads the host's GOMAXPROCS from its metrics.
func procsOf(t *testing.T, h *host) string {
	t.Helper()
	st, body := scrape(t, h.base+"/metrics", h.key)
	m := gomaxprocs.FindStringSubmatch(body)
	if st != 200 || m == nil {
		t.Fatalf("GET /metrics: %d, no go_sched_gomaxprocs_threads", st)
	}
	return m[1]
}

// TestIdleHostRunsOnOneP: cyrnel serve sets its own GOMAXPROCS from its
// load (host/maxprocs): an idle host's Go code runs on one P; an
// operator's GOMAXPROCS is left as it is.
func TestIdleHostRunsOnOneP(t *testing.T) {
	t.Parallel()
	t.Run("adapted", func(t *testing.T) {
		t.Parallel()
		h := start(t, "")
		// A second of quiet after start-up, which may itself keep it busy.
		eventuallyWithin(t, 30*time.Second, "GOMAXPROCS 1 on an idle host", func() bool { return procsOf(t, h) == "1" })
	})
	t.Run("operator's", func(t *testing.T) {
		t.Parallel()
		h := start(t, "", "GOMAXPROCS=3")
		if !strings.Contains(h.logs.String(), `msg="GOMAXPROCS left as it is" component=maxprocs procs=3`) {
			t.Fatalf("no word of the operator's GOMAXPROCS in the log:\n%s", h.logs)
		}
		if p := procsOf(t, h); p != "3" {
			t.Errorf("GOMAXPROCS %s, want the operator's 3", p)
		}
	})
}

// TestIdleHostPinsWithItsTypeScriptWorker: on one P, a host whose active
// environment is TypeScript runs on one CPU with its worker
// (envs/affinity), except while an execution computes for long; with
// Python active nothing is pinned, the forking template and its programs
// included (started off the pin).
func TestIdleHostPinsWithItsTypeScriptWorker(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	server := h.cmd.Process.Pid
	all := cpusOf(t, os.Getpid()) // the server's CPUs before any pin: the test's
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "typescript"}, nil); st != 200 {
		t.Fatalf("switch to typescript: %d", st)
	}
	if p := h.run("1+1", nil); p.exit() != "success" {
		t.Fatalf("%+v", p)
	}
	workers := descendants(t, server, "__cyrnel_worker_typescript")
	if len(workers) == 0 {
		t.Fatal("no TypeScript worker among the host's processes")
	}
	eventuallyWithin(t, 30*time.Second, "GOMAXPROCS 1 on an idle host", func() bool { return procsOf(t, h) == "1" })
	if runtime.NumCPU() < 2 {
		if c := cpusOf(t, server); c != all {
			t.Errorf("one CPU (%s): the server's threads on %q", all, c)
		}
		return
	}
	onOne := func() bool { // the server and its live workers on one and the same CPU
		c := cpusOf(t, server)
		if strings.ContainsAny(c, "-,") || c == "mixed" || c == "" {
			return false
		}
		for _, w := range workers {
			if wc := cpusOf(t, w); wc != c && wc != "" {
				return false
			}
		}
		return true
	}
	eventuallyWithin(t, 30*time.Second, "the server and its TypeScript worker on one CPU", onOne)

	// An execution that computes for long releases the pin until it ends.
	var busy proc
	if st, _ := h.do("POST", "/processes", map[string]any{"code": "const t0 = Date.now(); while (Date.now() - t0 < 3000) {}"}, &busy); st != 201 {
		t.Fatalf("create a long execution: %d", st)
	}
	eventuallyWithin(t, 30*time.Second, "the server back on "+all+" while an execution computes", func() bool { return cpusOf(t, server) == all })
	if p := h.waitFor(busy.PID, func(p proc) bool { return p.State == "idle" }); p.exit() != "success" {
		t.Fatalf("the long execution: %+v", p)
	}
	eventuallyWithin(t, 30*time.Second, "pinned again once it ended", onOne)

	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "python"}, nil); st != 200 {
		t.Fatalf("switch to python: %d", st)
	}
	if p := h.run("pass", nil); p.exit() != "success" {
		t.Fatalf("%+v", p)
	}
	// The TypeScript workers end with their environment: nothing follows.
	eventuallyWithin(t, 30*time.Second, "no TypeScript worker left and the server back on "+all, func() bool {
		return len(descendants(t, server, "__cyrnel_worker_typescript")) == 0 && cpusOf(t, server) == all
	})
	for _, pid := range descendants(t, server, "") {
		if c := cpusOf(t, pid); c != all && c != "" {
			t.Errorf("with Python active, process %d on %q, not %s", pid, c, all)
		}
	}
}

// cpusOf is the CPUs every thread of pid may run on, as the kernel lists
// them ("1", "0-1"), "mixed" when its threads differ, "" when it ended.
func cpusOf(t *testing.T, pid int) string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if errors.Is(err, os.ErrNotExist) {
		return "" // it ended
	}
	if err != nil {
		t.Fatal(err)
	}
	seen := ""
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/status")
		if err != nil {
			continue // a thread that ended
		}
		_, rest, _ := strings.Cut(string(b), "Cpus_allowed_list:")
		list, _, _ := strings.Cut(strings.TrimSpace(rest), "\n")
		if seen != "" && list != seen {
			return "mixed"
		}
		seen = list
	}
	return seen
}

// descendants are the descendants of pid whose command line holds arg
// (every one for "").
func descendants(t *testing.T, pid int, arg string) []int {
	t.Helper()
	procs, err := procfs.AllProcs()
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil {
			parent[p.PID] = st.PPID
		}
	}
	var found []int
	for _, p := range procs {
		if line, err := p.CmdLine(); err != nil || (arg != "" && !slices.Contains(line, arg)) {
			continue
		}
		for a := parent[p.PID]; a > 1; a = parent[a] {
			if a == pid {
				found = append(found, p.PID)
				break
			}
		}
	}
	return found
}
