package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

// outputFrames is Python that writes n output frames of size bytes to fd 4,
// each a list of numbers (what costs the most to decode per byte), then
// answers.
func outputFrames(n, size int) string { return framesOn(4, n, size) }

// framesOn writes the frames to fd (4, or 6: the main thread's calls).
func framesOn(fd, n, size int) string {
	return fmt.Sprintf(`
head = b'{"jsonrpc":"2.0","method":"output","params":{"patch":{"x":['
tail = b'1]}}}\n'
frame = head + b"1," * ((%d - len(head) - len(tail)) // 2) + tail
for _ in range(%d):
    view = memoryview(frame)
    while view:
        view = view[os.write(%d, view):]
`, size, n, fd) + answer(`{'status': 'success'}`)
}

// sizes keeps only the size of each output value the host is handed.
type sizes struct {
	*envtest.Recorder
	got map[string]int
}

func (s *sizes) EmitOutput(_ int64, patch map[string]json.RawMessage) {
	for k, v := range patch {
		s.got[k] = len(v)
	}
}

// TestMessagePastTheOutputLimitIsRefused: while an execution runs, a
// message larger than its output limit (and the protocol's allowance) ends
// it output_limit before any of it is decoded; one within it is delivered.
func TestMessagePastTheOutputLimitIsRefused(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	for _, c := range []struct {
		name      string
		fd, size  int
		want      module.Reason
		delivered bool
	}{
		{"past the limit", 4, 2 << 20, module.ReasonOutputLimit, false},
		{"past the limit on the main thread's pipe", 6, 2 << 20, module.ReasonOutputLimit, false},
		{"control: within the limit", 4, limit - 100, module.ReasonCompleted, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := hostile(t, framesOn(c.fd, 1, c.size))
			rec := &sizes{Recorder: envtest.NewRecorder(), got: map[string]int{}}
			res, _ := w.Run(context.Background(), rec, Request{Input: module.ExecutionInput{EID: 1, Options: module.Options{TimeoutMs: 30000}}, OutputLimit: limit})
			if res.Reason != c.want {
				t.Fatalf("got %+v (errors %q)", res, rec.Get(1).Errors)
			}
			if _, ok := rec.got["x"]; ok != c.delivered {
				t.Fatalf("output delivered: %v, want %v", ok, c.delivered)
			}
			if errs := rec.Get(1).Errors; !c.delivered && (len(errs) != 1 || !strings.Contains(errs[0], "output limit of 1048576 bytes")) {
				t.Fatalf("errors %q", errs)
			}
		})
	}
}

// TestDecodingCostsTheBytes: a 2 MiB frame of numbers, read, decoded and
// handed on as the host does, costs the host a few times its size (decoded
// into Go values it cost more than forty).
func TestDecodingCostsTheBytes(t *testing.T) {
	// Not parallel: the allocation count is the process's.
	const size = 2 << 20
	w := hostile(t, outputFrames(1, size))
	rec := &sizes{Recorder: envtest.NewRecorder(), got: map[string]int{}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, _ := w.Run(context.Background(), rec, Request{Input: module.ExecutionInput{EID: 1, Options: module.Options{TimeoutMs: 30000}}, OutputLimit: 4 << 20})
	runtime.ReadMemStats(&after)
	if res.Exit != module.ExitSuccess || rec.got["x"] < size-100 {
		t.Fatalf("got %+v, output of %d bytes", res, rec.got["x"])
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d MiB frame cost %.1f MiB of allocations", size>>20, float64(alloc)/(1<<20))
	if alloc > 8*size {
		t.Fatalf("a %d-byte frame cost %d bytes of allocations", size, alloc)
	}
}

// TestRequestsInFlightHoldTheLimit: the params of the requests being served
// at once hold at most one message's limit: a program sending many large
// tool calls without waiting has them served one at a time, while small
// ones (the control) run together.
func TestRequestsInFlightHoldTheLimit(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	for _, c := range []struct {
		name   string
		size   int
		atOnce func(int) bool
	}{
		{"600 KB each", 600 << 10, func(n int) bool { return n == 1 }},
		{"control: 1 KB each", 1 << 10, func(n int) bool { return n > 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := hostile(t, fmt.Sprintf(`
big = "x" * %d
for i in range(6):
    os.write(4, json.dumps({"jsonrpc": "2.0", "id": i, "method": "invokeTool",
        "params": {"serviceId": "s", "toolId": "t", "parameters": {"big": big}}}).encode() + b"\n")
got = b""
while got.count(b"\n") < 6:
    got += os.read(3, 1 << 20)
`, c.size)+answer(`{'status': 'success'}`))
			rec := envtest.NewRecorder()
			var mu sync.Mutex
			now, peak := 0, 0
			rec.Tools["s.t"] = func(map[string]any) (any, error) {
				mu.Lock()
				now++
				peak = max(peak, now)
				mu.Unlock()
				time.Sleep(200 * time.Millisecond) // the tool's own work, while others may arrive
				mu.Lock()
				now--
				mu.Unlock()
				return "ok", nil
			}
			res, _ := w.Run(context.Background(), rec, Request{Input: module.ExecutionInput{EID: 1, Options: module.Options{TimeoutMs: 30000}}, OutputLimit: limit})
			if res.Exit != module.ExitSuccess || !c.atOnce(peak) {
				t.Fatalf("got %+v, %d requests served at once", res, peak)
			}
		})
	}
}
