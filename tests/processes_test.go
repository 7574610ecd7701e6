package tests

import (
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/sqliteshim"
)

func TestRunPrintAndOutput(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	p := h.run("print('hi')\ncyrnel.output({'a': 1, 'b': 1})\ncyrnel.output({'b': 2, 'c': [1, 2]})", map[string]any{"ref": "demo"})
	if p.exit() != "success" || p.reason() != "completed" || p.Stdout != "hi\n" || p.Stderr != "" {
		t.Fatalf("got %+v", p)
	}
	if p.Output["a"] != 1.0 || p.Output["b"] != 2.0 || len(p.Output) != 3 {
		t.Fatalf("output not merged: %v", p.Output)
	}
	if p.TimeoutMs != 30000 || p.StartedAt == nil || p.FinishedAt == nil || p.DurationMs == nil || p.Ref != "demo" {
		t.Fatalf("timing/defaults missing: %+v", p)
	}
	var out map[string]any
	h.do("GET", fmt.Sprintf("/processes/%d/output", p.PID), nil, &out)
	if len(out) != 3 || out["b"] != 2.0 {
		t.Fatalf("output endpoint: %v", out)
	}
	var text string
	_, hdr := h.do("GET", fmt.Sprintf("/processes/%d/stdout", p.PID), nil, &text)
	if text != "hi\n" || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("stdout endpoint: %q %v", text, hdr)
	}
	h.do("GET", fmt.Sprintf("/processes/%d/code", p.PID), nil, &text)
	if !strings.HasPrefix(text, "print('hi')") {
		t.Fatalf("code endpoint: %q", text)
	}
}

func TestFailures(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	p := h.run("x = 1\nraise ValueError('boom')", nil)
	if p.exit() != "failed" || p.reason() != "exception" || p.Error != "ValueError: boom" ||
		!strings.Contains(p.Stderr, "Traceback") || !strings.Contains(p.Stderr, "line 2") {
		t.Fatalf("exception: %+v", p)
	}
	p = h.run("def f(:\n  pass", nil)
	if p.exit() != "failed" || !strings.HasPrefix(p.Error, "SyntaxError: ") || !strings.Contains(p.Stderr, "SyntaxError") {
		t.Fatalf("syntax error: %+v", p)
	}
	p = h.run("cyrnel.output({'x': object()})", nil)
	if p.exit() != "failed" || !strings.HasPrefix(p.Error, "TypeError: ") {
		t.Fatalf("non-JSON output: %+v", p)
	}
	p = h.run("import sys\nsys.exit(3)", nil)
	if p.exit() != "failed" || p.Error != "SystemExit: 3" {
		t.Fatalf("sys.exit(3): %+v", p)
	}
	p = h.run("import sys\nprint('bye')\nsys.exit(0)", nil)
	if p.exit() != "success" || p.Stdout != "bye\n" {
		t.Fatalf("sys.exit(0): %+v", p)
	}
	p = h.run("import os\nos._exit(7)", nil)
	if p.exit() != "failed" || p.reason() != "environment_error" || !strings.Contains(p.Error, "exit status 7") {
		t.Fatalf("os._exit: %+v", p)
	}
}

func TestTopLevelAwait(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	p := h.run("import asyncio\nasync def f(x):\n    await asyncio.sleep(0.01)\n    return x * 2\nr = await asyncio.gather(f(1), f(2))\nprint(r)", nil)
	if p.exit() != "success" || p.Stdout != "[2, 4]\n" {
		t.Fatalf("got %+v", p)
	}
}

