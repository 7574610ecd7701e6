// Package tests holds end-to-end tests: they build the cyrnel binary, start
// it on a free loopback port with a temporary data directory, and talk to it
// only over HTTP.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cyrnel-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "cyrnel")
	// The sandbox helper next to it, as a release ships them.
	build := exec.Command("go", "build", "-o", dir+"/", "../cmd/cyrnel", "../cmd/cyrnel-sandbox")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build cyrnel:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// host is a running cyrnel server.
type host struct {
	t       testing.TB
	cmd     *exec.Cmd
	dataDir string
	base    string
	key     string
	exited  chan struct{}
	logs    *syncBuffer
}

type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.String()
}

// listening finds the address in the log, in text or JSON lines.
var listening = regexp.MustCompile(`msg="cyrnel listening" addr=(\S+)|"msg":"cyrnel listening","addr":"([^"]+)"`)

// start runs the binary on dataDir (a fresh one when empty) and waits until
// it listens.
func start(t testing.TB, dataDir string, env ...string) *host {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	return startCommand(t, exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir), dataDir, env...)
}

// startCommand is start with the command given: cmd runs serve on dataDir
// (through a wrapper, say, or with more flags).
func startCommand(t testing.TB, cmd *exec.Cmd, dataDir string, env ...string) *host {
	t.Helper()
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &host{t: t, cmd: cmd, dataDir: dataDir, exited: make(chan struct{}), logs: &syncBuffer{mu: make(chan struct{}, 1)}}
	for _, e := range env {
		if k, ok := strings.CutPrefix(e, "CYRNEL_API_KEY="); ok {
			h.key = k
		}
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			h.logs.Write([]byte(line + "\n"))
			if m := listening.FindStringSubmatch(line); m != nil {
				addr <- m[1] + m[2]
			}
		}
		cmd.Wait()
		close(h.exited)
	}()
	select {
	case a := <-addr:
		h.base = "http://" + a
		if h.key == "" {
			// Started without a key, the server made one in the data
			// directory before listening.
			b, err := os.ReadFile(filepath.Join(dataDir, "api-key"))
			if err != nil {
				t.Fatalf("no CYRNEL_API_KEY and no key file: %v", err)
			}
			h.key = strings.TrimSpace(string(b))
		}
	case <-h.exited:
		t.Fatalf("cyrnel exited before listening:\n%s", h.logs)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("cyrnel did not listen within 30s:\n%s", h.logs)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-h.exited
		}
		if t.Failed() {
			t.Logf("server log:\n%s", h.logs)
		}
	})
	// A kernel that forbids a sandbox layer makes the environment refuse to
	// run: these tests then have nothing to test, which is a failure unless
	// the machine is declared unable to sandbox.
	var status struct {
		Error string `json:"error"`
	}
	h.do("GET", "/environment", nil, &status)
	if strings.Contains(status.Error, "refusing to run without the sandbox") {
		if reason := os.Getenv("CYRNEL_TEST_NO_SANDBOX"); reason != "" {
			t.Skipf("this machine cannot sandbox programs: %s (CYRNEL_TEST_NO_SANDBOX: %s)", status.Error, reason)
		}
		t.Fatalf("this machine cannot sandbox programs: %s; set CYRNEL_TEST_NO_SANDBOX=<why> to skip", status.Error)
	}
	return h
}

// do sends a request and decodes a JSON answer into out (when not nil).
func (h *host) do(method, path string, body any, out any) (int, http.Header) {
	h.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			h.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, h.base+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if h.key != "" {
		req.Header.Set("Authorization", "Bearer "+h.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	if out != nil {
		if s, ok := out.(*string); ok {
			*s = string(b)
		} else if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode, resp.Header
}

// proc is the part of a process the tests read.
type proc struct {
	PID             int64          `json:"pid"`
	Ref             string         `json:"ref"`
	State           string         `json:"state"`
	ExitState       *string        `json:"exitState"`
	Reason          *string        `json:"reason"`
	Error           string         `json:"error"`
	TimeoutMs       int64          `json:"timeoutMs"`
	Runs            int64          `json:"runs"`
	Output          map[string]any `json:"output"`
	Stdout          string         `json:"stdout"`
	Stderr          string         `json:"stderr"`
	StdoutTruncated bool           `json:"stdoutTruncated"`
	OutputTruncated bool           `json:"outputTruncated"`
	StartedAt       *time.Time     `json:"startedAt"`
	FinishedAt      *time.Time     `json:"finishedAt"`
	DurationMs      *int64         `json:"durationMs"`
	HostID          string         `json:"hostId"`
}

func (p proc) exit() string {
	if p.ExitState == nil {
		return "<nil>"
	}
	return *p.ExitState
}

func (p proc) reason() string {
	if p.Reason == nil {
		return "<nil>"
	}
	return *p.Reason
}

type problem struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Message  string `json:"message"`
		Location string `json:"location"`
	} `json:"errors"`
}

// run submits code and waits for the result.
func (h *host) run(code string, extra map[string]any) proc {
	h.t.Helper()
	body := map[string]any{"code": code, "waitMs": 60000}
	for k, v := range extra {
		body[k] = v
	}
	var p proc
	if st, _ := h.do("POST", "/processes", body, &p); st != http.StatusCreated {
		h.t.Fatalf("create: status %d", st)
	}
	if p.State != "idle" {
		h.t.Fatalf("process %d still %s after waitMs", p.PID, p.State)
	}
	return p
}

// waitFor follows the process's event stream and returns the process as
// soon as cond holds, checked after each event (bounded by 30 s).
func (h *host) waitFor(pid int64, cond func(proc) bool) proc {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/processes/%d/events", h.base, pid), nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if h.key != "" {
		req.Header.Set("Authorization", "Bearer "+h.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var p proc
	events := bufio.NewScanner(resp.Body)
	events.Buffer(make([]byte, 64<<10), 4<<20)
	for events.Scan() {
		if !strings.HasPrefix(events.Text(), "data:") {
			continue
		}
		h.do("GET", fmt.Sprintf("/processes/%d", pid), nil, &p)
		if cond(p) {
			return p
		}
	}
	h.t.Fatalf("process %d: condition not met before its stream ended (%v); last %+v", pid, events.Err(), p)
	return p
}

// stop shuts the server down (SIGTERM) and waits for it to exit.
func (h *host) stop() {
	h.t.Helper()
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(20 * time.Second):
		h.t.Fatal("cyrnel did not stop within 20s of SIGTERM")
	}
}
