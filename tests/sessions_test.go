package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// dataSciencePython is Debian's interpreter with numpy, pandas and
// matplotlib (make test installs them). Without them the data-science
// tests fail unless CYRNEL_TEST_NO_DATASCIENCE names why they cannot run.
func dataSciencePython(t testing.TB) string {
	t.Helper()
	const py = "/usr/bin/python3"
	out, err := exec.Command(py, "-c", "import numpy, pandas, matplotlib").CombinedOutput()
	if err != nil {
		if why := os.Getenv("CYRNEL_TEST_NO_DATASCIENCE"); why != "" {
			t.Skipf("no data-science interpreter (CYRNEL_TEST_NO_DATASCIENCE: %s)", why)
		}
		t.Fatalf("%s cannot import numpy, pandas and matplotlib (%v: %s): apt-get install python3-numpy python3-pandas python3-matplotlib, or set CYRNEL_TEST_NO_DATASCIENCE=<why>", py, err, out)
	}
	return py
}

// raw sends a request with a raw body and returns the status and the body.
func (h *host) raw(method, path, contentType string, body []byte) (int, http.Header, []byte) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, h.base+path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+h.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

type sessionView struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	EndReason string `json:"endReason"`
}

type displayView struct {
	Index int               `json:"index"`
	Kind  string            `json:"kind"`
	Data  map[string]string `json:"data"`
}

func (h *host) newSession(body map[string]any) sessionView {
	h.t.Helper()
	var s sessionView
	if st, _ := h.do("POST", "/sessions", body, &s); st != http.StatusCreated || s.State != "ready" || !strings.HasPrefix(s.ID, "ses_") {
		h.t.Fatalf("create session: %d %+v", st, s)
	}
	return s
}

func (h *host) displays(pid int64) []displayView {
	h.t.Helper()
	var out struct {
		Items []displayView `json:"items"`
	}
	if st, _ := h.do("GET", fmt.Sprintf("/processes/%d/displays", pid), nil, &out); st != http.StatusOK {
		h.t.Fatalf("displays of %d: %d", pid, st)
	}
	return out.Items
}

// sseDisplays follows a process's events to its end and returns the display
// events it saw.
func (h *host) sseDisplays(pid int64) []displayView {
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
	var out []displayView
	event := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			event = e
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && event == "display" {
			var dv displayView
			if err := json.Unmarshal([]byte(d), &dv); err != nil {
				h.t.Fatalf("display event: %v", err)
			}
			out = append(out, dv)
		}
	}
	return out
}

