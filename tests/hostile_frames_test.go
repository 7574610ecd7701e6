package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// frameWriter is Python that writes n frames of frameBytes each to fd 4, the
// runtime's protocol pipe: output patches holding one list of numbers, what
// costs a host the most to decode per byte.
func frameWriter(n, frameBytes int) string {
	return fmt.Sprintf(`
import os
head = b'{"jsonrpc":"2.0","method":"output","params":{"patch":{"x":['
tail = b'1]}}}\n'
frame = head + b"1," * ((%d - len(head) - len(tail)) // 2) + tail
for _ in range(%d):
    view = memoryview(frame)
    while view:
        view = view[os.write(4, view):]
`, frameBytes, n)
}

// procStatus reads a field of /proc/<pid>/status in KiB (VmRSS, VmHWM).
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// cpuTicks is the user and system CPU the process has used, in clock ticks.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name (which may hold spaces): utime and
	// stime are the 14th and 15th of the line, the 12th and 13th after it.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// runAll runs the programs at once and returns each one's end. A failure is
// reported on the test's goroutine.
func (h *host) runAll(codes []string) []proc {
	h.t.Helper()
	procs := make([]proc, len(codes))
	errs := make([]error, len(codes))
	var wg sync.WaitGroup
	for i, code := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := json.Marshal(map[string]any{"code": code, "waitMs": 120000})
			req, _ := http.NewRequest("POST", h.base+"/processes", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+h.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				errs[i] = fmt.Errorf("create: status %d", resp.StatusCode)
				return
			}
			errs[i] = json.NewDecoder(resp.Body).Decode(&procs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			h.t.Fatalf("program %d: %v", i, err)
		}
		if procs[i].State != "idle" {
			h.t.Fatalf("program %d still %s", i, procs[i].State)
		}
	}
	return procs
}

// TestProtocolFramesCostTheHostTheirOwnLimits: a program owns fd 4 and can
// write frames the host reads in its own process, outside every cgroup.
// Eight programs writing six 14 MiB frames each end output_limit (a frame
// past the execution's output limit is refused before it is decoded), and
// eight writing frames just under the limit, which the host does decode,
// end as they would; either way the server's RSS stays within 200 MiB of
// where it was.
func TestProtocolFramesCostTheHostTheirOwnLimits(t *testing.T) {
	h := start(t, "")
	pid := h.cmd.Process.Pid
	if p := h.run(`cyrnel.output({"warm": 1})`, nil); p.exit() != "success" {
		t.Fatalf("warm-up: %s/%s %q", p.exit(), p.reason(), p.Error)
	}
	baseRSS := procStatus(t, pid, "VmRSS")
	// Only the growth from here on counts: VmHWM cannot be reset, so the
	// peak is checked through its rise.
	baseHWM := procStatus(t, pid, "VmHWM")
	check := func(t *testing.T, phase string) {
		t.Helper()
		rss, hwm := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM")
		t.Logf("%s: RSS %d → %d MiB, peak %d → %d MiB", phase, baseRSS>>10, rss>>10, baseHWM>>10, hwm>>10)
		if rss-baseRSS > 200<<10 || hwm-max(baseHWM, baseRSS) > 200<<10 {
			t.Fatalf("%s: the server grew by more than 200 MiB", phase)
		}
	}

	t.Run("frames past the output limit", func(t *testing.T) {
		cpu := cpuTicks(t, pid)
		codes := make([]string, 8)
		for i := range codes {
			codes[i] = frameWriter(6, 14<<20)
		}
		for i, p := range h.runAll(codes) {
			if p.exit() != "failed" || p.reason() != "output_limit" {
				t.Errorf("program %d: %s/%s %q", i, p.exit(), p.reason(), p.Error)
			}
		}
		t.Logf("server CPU for 8 × 6 × 14 MiB frames: %d ms", (cpuTicks(t, pid)-cpu)*10)
		check(t, "after 8 × 6 × 14 MiB frames")
	})
	t.Run("frames under the output limit", func(t *testing.T) {
		cpu := cpuTicks(t, pid)
		codes := make([]string, 8)
		for i := range codes {
			codes[i] = frameWriter(20, 1000<<10)
		}
		for i, p := range h.runAll(codes) {
			if p.exit() != "success" {
				t.Errorf("program %d: %s/%s %q", i, p.exit(), p.reason(), p.Error)
			}
			if x, _ := p.Output["x"].([]any); len(x) < 500_000 {
				t.Errorf("program %d: control: its output of %d numbers did not reach the host", i, len(x))
			}
		}
		t.Logf("server CPU for 8 × 20 × 1000 KiB frames: %d ms", (cpuTicks(t, pid)-cpu)*10)
		check(t, "after 8 × 20 × 1000 KiB frames")
	})
	if next := h.run("print('next')", nil); next.exit() != "success" || next.Stdout != "next\n" {
		t.Fatalf("next program: %+v", next)
	}
}

// TestLargeDataStillReachesTheHost: what a program may legitimately send is
// not cut by the limit on one message: a file larger than the output limit
// travels in parts and arrives whole; an output value of non-ASCII text
// costs its UTF-8 bytes (as \u escapes it would pass the limit); a long
// exception message is shortened, not an output_limit; a session's stdout
// of 1 MB (1.3 MB as base64) is sent in parts.
func TestLargeDataStillReachesTheHost(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	p := h.run(`
import hashlib, os
data = os.urandom(3 << 20)
open("big.bin", "wb").write(data)
cyrnel.output({"sha": hashlib.sha256(data).hexdigest(), "text": "é" * 300_000})
raise ValueError("x" * 100_000)`, nil)
	if p.exit() != "failed" || p.reason() != "exception" || !strings.HasPrefix(p.Error, "ValueError: xxx") || len(p.Error) > 9000 {
		t.Fatalf("got %s/%s, error of %d bytes", p.exit(), p.reason(), len(p.Error))
	}
	if text, _ := p.Output["text"].(string); text != strings.Repeat("é", 300_000) {
		t.Fatalf("output text of %d bytes", len(text))
	}
	st, _, b := h.raw("GET", fmt.Sprintf("/processes/%d/files/big.bin", p.PID), "", nil)
	if sum := sha256.Sum256(b); st != http.StatusOK || hex.EncodeToString(sum[:]) != p.Output["sha"] {
		t.Fatalf("big.bin: %d, %d bytes, not what the program wrote", st, len(b))
	}
	// A session's output travels as messages too, in parts.
	s := h.newSession(map[string]any{})
	if q := h.run(`print("é" * 500_000)`, session(s.ID)); q.exit() != "success" || q.Stdout != strings.Repeat("é", 500_000)+"\n" {
		t.Fatalf("session print: %s/%s, %d bytes of stdout", q.exit(), q.reason(), len(q.Stdout))
	}
}
