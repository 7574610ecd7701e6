package tests

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/openapi/client"
)

// These tests drive the server through the Go client generated from the
// committed spec, which proves the spec describes what the server does.

func apiClient(t *testing.T, h *host) *client.ClientWithResponses {
	t.Helper()
	c, err := client.NewClientWithResponses(h.base, client.WithBearer(h.key))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// must fails the test unless a generated call succeeded with a 2xx status.
func must[R client.Response](t *testing.T) func(R, error) R {
	return func(r R, err error) R {
		t.Helper()
		r, err = client.Check(r, err)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

func ptr[T any](v T) *T { return &v }

func exitOf(v *client.Process) string {
	if v.ExitState == nil {
		return "<nil>"
	}
	return string(*v.ExitState)
}

func TestClientCreateWaitRead(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	c := apiClient(t, h)
	ctx := deadline(t)

	created := must[*client.CreateProcessResponse](t)(c.CreateProcessWithResponse(ctx, client.CreateProcessJSONRequestBody{
		Code: "print('hi')\ncyrnel.output({'answer': 42})", Ref: ptr("client-e2e"),
	})).JSON201
	if created.Pid < 1 || created.Ref != "client-e2e" {
		t.Fatalf("created %+v", created)
	}
	p := must[*client.WaitProcessResponse](t)(c.WaitProcessWithResponse(ctx, created.Pid, &client.WaitProcessParams{TimeoutMs: ptr[int64](30000)})).JSON200
	if p.State != client.ProcessStateIdle || exitOf(p) != "success" || p.Reason == nil || *p.Reason != "completed" || p.Stdout != "hi\n" {
		t.Fatalf("waited %+v", p)
	}
	out := must[*client.GetProcessOutputResponse](t)(c.GetProcessOutputWithResponse(ctx, p.Pid)).JSON200
	if out == nil || (*out)["answer"] != 42.0 {
		t.Fatalf("output %v", out)
	}
	stdout := must[*client.GetProcessStdoutResponse](t)(c.GetProcessStdoutWithResponse(ctx, p.Pid))
	if string(stdout.Body) != "hi\n" || !strings.HasPrefix(stdout.ContentType(), "text/plain") {
		t.Fatalf("stdout %q %s", stdout.Body, stdout.ContentType())
	}
	code := must[*client.GetProcessCodeResponse](t)(c.GetProcessCodeWithResponse(ctx, p.Pid))
	if !strings.HasPrefix(string(code.Body), "print('hi')") {
		t.Fatalf("code %q", code.Body)
	}

	// waitMs holds the create response until the process is done.
	failed := must[*client.CreateProcessResponse](t)(c.CreateProcessWithResponse(ctx, client.CreateProcessJSONRequestBody{
		Code: "raise ValueError('boom')", WaitMs: ptr[int64](30000), Ref: ptr("client-e2e"),
	})).JSON201
	if exitOf(failed) != "failed" || failed.Error != "ValueError: boom" || !strings.Contains(failed.Stderr, "Traceback") {
		t.Fatalf("failed %+v", failed)
	}
	list := must[*client.ListProcessesResponse](t)(c.ListProcessesWithResponse(ctx, &client.ListProcessesParams{Ref: ptr("client-e2e")})).JSON200
	if len(list.Items) != 2 || list.Items[0].Pid != failed.Pid || list.HasMore {
		t.Fatalf("list %+v", list)
	}

	// Problems come back typed, with the failing field named.
	_, err := client.Check(c.CreateProcessWithResponse(ctx, client.CreateProcessJSONRequestBody{Code: ""}))
	var prob *client.Problem
	if !errors.As(err, &prob) || prob.Status != http.StatusUnprocessableEntity || !strings.Contains(err.Error(), "body.code") {
		t.Fatalf("empty code: %v", err)
	}
	if _, err = client.Check(c.GetProcessWithResponse(ctx, 999999)); !errors.As(err, &prob) || prob.Status != http.StatusNotFound {
		t.Fatalf("missing process: %v", err)
	}
}

// startedLines creates a process that prints a numbered line every 300 ms
// for about 30 s, long enough that only a kill ends it within a test.
func startedLines(t *testing.T, c *client.ClientWithResponses) int64 {
	t.Helper()
	return must[*client.CreateProcessResponse](t)(c.CreateProcessWithResponse(context.Background(), client.CreateProcessJSONRequestBody{
		Code: "import time\nfor i in range(100):\n    print(f'line {i}')\n    time.sleep(0.3)",
	})).JSON201.Pid
}

func TestClientStream(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	c := apiClient(t, h)
	ctx := deadline(t)

	t.Run("lines arrive as they are printed", func(t *testing.T) {
		pid := startedLines(t, c)
		var events []client.ProcessEvent
		var stdout strings.Builder
		killed := false
		err := c.FollowProcess(ctx, pid, func(ev client.ProcessEvent) error {
			events = append(events, ev)
			if ev.Stdout == nil {
				return nil
			}
			stdout.WriteString(ev.Stdout.Text)
			if stdout.String() == "line 0\n" {
				// The first line is here while the program still runs: it
				// arrived as it was printed, not at the end.
				if p := must[*client.GetProcessResponse](t)(c.GetProcessWithResponse(ctx, pid)).JSON200; p.State != client.ProcessStateRunning {
					t.Errorf("first line arrived with the process %s", p.State)
				}
			}
			if !killed && strings.Count(stdout.String(), "\n") >= 3 {
				killed = true
				must[*client.KillProcessResponse](t)(c.KillProcessWithResponse(ctx, pid))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(stdout.String(), "line 0\nline 1\nline 2\n") {
			t.Fatalf("stdout events: %q", stdout.String())
		}
		if n := countEvents(events, "stdout"); n < 3 {
			t.Fatalf("%d stdout events for three lines printed 300 ms apart: not incremental", n)
		}
		last := events[len(events)-1]
		if last.Exit == nil || last.Exit.ExitState == nil || *last.Exit.ExitState != client.ExitEventExitStateCanceled || last.Exit.Stdout != stdout.String() {
			t.Fatalf("last event %+v", last)
		}
	})

	t.Run("a late client first receives what happened so far", func(t *testing.T) {
		pid := startedLines(t, c)
		// An early follower sees two lines; only then does the late one
		// connect.
		early := make(chan string, 100)
		earlyDone := make(chan error, 1)
		go func() {
			earlyDone <- c.FollowProcess(ctx, pid, func(ev client.ProcessEvent) error {
				if ev.Stdout != nil {
					early <- ev.Stdout.Text
				}
				return nil
			})
		}()
		var seen string
		for strings.Count(seen, "\n") < 2 {
			select {
			case s := <-early:
				seen += s
			case err := <-earlyDone:
				t.Fatalf("early follower ended: %v", err)
			}
		}
		var late []client.ProcessEvent
		killed := false
		err := c.FollowProcess(ctx, pid, func(ev client.ProcessEvent) error {
			late = append(late, ev)
			if !killed && ev.Stdout != nil && len(late) > 2 {
				// A live line after the replay: enough.
				killed = true
				must[*client.KillProcessResponse](t)(c.KillProcessWithResponse(ctx, pid))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if late[0].State == nil || late[0].State.State != client.StateEventStateRunning {
			t.Fatalf("late follower's first event %+v", late[0])
		}
		if late[1].Stdout == nil || !strings.HasPrefix(late[1].Stdout.Text, seen) {
			t.Fatalf("late follower's replay %+v does not start with %q", late[1], seen)
		}
		if late[len(late)-1].Exit == nil {
			t.Fatalf("late follower did not end with exit: %+v", late[len(late)-1])
		}
		if err := <-earlyDone; err != nil {
			t.Fatalf("early follower: %v", err)
		}
	})

	t.Run("disconnecting mid-stream costs nothing", func(t *testing.T) {
		pid := startedLines(t, c)
		errStop := errors.New("stop")
		// The program's first line must be out before the kill below, which
		// checks it was kept.
		if err := c.FollowProcess(ctx, pid, func(ev client.ProcessEvent) error {
			if ev.Stdout != nil {
				return errStop
			}
			return nil
		}); !errors.Is(err, errStop) {
			t.Fatalf("no stdout before the stream ended: %v", err)
		}
		for range 20 {
			sctx, cancel := context.WithCancel(ctx)
			err := c.FollowProcess(sctx, pid, func(ev client.ProcessEvent) error {
				cancel() // hang up after the first event
				return nil
			})
			cancel()
			if err == nil {
				t.Fatal("a canceled stream reported completion")
			}
			// The other way to leave: the callback gives up.
			if err = c.FollowProcess(ctx, pid, func(client.ProcessEvent) error { return errStop }); !errors.Is(err, errStop) {
				t.Fatalf("callback error not returned: %v", err)
			}
		}
		// The server kept serving the process and everyone else.
		must[*client.GetHealthResponse](t)(c.GetHealthWithResponse(ctx))
		must[*client.KillProcessResponse](t)(c.KillProcessWithResponse(ctx, pid))
		var last client.ProcessEvent
		if err := c.FollowProcess(ctx, pid, func(ev client.ProcessEvent) error { last = ev; return nil }); err != nil {
			t.Fatal(err)
		}
		if last.Exit == nil || last.Exit.ExitState == nil || *last.Exit.ExitState != client.ExitEventExitStateCanceled || !strings.HasPrefix(last.Exit.Stdout, "line 0\n") {
			t.Fatalf("after disconnects: %+v", last.Exit)
		}
		p := must[*client.CreateProcessResponse](t)(c.CreateProcessWithResponse(ctx, client.CreateProcessJSONRequestBody{Code: "print('still here')", WaitMs: ptr[int64](30000)})).JSON201
		if exitOf(p) != "success" || p.Stdout != "still here\n" {
			t.Fatalf("after disconnects: %+v", p)
		}
	})

	t.Run("a finished process replays and ends with exit", func(t *testing.T) {
		p := must[*client.CreateProcessResponse](t)(c.CreateProcessWithResponse(ctx, client.CreateProcessJSONRequestBody{
			Code: "import sys\nprint('out')\nprint('err', file=sys.stderr)\ncyrnel.output({'k': 'v'})", WaitMs: ptr[int64](30000),
		})).JSON201
		var names []string
		var exit *client.ExitEvent
		if err := c.FollowProcess(ctx, p.Pid, func(ev client.ProcessEvent) error {
			names = append(names, ev.Event)
			exit = ev.Exit
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if strings.Join(names, ",") != "state,stdout,stderr,output,exit" || exit.Output["k"] != "v" || exit.Stderr != "err\n" {
			t.Fatalf("events %v, exit %+v", names, exit)
		}
		// A process that never ran: its state, then the end.
		idle := must[*client.CreateProcessResponse](t)(c.CreateProcessWithResponse(ctx, client.CreateProcessJSONRequestBody{Code: "pass", Autorun: ptr(false)})).JSON201
		names = nil
		if err := c.FollowProcess(ctx, idle.Pid, func(ev client.ProcessEvent) error { names = append(names, ev.Event); return nil }); err != nil || strings.Join(names, ",") != "state" {
			t.Fatalf("never ran: %v %v", names, err)
		}
		var prob *client.Problem
		if err := c.FollowProcess(ctx, 999999, func(client.ProcessEvent) error { return nil }); !errors.As(err, &prob) || prob.Status != http.StatusNotFound {
			t.Fatalf("missing process: %v", err)
		}
	})
}

func TestClientKill(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	c := apiClient(t, h)
	ctx := deadline(t)
	pid := must[*client.CreateProcessResponse](t)(c.CreateProcessWithResponse(ctx, client.CreateProcessJSONRequestBody{
		Code: "import time\nprint('started')\ntime.sleep(60)",
	})).JSON201.Pid
	// Kill once the program has started, as the event stream shows.
	err := c.FollowProcess(ctx, pid, func(ev client.ProcessEvent) error {
		if ev.Stdout != nil {
			k := must[*client.KillProcessResponse](t)(c.KillProcessWithResponse(ctx, pid)).JSON200
			if k.State != client.ProcessStateTerminating && k.State != client.ProcessStateIdle {
				t.Errorf("kill answered %s", k.State)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p := must[*client.WaitProcessResponse](t)(c.WaitProcessWithResponse(ctx, pid, &client.WaitProcessParams{TimeoutMs: ptr[int64](10000)})).JSON200
	if exitOf(p) != "canceled" || p.Reason == nil || *p.Reason != "killed" || p.Stdout != "started\n" {
		t.Fatalf("after kill %+v", p)
	}
	var prob *client.Problem
	if _, err := client.Check(c.KillProcessWithResponse(ctx, pid)); !errors.As(err, &prob) || prob.Status != http.StatusConflict {
		t.Fatalf("kill idle: %v", err)
	}
}

func TestClientAuth(t *testing.T) {
	t.Parallel()
	h := start(t, "", "CYRNEL_API_KEY=s3cret")
	ctx := deadline(t)
	anon, err := client.NewClientWithResponses(h.base)
	if err != nil {
		t.Fatal(err)
	}
	var prob *client.Problem
	if _, err := client.Check(anon.ListProcessesWithResponse(ctx, nil)); !errors.As(err, &prob) || prob.Status != http.StatusUnauthorized {
		t.Fatalf("without key: %v", err)
	}
	if err := anon.FollowProcess(ctx, 1, func(client.ProcessEvent) error { return nil }); !errors.As(err, &prob) || prob.Status != http.StatusUnauthorized {
		t.Fatalf("events without key: %v", err)
	}
	must[*client.GetHealthResponse](t)(anon.GetHealthWithResponse(ctx))
	c := apiClient(t, h)
	p := must[*client.CreateProcessResponse](t)(c.CreateProcessWithResponse(ctx, client.CreateProcessJSONRequestBody{Code: "print(1)", WaitMs: ptr[int64](30000)})).JSON201
	if exitOf(p) != "success" {
		t.Fatalf("with key: %+v", p)
	}
}

// TestClientSessionFiles: a session's file upload and download, and an
// invalid request read as a problem naming its field, through the Go client
// and the validating proxy (the probe is meant to break the document, so
// only its answer is checked).
func TestClientSessionFiles(t *testing.T) {
	t.Parallel()
	h0 := start(t, "")
	h, proxy := validated(t, h0)
	c := apiClient(t, h)
	ctx := deadline(t)

	s := must[*client.CreateSessionResponse](t)(c.CreateSessionWithResponse(ctx, client.CreateSessionJSONRequestBody{Ref: ptr("client-files")})).JSON201
	must[*client.PutSessionFileResponse](t)(c.PutSessionFileWithBodyWithResponse(ctx, s.Id, "data/in.csv", "text/csv", strings.NewReader("a,b\n1,2\n")))
	run := must[*client.CreateProcessResponse](t)(c.CreateProcessWithResponse(ctx, client.CreateProcessJSONRequestBody{
		Session: &s.Id, WaitMs: ptr[int64](30000),
		Code: "rows = open('data/in.csv').read().splitlines()\nopen('rows.txt', 'w').write(str(len(rows)))",
	})).JSON201
	if exitOf(run) != "success" {
		t.Fatalf("run in session: %+v", run)
	}
	var paths []string
	for _, f := range must[*client.ListSessionFilesResponse](t)(c.ListSessionFilesWithResponse(ctx, s.Id)).JSON200.Items {
		paths = append(paths, f.Path)
	}
	if slices.Sort(paths); !slices.Equal(paths, []string{"data/in.csv", "rows.txt"}) {
		t.Fatalf("files %v", paths)
	}
	got := must[*client.GetSessionFileResponse](t)(c.GetSessionFileWithResponse(ctx, s.Id, "rows.txt"))
	if string(got.Body) != "2" || got.HTTPResponse.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("download %q %s", got.Body, got.HTTPResponse.Header.Get("Content-Type"))
	}
	probe := func(_ context.Context, r *http.Request) error { r.Header.Set(probeHeader, "1"); return nil }
	var prob *client.Problem
	_, err := client.Check(c.CreateProcessWithResponse(ctx, client.CreateProcessJSONRequestBody{Code: "pass", TimeoutMs: ptr[int64](86400001)}, probe))
	if !errors.As(err, &prob) || prob.Status != http.StatusUnprocessableEntity || prob.Errors == nil || len(*prob.Errors) != 1 ||
		(*prob.Errors)[0].Location == nil || *(*prob.Errors)[0].Location != "body.timeoutMs" {
		t.Fatalf("timeoutMs past its maximum: %v", err)
	}
	must[*client.DeleteSessionResponse](t)(c.DeleteSessionWithResponse(ctx, s.Id))
	bad, _ := proxy.violations()
	for _, v := range bad {
		t.Error(v)
	}
}

func countEvents(evs []client.ProcessEvent, name string) int {
	n := 0
	for _, ev := range evs {
		if ev.Event == name {
			n++
		}
	}
	return n
}

// deadline bounds a test step that waits on the server.
func deadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