// TestDataScienceSession is an agent's session end to end: pandas
// preloaded on Debian's interpreter, a CSV in, state kept between
// executions, an HTML table and a PNG back (live too), a CSV out, a kill
// that keeps the session, a memory bomb that ends it.
func TestDataScienceSession(t *testing.T) {
	t.Parallel()
	py := dataSciencePython(t)
	h := start(t, "", "CYRNEL_PYTHON="+py)
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"preload": []string{"asyncio", "pandas"}}, nil); st != http.StatusOK {
		t.Fatalf("preload pandas: %d", st)
	}
	s := h.newSession(map[string]any{})
	in := session(s.ID)

	csv := "city,sales\nParis,3\nLyon,4\nParis,5\n"
	if st, _, b := h.raw("PUT", "/sessions/"+s.ID+"/files/data%2Fsales.csv", "text/csv", []byte(csv)); st != http.StatusNoContent {
		t.Fatalf("upload: %d %s", st, b)
	}
	var files struct {
		Items []struct {
			Path string `json:"path"`
			Size int64  `json:"size"`
		} `json:"items"`
	}
	h.do("GET", "/sessions/"+s.ID+"/files", nil, &files)
	if len(files.Items) != 1 || files.Items[0].Path != "data/sales.csv" || files.Items[0].Size != int64(len(csv)) {
		t.Fatalf("files: %+v", files.Items)
	}

	p := h.run("import pandas as pd\ndf = pd.read_csv('data/sales.csv')\nprint(len(df))", in)
	if p.exit() != "success" || p.Stdout != "3\n" {
		t.Fatalf("execution 1: %s %q %s", p.exit(), p.Stdout, p.Stderr)
	}
	p = h.run("totals = df.groupby('city').sum()\ntotals", in)
	if p.exit() != "success" {
		t.Fatalf("execution 2: %s %s", p.exit(), p.Stderr)
	}
	ds := h.displays(p.PID)
	if len(ds) != 1 || ds[0].Kind != "result" || !strings.Contains(ds[0].Data["text/html"], "<table") || !strings.Contains(ds[0].Data["text/plain"], "Paris") {
		t.Fatalf("execution 2 displays: %+v", ds)
	}

	var created proc
	h.do("POST", "/processes", map[string]any{"session": s.ID, "code": "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n" +
		"totals.plot.bar(ax=ax)\ncyrnel.display(fig)\nplt.close(fig)\ntotals.to_csv('result.csv')"}, &created)
	live := h.sseDisplays(created.PID)
	p = h.waitFor(created.PID, func(p proc) bool { return p.State == "idle" })
	if p.exit() != "success" {
		t.Fatalf("execution 3: %s %s", p.exit(), p.Stderr)
	}
	for what, ds := range map[string][]displayView{"stored": h.displays(p.PID), "streamed": live} {
		if len(ds) != 1 || ds[0].Kind != "display" {
			t.Fatalf("execution 3 %s displays: %+v", what, ds)
		}
		img, err := base64.StdEncoding.DecodeString(ds[0].Data["image/png"])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(bytes.NewReader(img)); err != nil {
			t.Fatalf("execution 3 %s display is not a PNG: %v", what, err)
		}
	}
	st, hdr, b := h.raw("GET", "/sessions/"+s.ID+"/files/result.csv", "", nil)
	if st != http.StatusOK || string(b) != "city,sales\nLyon,4\nParis,8\n" || hdr.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("result.csv: %d %s %q", st, hdr.Get("Content-Type"), b)
	}

	// A kill interrupts the program; the session and its state stay.
	h.do("POST", "/processes", map[string]any{"session": s.ID, "code": "import time\nwhile True:\n    time.sleep(0.01)"}, &created)
	h.waitFor(created.PID, func(p proc) bool { return p.State == "running" })
	h.do("POST", fmt.Sprintf("/processes/%d/kill", created.PID), nil, nil)
	p = h.waitFor(created.PID, func(p proc) bool { return p.State == "idle" })
	if p.exit() != "canceled" || p.reason() != "killed" {
		t.Fatalf("killed loop: %s %s", p.exit(), p.reason())
	}
	if p = h.run("print(df.shape)", in); p.exit() != "success" || p.Stdout != "(3, 2)\n" {
		t.Fatalf("after the kill: %s %q %s", p.exit(), p.Stdout, p.Stderr)
	}

	// A memory bomb ends the session; the next execution is refused.
	p = h.run("b = []\nwhile True:\n    b.append(bytearray(1 << 24))", in)
	if p.reason() != "memory_limit" {
		t.Fatalf("memory bomb: %s %s %s", p.exit(), p.reason(), p.Error)
	}
	var ended sessionView
	h.do("GET", "/sessions/"+s.ID, nil, &ended)
	if ended.State != "ended" || ended.EndReason != "memory_limit" {
		t.Fatalf("session after the bomb: %+v", ended)
	}
	var prob problem
	if st, _ := h.do("POST", "/processes", map[string]any{"session": s.ID, "code": "1"}, &prob); st != http.StatusConflict || !strings.Contains(prob.Detail, "ended (memory_limit)") {
		t.Fatalf("execution in an ended session: %d %+v", st, prob)
	}
}

func session(id string) map[string]any { return map[string]any{"session": id} }