func TestTimeoutIsTimeout(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	p := h.run("print('looping', flush=True)\nwhile True: pass", map[string]any{"timeoutMs": 300})
	if p.exit() != "timeout" || p.reason() != "timeout" || p.Stdout != "looping\n" || p.TimeoutMs != 300 {
		t.Fatalf("got %+v", p)
	}
	// The next program runs normally.
	if p = h.run("print(1)", nil); p.exit() != "success" {
		t.Fatalf("after timeout: %+v", p)
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	var p proc
	h.do("POST", "/processes", map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(60)"}, &p)
	h.waitFor(p.PID, func(p proc) bool { return p.Stdout == "started\n" })
	var k proc
	if st, _ := h.do("POST", fmt.Sprintf("/processes/%d/kill", p.PID), nil, &k); st != http.StatusOK || (k.State != "terminating" && k.State != "idle") {
		t.Fatalf("kill: %d %+v", st, k)
	}
	h.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=10000", p.PID), nil, &p)
	if p.State != "idle" || p.exit() != "canceled" || p.reason() != "killed" || p.Stdout != "started\n" {
		t.Fatalf("after kill: %+v", p)
	}
	var prob problem
	if st, _ := h.do("POST", fmt.Sprintf("/processes/%d/kill", p.PID), nil, &prob); st != http.StatusConflict || prob.Status != 409 {
		t.Fatalf("kill idle: %d %+v", st, prob)
	}
}

func TestRerunDeleteAndConflicts(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	var p proc
	h.do("POST", "/processes", map[string]any{"code": "print('once')", "autorun": false}, &p)
	if p.State != "idle" || p.ExitState != nil || p.Runs != 0 {
		t.Fatalf("autorun false: %+v", p)
	}
	h.do("POST", fmt.Sprintf("/processes/%d/run", p.PID), nil, &p)
	h.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=10000", p.PID), nil, &p)
	if p.exit() != "success" || p.Runs != 1 {
		t.Fatalf("first run: %+v", p)
	}
	var prob problem
	if st, _ := h.do("POST", fmt.Sprintf("/processes/%d/run", p.PID), map[string]any{}, &prob); st != http.StatusConflict {
		t.Fatalf("re-run without force: %d %+v", st, prob)
	}
	h.do("POST", fmt.Sprintf("/processes/%d/run", p.PID), map[string]any{"force": true}, &p)
	h.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=10000", p.PID), nil, &p)
	if p.exit() != "success" || p.Runs != 2 || p.Stdout != "once\n" {
		t.Fatalf("forced re-run: %+v", p)
	}
	// Delete: 409 while running, 204 when idle, 404 after.
	var r proc
	h.do("POST", "/processes", map[string]any{"code": "import time\ntime.sleep(60)"}, &r)
	if st, _ := h.do("DELETE", fmt.Sprintf("/processes/%d", r.PID), nil, &prob); st != http.StatusConflict {
		t.Fatalf("delete running: %d", st)
	}
	h.do("POST", fmt.Sprintf("/processes/%d/kill", r.PID), nil, nil)
	if st, _ := h.do("DELETE", fmt.Sprintf("/processes/%d", p.PID), nil, nil); st != http.StatusNoContent {
		t.Fatalf("delete idle: %d", st)
	}
	if st, _ := h.do("GET", fmt.Sprintf("/processes/%d", p.PID), nil, &prob); st != http.StatusNotFound {
		t.Fatalf("get deleted: %d", st)
	}
	// Pids are never reused.
	var n proc
	h.do("POST", "/processes", map[string]any{"code": "pass", "autorun": false}, &n)
	if n.PID <= r.PID {
		t.Fatalf("pid reused or not increasing: %d after %d", n.PID, r.PID)
	}
}

func TestConcurrentPrograms(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	var wg sync.WaitGroup
	results := make([]proc, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = h.run(fmt.Sprintf("import time\ntime.sleep(0.2)\nprint(%d)\ncyrnel.output({'i': %d})", i, i), nil)
		}()
	}
	wg.Wait()
	for i, p := range results {
		if p.exit() != "success" || p.Stdout != fmt.Sprintf("%d\n", i) || p.Output["i"] != float64(i) {
			t.Fatalf("program %d: %+v", i, p)
		}
	}
}

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	for i := range 5 {
		code := "pass"
		if i%2 == 1 {
			code = "1/0"
		}
		h.run(code, map[string]any{"ref": "batch"})
	}
	h.run("pass", map[string]any{"ref": "other"})
	var page struct {
		Items      []proc  `json:"items"`
		NextCursor *string `json:"nextCursor"`
		HasMore    bool    `json:"hasMore"`
	}
	h.do("GET", "/processes?ref=batch&limit=2", nil, &page)
	var seen []int64
	for {
		if len(page.Items) == 0 {
			t.Fatal("empty page")
		}
		for _, p := range page.Items {
			if p.Ref != "batch" {
				t.Fatalf("filter leaked %+v", p)
			}
			if len(seen) > 0 && p.PID >= seen[len(seen)-1] {
				t.Fatalf("not newest first: %v then %d", seen, p.PID)
			}
			seen = append(seen, p.PID)
		}
		if !page.HasMore {
			break
		}
		cursor := *page.NextCursor
		page.Items, page.NextCursor = nil, nil
		h.do("GET", "/processes?ref=batch&limit=2&cursor="+cursor, nil, &page)
	}
	if len(seen) != 5 {
		t.Fatalf("paged %d processes, want 5", len(seen))
	}
	h.do("GET", "/processes?exitState=failed&ref=batch", nil, &page)
	if len(page.Items) != 2 {
		t.Fatalf("exitState filter: %d items", len(page.Items))
	}
	var prob problem
	if st, _ := h.do("GET", "/processes?cursor=garbage", nil, &prob); st != http.StatusUnprocessableEntity || prob.Errors[0].Location != "query.cursor" {
		t.Fatalf("bad cursor: %d %+v", st, prob)
	}
}