// TestSessionLifecycle: state persists, an unused session ends at its idle
// timeout, DELETE ends one, unknown sessions are refused, TypeScript has
// none, and workspace paths cannot leave the workspace from the routes or
// from inside a program.
func TestSessionLifecycle(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	s := h.newSession(map[string]any{"ref": "lifecycle"})
	if p := h.run("x = 41", session(s.ID)); p.exit() != "success" {
		t.Fatalf("x = 41: %s %s", p.exit(), p.Stderr)
	}
	p := h.run("x + 1", session(s.ID))
	if ds := h.displays(p.PID); p.exit() != "success" || len(ds) != 1 || ds[0].Data["text/plain"] != "42" {
		t.Fatalf("x + 1: %s %+v", p.exit(), ds)
	}
	// A one-shot process does not see the session's globals.
	if p := h.run("x", nil); p.exit() != "failed" || !strings.Contains(p.Error, "NameError") {
		t.Fatalf("one-shot x: %s %s", p.exit(), p.Error)
	}

	// Traversal through the routes: 422 naming the path.
	for _, bad := range []string{"..%2Fescape", "a%2F..%2F..%2Fescape", "%2Fetc%2Fpasswd", "a%2F%2Fb"} {
		var prob problem
		st, _, b := h.raw("PUT", "/sessions/"+s.ID+"/files/"+bad, "application/octet-stream", []byte("x"))
		if json.Unmarshal(b, &prob); st != http.StatusUnprocessableEntity || len(prob.Errors) == 0 || prob.Errors[0].Location != "path.path" {
			t.Fatalf("PUT %s: %d %s", bad, st, b)
		}
		if st, _, b := h.raw("GET", "/sessions/"+s.ID+"/files/"+bad, "", nil); st != http.StatusUnprocessableEntity {
			t.Fatalf("GET %s: %d %s", bad, st, b)
		}
	}
	// From inside: a symlink the program points outside the workspace is
	// not followed by the routes. The control: the same program's own
	// file is served.
	if p := h.run("import os\nos.symlink('/etc/passwd', 'link')\nos.symlink('..', 'up')\nopen('own.txt', 'w').write('mine')\nopen('../outside.txt', 'w').write('x')", session(s.ID)); p.exit() != "success" {
		t.Fatalf("symlinks: %s %s", p.exit(), p.Stderr)
	}
	if st, _, b := h.raw("GET", "/sessions/"+s.ID+"/files/own.txt", "", nil); st != http.StatusOK || string(b) != "mine" {
		t.Fatalf("own.txt: %d %s", st, b)
	}
	for _, escape := range []string{"link", "up%2Foutside.txt"} {
		if st, _, b := h.raw("GET", "/sessions/"+s.ID+"/files/"+escape, "", nil); st != http.StatusUnprocessableEntity {
			t.Fatalf("GET %s: %d %s", escape, st, b)
		}
		if st, _, b := h.raw("PUT", "/sessions/"+s.ID+"/files/"+escape, "application/octet-stream", []byte("x")); st != http.StatusUnprocessableEntity {
			t.Fatalf("PUT %s: %d %s", escape, st, b)
		}
	}
	if st, _, _ := h.raw("GET", "/sessions/"+s.ID+"/files/missing.txt", "", nil); st != http.StatusNotFound {
		t.Fatalf("missing file: %d", st)
	}

	if st, _ := h.do("DELETE", "/sessions/"+s.ID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("delete: %d", st)
	}
	var got sessionView
	h.do("GET", "/sessions/"+s.ID, nil, &got)
	if got.State != "ended" || got.EndReason != "deleted" {
		t.Fatalf("deleted session: %+v", got)
	}
	if st, _ := h.do("POST", "/processes", map[string]any{"session": s.ID, "code": "1"}, nil); st != http.StatusConflict {
		t.Fatalf("execution in a deleted session: %d", st)
	}
	var prob problem
	if st, _ := h.do("POST", "/processes", map[string]any{"session": "ses_nope", "code": "1"}, &prob); st != http.StatusUnprocessableEntity || prob.Errors[0].Location != "body.session" {
		t.Fatalf("unknown session: %d %+v", st, prob)
	}
	if st, _ := h.do("GET", "/sessions/ses_nope", nil, nil); st != http.StatusNotFound {
		t.Fatalf("GET unknown session: %d", st)
	}

	// The idle timeout ends an unused session.
	idle := h.newSession(map[string]any{"idleTimeoutMs": 300})
	deadline := time.Now().Add(30 * time.Second)
	for got.ID != idle.ID || got.State != "ended" {
		if time.Now().After(deadline) {
			t.Fatalf("idle session not ended: %+v", got)
		}
		h.do("GET", "/sessions/"+idle.ID, nil, &got)
		time.Sleep(50 * time.Millisecond) // polling a state the server changes on its own clock
	}
	if got.EndReason != "idle_timeout" {
		t.Fatalf("idle session: %+v", got)
	}
	var list struct {
		Items []sessionView `json:"items"`
	}
	h.do("GET", "/sessions?state=ended", nil, &list)
	if len(list.Items) != 2 {
		t.Fatalf("ended sessions: %+v", list.Items)
	}
	// Paginated: newest first, one per page.
	var page struct {
		Items      []sessionView `json:"items"`
		NextCursor *string       `json:"nextCursor"`
		HasMore    bool          `json:"hasMore"`
	}
	h.do("GET", "/sessions?limit=1", nil, &page)
	if len(page.Items) != 1 || page.Items[0].ID != idle.ID || !page.HasMore || page.NextCursor == nil {
		t.Fatalf("first page: %+v", page)
	}
	h.do("GET", "/sessions?limit=1&cursor="+*page.NextCursor, nil, &page)
	if len(page.Items) != 1 || page.Items[0].ID != s.ID || page.HasMore || page.NextCursor != nil {
		t.Fatalf("second page: %+v", page)
	}

	// TypeScript has no sessions: 422 naming the module.
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "typescript"}, nil); st != http.StatusOK {
		t.Fatalf("switch to typescript: %d", st)
	}
	if st, _ := h.do("POST", "/sessions", map[string]any{}, &prob); st != http.StatusUnprocessableEntity || prob.Errors[0].Location != "body.module" {
		t.Fatalf("typescript session: %d %+v", st, prob)
	}
}

// TestDataScienceSessionOverMCP: the same agent through MCP: create_session,
// state kept between run_code calls, the DataFrame as text, the figure as
// image content, end_session, then a run in the ended session fails.
func TestDataScienceSessionOverMCP(t *testing.T) {
	t.Parallel()
	py := dataSciencePython(t)
	h := start(t, "", "CYRNEL_PYTHON="+py)
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"preload": []string{"asyncio", "pandas"}}, nil); st != http.StatusOK {
		t.Fatalf("preload pandas: %d", st)
	}
	s := mcpSession(t, h)
	created := structured[struct {
		Session string `json:"session"`
	}](t, call(t, s, "create_session", map[string]any{}))
	if !strings.HasPrefix(created.Session, "ses_") {
		t.Fatalf("create_session: %+v", created)
	}
	r := call(t, s, "run_code", map[string]any{"session": created.Session, "code": "import pandas as pd\ndf = pd.DataFrame({'city': ['Paris', 'Lyon', 'Paris'], 'sales': [3, 4, 5]})"})
	if out := structured[runResult](t, r); out.ExitState != "success" {
		t.Fatalf("run 1: %+v", out)
	}
	r = call(t, s, "run_code", map[string]any{"session": created.Session, "code": "df.groupby('city').sum()"})
	if out := structured[runResult](t, r); out.ExitState != "success" || !strings.Contains(textOf(r), "result: ") || !strings.Contains(textOf(r), "Paris") {
		t.Fatalf("run 2: %+v %q", out, textOf(r))
	}
	r = call(t, s, "run_code", map[string]any{"session": created.Session, "code": "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot(df['sales'])"})
	var images int
	for _, c := range r.Content {
		if img, ok := c.(*mcp.ImageContent); ok {
			if _, err := png.Decode(bytes.NewReader(img.Data)); err != nil || img.MIMEType != "image/png" {
				t.Fatalf("image content %s: %v", img.MIMEType, err)
			}
			images++
		}
	}
	if images != 1 {
		t.Fatalf("run 3: %d images, %q", images, textOf(r))
	}
	call(t, s, "end_session", map[string]any{"session": created.Session})
	r, err := s.CallTool(deadline(t), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"session": created.Session, "code": "1"}})
	if err == nil && !r.IsError {
		t.Fatalf("run in an ended session: %q", textOf(r))
	}
	if err == nil && !strings.Contains(textOf(r), "ended") {
		t.Fatalf("run in an ended session: %q", textOf(r))
	}
}