func TestProblems(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	cases := []struct {
		method, path string
		body         any
		status       int
		location     string
	}{
		{"GET", "/nope", nil, 404, ""},
		{"DELETE", "/health", nil, 405, ""},
		{"GET", "/processes/999999", nil, 404, ""},
		{"GET", "/processes/abc", nil, 422, "path.pid"},
		{"POST", "/processes", map[string]any{"cod": "x"}, 422, "body.cod"},
		{"POST", "/processes", map[string]any{"code": ""}, 422, "body.code"},
		{"POST", "/processes", map[string]any{"code": "x", "timeoutMs": -5}, 422, "body.timeoutMs"},
		{"POST", "/processes", map[string]any{"code": "x", "waitMs": 10000000}, 422, "body.waitMs"},
		{"POST", "/processes", map[string]any{"code": strings.Repeat("#", 300<<10)}, 422, "body.code"},
		{"GET", "/processes?state=bogus", nil, 422, "query.state"},
		{"GET", "/processes?limit=1000", nil, 422, "query.limit"},
		{"GET", "/processes?nope=1", nil, 422, "query.nope"},
		{"GET", "/modules/nope", nil, 404, ""},
		{"PUT", "/environment", map[string]any{"module": "nope"}, 422, "body.module"},
	}
	for _, c := range cases {
		var prob problem
		st, hdr := h.do(c.method, c.path, c.body, &prob)
		if st != c.status || prob.Status != c.status || hdr.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: status %d (%+v), content type %q; want %d problem+json", c.method, c.path, st, prob, hdr.Get("Content-Type"), c.status)
			continue
		}
		if c.location != "" {
			found := false
			for _, e := range prob.Errors {
				found = found || e.Location == c.location
			}
			if !found {
				t.Errorf("%s %s: no error at %s in %+v", c.method, c.path, c.location, prob)
			}
		}
	}
	// A malformed body is a 4xx too.
	var prob problem
	req, _ := http.NewRequest("POST", h.base+"/processes", strings.NewReader("{not json"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 || resp.StatusCode >= 500 || resp.StatusCode == http.StatusUnauthorized {
		t.Fatalf("malformed JSON: %d %+v", resp.StatusCode, prob)
	}
}

func TestSplitUTF8AndOutputCap(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	// A euro sign written one byte per flush arrives split across chunks.
	p := h.run("import sys, time\nfor b in '€'.encode():\n    sys.stdout.buffer.write(bytes([b])); sys.stdout.buffer.flush(); time.sleep(0.02)\nprint()", nil)
	if p.exit() != "success" || p.Stdout != "€\n" {
		t.Fatalf("split character: %q %+v", p.Stdout, p)
	}
	p = h.run("import sys\nwhile True: sys.stdout.write('x' * 65536)", nil)
	if p.exit() != "failed" || p.reason() != "output_limit" || !p.StdoutTruncated || len(p.Stdout) != 1<<20 {
		t.Fatalf("output cap: exit %s reason %s truncated %v len %d", p.exit(), p.reason(), p.StdoutTruncated, len(p.Stdout))
	}
	if p = h.run("print('next')", nil); p.exit() != "success" {
		t.Fatalf("after output cap: %+v", p)
	}
}

// TestAnOutputPastTheLimitEndsTheExecution: an output message larger than
// the output limit (1 MiB) and the protocol's envelope is refused before
// the host decodes it (docs/protocol.md): the execution ends output_limit
// saying so, keeping what it output before.
func TestAnOutputPastTheLimitEndsTheExecution(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	p := h.run("cyrnel.output({'small': 1})\ncyrnel.output({'big': 'x' * 1200000})\nprint('done')", nil)
	if p.exit() != "failed" || p.reason() != "output_limit" || p.Output["small"] != 1.0 || p.Output["big"] != nil ||
		!strings.Contains(p.Error, "exceeded") || !strings.Contains(p.Error, "output limit of 1048576 bytes") {
		t.Fatalf("exit %s reason %s error %q output keys %d", p.exit(), p.reason(), p.Error, len(p.Output))
	}
	if p = h.run("cyrnel.output({'big': 'x' * 1000000})", nil); p.exit() != "success" || len(p.Output["big"].(string)) != 1000000 {
		t.Fatalf("control: an output within the limit: exit %s reason %s", p.exit(), p.reason())
	}
}

func TestRestartAfterSIGKILLFinishesOrphans(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, dir)
	var p proc
	h.do("POST", "/processes", map[string]any{"code": "import time\nprint('up', flush=True)\ntime.sleep(60)"}, &p)
	h.waitFor(p.PID, func(p proc) bool { return p.State == "running" && p.Stdout == "up\n" })
	// What it printed reaches its row within the flush interval (a second),
	// read from the database itself as a host that restarts would.
	db, err := sql.Open(sqliteshim.ShimName, "file:"+filepath.Join(dir, "cyrnel.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var stdout string
		if err := db.QueryRow("SELECT stdout FROM processes WHERE pid = ?", p.PID).Scan(&stdout); err != nil {
			t.Fatal(err)
		}
		if stdout == "up\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stdout of a running process not stored within 10s: %q", stdout)
		}
		time.Sleep(10 * time.Millisecond) // polls the file: nothing to wait on
	}
	h.cmd.Process.Signal(syscall.SIGKILL)
	<-h.exited
	h2 := start(t, dir)
	h2.do("GET", fmt.Sprintf("/processes/%d", p.PID), nil, &p)
	if p.State != "idle" || p.exit() != "failed" || p.reason() != "host_restart" || p.Stdout != "up\n" {
		t.Fatalf("after restart: %+v", p)
	}
	if q := h2.run("print('again')", nil); q.exit() != "success" {
		t.Fatalf("after restart: %+v", q)
	}
}