// TestOneShotFiles: input files land in a fresh workspace, what the program
// leaves there is kept with the process and deleted with it; bad paths are
// 422 naming the field; a one-shot cannot see another's files.
func TestOneShotFiles(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	p := h.run("import os\nrows = open('/workspace/in/data.csv').read().splitlines()\nos.makedirs('out')\n"+
		"open('/workspace/out/count.txt', 'w').write(str(len(rows)))\nprint(sorted(os.listdir('.')))",
		map[string]any{"files": []map[string]any{{"path": "in/data.csv", "content": base64.StdEncoding.EncodeToString([]byte("a\nb\nc\n"))}}})
	if p.exit() != "success" || p.Stdout != "['in', 'out']\n" {
		t.Fatalf("run: %s %q %s", p.exit(), p.Stdout, p.Stderr)
	}
	var files struct {
		Items []struct {
			Path string `json:"path"`
			Size int64  `json:"size"`
		} `json:"items"`
	}
	h.do("GET", fmt.Sprintf("/processes/%d/files", p.PID), nil, &files)
	if len(files.Items) != 2 || files.Items[0].Path != "in/data.csv" || files.Items[1].Path != "out/count.txt" || files.Items[1].Size != 1 {
		t.Fatalf("files: %+v", files.Items)
	}
	st, hdr, b := h.raw("GET", fmt.Sprintf("/processes/%d/files/out%%2Fcount.txt", p.PID), "", nil)
	if st != http.StatusOK || string(b) != "3" || hdr.Get("Content-Type") != "application/octet-stream" || !strings.Contains(hdr.Get("Content-Disposition"), "count.txt") {
		t.Fatalf("count.txt: %d %s %s %q", st, hdr.Get("Content-Type"), hdr.Get("Content-Disposition"), b)
	}
	// A fresh workspace each time: the next program sees nothing.
	if q := h.run("import os\nprint(os.listdir('.'))", nil); q.Stdout != "[]\n" {
		t.Fatalf("fresh workspace: %q %s", q.Stdout, q.Stderr)
	}
	for i, bad := range []string{"../x", "/etc/passwd", "a//b", "."} {
		var prob problem
		st, _ := h.do("POST", "/processes", map[string]any{"code": "1", "files": []map[string]any{{"path": "ok.txt", "content": "eA=="}, {"path": bad, "content": "eA=="}}}, &prob)
		if st != http.StatusUnprocessableEntity || len(prob.Errors) == 0 || prob.Errors[0].Location != "body.files[1].path" {
			t.Fatalf("%d %q: %d %+v", i, bad, st, prob)
		}
	}
	if st, _, _ := h.raw("GET", fmt.Sprintf("/processes/%d/files/..%%2Fx", p.PID), "", nil); st != http.StatusUnprocessableEntity {
		t.Fatalf("GET ../x: %d", st)
	}
	if st, _ := h.do("DELETE", fmt.Sprintf("/processes/%d", p.PID), nil, nil); st != http.StatusNoContent {
		t.Fatalf("delete: %d", st)
	}
	if st, _, _ := h.raw("GET", fmt.Sprintf("/processes/%d/files/out%%2Fcount.txt", p.PID), "", nil); st != http.StatusNotFound {
		t.Fatalf("file of a deleted process: %d", st)
	}
}

// TestCLIRunDisplays: cyrnel run prints a final expression's value and saves
// a figure left open next to --output, as a valid PNG.
func TestCLIRunDisplays(t *testing.T) {
	t.Parallel()
	py := dataSciencePython(t)
	dir := writeFiles(t, map[string]string{
		"plot.py": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nprint('plotted')\n6 * 7\n",
	})
	r := cli(t, dir, "", []string{"CYRNEL_PYTHON=" + py}, "run", "--data-dir", filepath.Join(dir, "data"), "--output", "out.json", "plot.py")
	// A one-shot's stdout is a raw pipe, its displays travel on the
	// protocol: their relative order is not kept.
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 2 || !slices.Contains(lines, "plotted") || !slices.Contains(lines, "42") {
		t.Fatalf("cyrnel run: %d %q %s", r.code, r.stdout, r.stderr)
	}
	img, err := os.ReadFile(filepath.Join(dir, "out-display-1.png"))
	if err != nil {
		t.Fatalf("%v; stderr: %s", err, r.stderr)
	}
	if _, err := png.Decode(bytes.NewReader(img)); err != nil {
		t.Fatalf("saved display is not a PNG: %v", err)
	}
}

// TestSessionLimit: past CYRNEL_MAX_SESSIONS live sessions a new one is 429;
// ending one makes room.
func TestSessionLimit(t *testing.T) {
	t.Parallel()
	h := start(t, "", "CYRNEL_MAX_SESSIONS=1")
	s := h.newSession(map[string]any{})
	var prob problem
	if st, _ := h.do("POST", "/sessions", map[string]any{}, &prob); st != http.StatusTooManyRequests || !strings.Contains(prob.Detail, "at most 1") {
		t.Fatalf("second session: %d %+v", st, prob)
	}
	h.do("DELETE", "/sessions/"+s.ID, nil, nil)
	h.newSession(map[string]any{})
}

// TestSessionEndsWithItsHost: a host that dies leaves its sessions ended
// (host_restart) at its next start, never resumed in a fresh interpreter;
// a clean stop ends them host_shutdown.
func TestSessionEndsWithItsHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, dir)
	crashed := h.newSession(map[string]any{})
	h.run("x = 1", session(crashed.ID))
	h.cmd.Process.Kill()
	<-h.exited
	h = start(t, dir)
	var got sessionView
	h.do("GET", "/sessions/"+crashed.ID, nil, &got)
	if got.State != "ended" || got.EndReason != "host_restart" {
		t.Fatalf("after a crash: %+v", got)
	}
	if st, _ := h.do("POST", "/processes", map[string]any{"session": crashed.ID, "code": "x"}, nil); st != http.StatusConflict {
		t.Fatalf("execution in it: %d", st)
	}
	stopped := h.newSession(map[string]any{})
	h.stop()
	h = start(t, dir)
	h.do("GET", "/sessions/"+stopped.ID, nil, &got)
	if got.State != "ended" || got.EndReason != "host_shutdown" {
		t.Fatalf("after a clean stop: %+v", got)
	}
}

// TestDisplayAndFileCapsAreVisible: past the caps displays and output files
// are dropped, and the process says so (outputTruncated, a stderr line);
// under them nothing is flagged (the control).
func TestDisplayAndFileCapsAreVisible(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	under := h.run("for i in range(3):\n    cyrnel.display(i)\n    open(f'f{i}.txt', 'w').write('x')", nil)
	if under.exit() != "success" || under.OutputTruncated || len(h.displays(under.PID)) != 3 || strings.Contains(under.Stderr, "cyrnel:") {
		t.Fatalf("under the caps: %+v", under)
	}
	over := h.run("for i in range(101):\n    cyrnel.display(i)\nfor i in range(21):\n    open(f'f{i:02}.txt', 'w').write('x')", nil)
	ds := h.displays(over.PID)
	var files struct {
		Items []struct{} `json:"items"`
	}
	h.do("GET", fmt.Sprintf("/processes/%d/files", over.PID), nil, &files)
	if over.exit() != "success" || !over.OutputTruncated || len(ds) != 100 || ds[99].Data["text/plain"] != "99" || len(files.Items) != 20 ||
		!strings.Contains(over.Stderr, "display dropped") || !strings.Contains(over.Stderr, "not kept") {
		t.Fatalf("over the caps: %d displays, %d files, %+v", len(ds), len(files.Items), over)
	}
}