// TestAFullDiskAnswers507AndDeleteFreesRoom: with the database out of room
// (SQLite's max_page_count fails writes as a full disk does), a create
// answers 507 saying the disk is full and stores nothing; deleting
// processes makes room again.
func TestAFullDiskAnswers507AndDeleteFreesRoom(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir) // migrates the database at full size
	h.cmd.Process.Signal(syscall.SIGTERM)
	<-h.exited
	// Room for a few of the processes below beyond what the schema holds.
	fi, err := os.Stat(filepath.Join(dir, "cyrnel.db"))
	if err != nil {
		t.Fatal(err)
	}
	pages := fi.Size()/4096 + 200
	h = start(t, dir, fmt.Sprintf("CYRNEL_DB_URL=sqlite://%s?_pragma=max_page_count(%d)", filepath.Join(dir, "cyrnel.db"), pages))
	code := "# " + strings.Repeat("x", 200<<10)
	var pids []int64
	var prob problem
	for {
		var p proc
		st, _ := h.do("POST", "/processes", map[string]any{"code": code, "autorun": false}, &p)
		if st == http.StatusInsufficientStorage {
			h.do("POST", "/processes", map[string]any{"code": code, "autorun": false}, &prob)
			break
		}
		if st != http.StatusCreated || len(pids) > 100 {
			t.Fatalf("create %d: status %d", len(pids), st)
		}
		pids = append(pids, p.PID)
	}
	if prob.Status != http.StatusInsufficientStorage || !strings.Contains(prob.Detail, "disk is full") {
		t.Fatalf("problem %+v", prob)
	}
	var list struct {
		Items []proc `json:"items"`
	}
	if h.do("GET", "/processes?limit=100", nil, &list); len(list.Items) != len(pids) {
		t.Fatalf("%d processes stored, %d created", len(list.Items), len(pids))
	}
	for _, pid := range pids[:2] {
		if st, _ := h.do("DELETE", fmt.Sprintf("/processes/%d", pid), nil, nil); st != http.StatusNoContent {
			t.Fatalf("delete on a full disk: %d", st)
		}
	}
	if p := h.run("print('room again')", nil); p.exit() != "success" || p.Stdout != "room again\n" {
		t.Fatalf("after deletes: %+v", p)
	}
}

func TestSIGTERMCancelsRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, dir)
	var p proc
	h.do("POST", "/processes", map[string]any{"code": "import time\nprint('up', flush=True)\ntime.sleep(60)"}, &p)
	h.waitFor(p.PID, func(p proc) bool { return p.Stdout == "up\n" })
	began := time.Now()
	h.cmd.Process.Signal(syscall.SIGTERM)
	<-h.exited
	if code := h.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM:\n%s", code, h.logs)
	}
	t.Logf("shutdown took %v", time.Since(began))
	h2 := start(t, dir)
	h2.do("GET", fmt.Sprintf("/processes/%d", p.PID), nil, &p)
	if p.State != "idle" || p.exit() != "canceled" || p.reason() != "host_shutdown" || p.Stdout != "up\n" {
		t.Fatalf("after SIGTERM: %+v", p)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	h := start(t, "", "CYRNEL_API_KEY=k3y")
	for _, open := range []string{"/health", "/openapi.json", "/openapi.yaml", "/openapi-3.0.json"} {
		resp, err := http.Get(h.base + open)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s without key: %d", open, resp.StatusCode)
		}
	}
	for _, auth := range []string{"", "Bearer nope", "k3y", "Bearer k3y2"} {
		req, _ := http.NewRequest("GET", h.base+"/processes", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("auth %q: %d", auth, resp.StatusCode)
		}
	}
	if st, _ := h.do("GET", "/processes", nil, nil); st != 200 {
		t.Fatalf("with key: %d", st)
	}
}

func TestRefusesNonLoopbackWithoutKey(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "serve", "--addr", "0.0.0.0:0", "--data-dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refusing to listen") {
		t.Fatalf("want refusal, got %v: %s", err, out)
	}
}

func TestEnvironmentAndModules(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	var env struct {
		Active *struct {
			Module string         `json:"module"`
			Status map[string]any `json:"status"`
		} `json:"active"`
		Draining []any `json:"draining"`
	}
	h.do("GET", "/environment", nil, &env)
	if env.Active == nil || env.Active.Module != "python" || env.Active.Status["pool"] == nil {
		t.Fatalf("environment: %+v", env)
	}
	var docs string
	_, hdr := h.do("GET", "/environment/docs", nil, &docs)
	if !strings.Contains(docs, "cyrnel.output") || !strings.HasPrefix(hdr.Get("Content-Type"), "text/markdown") {
		t.Fatalf("docs: %s", docs)
	}
	var mods struct {
		Items []struct {
			ID     string `json:"id"`
			Type   string `json:"type"`
			Active bool   `json:"active"`
		} `json:"items"`
	}
	h.do("GET", "/modules", nil, &mods)
	found := false
	for _, m := range mods.Items {
		if m.ID == "python" {
			found = m.Active && m.Type == "environment"
		}
	}
	if !found {
		t.Fatalf("modules: %+v", mods)
	}
	var health struct {
		Status      string  `json:"status"`
		Environment *string `json:"environment"`
	}
	h.do("GET", "/health", nil, &health)
	if health.Status != "ok" || health.Environment == nil || *health.Environment != "python" {
		t.Fatalf("health: %+v", health)
	}
}
