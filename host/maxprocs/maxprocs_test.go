package maxprocs

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/affinity"
	"github.com/cyrnel/cyrnel/envs/envtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestDecide(t *testing.T) {
	idle := load{busy: 0.1, waits: 500, slowWaits: 20}
	q := quietTicks
	long, soon := flapTicks, flapTicks/2 // ticks since the last lowering
	for _, tc := range []struct {
		name string
		from state
		l    load
		want state
	}{
		{"one P busy raises", state{procs: 1, need: q, since: long}, load{busy: 0.9}, state{procs: 4, need: q, since: long + 1}},
		{"goroutines waiting for the P a second tick raise", state{procs: 1, slow: 1, need: q, since: long}, load{busy: 0.3, waits: 100, slowWaits: 10}, state{procs: 4, need: q, since: long + 1}},
		{"a first tick of them counts", state{procs: 1, need: 2 * q, since: soon}, load{busy: 0.3, waits: 100, slowWaits: 10}, state{procs: 1, slow: 1, need: 2 * q, since: soon + 1}},
		{"a few slow waits do not", state{procs: 1, slow: 1, need: 2 * q, since: soon}, load{busy: 0.3, waits: 100, slowWaits: 9}, state{procs: 1, need: 2 * q, since: soon + 1}},
		{"nor does a small sample", state{procs: 1, slow: 1, need: 2 * q, since: soon}, load{busy: 0.03, waits: 99, slowWaits: 99}, state{procs: 1, need: 2 * q, since: soon + 1}},
		{"a busy host stays on all", state{procs: 4, quiet: q - 1, need: q}, load{busy: 0.9}, state{procs: 4, quiet: 0, need: q, since: 1}},
		{"one client's busiest tick on all lowers", state{procs: 4, quiet: q - 1, need: q, since: 20}, load{busy: 0.76}, state{procs: 1, need: q}},
		{"slow waits on all the Ps are not counted", state{procs: 4, need: q}, load{busy: 0.5, waits: 100, slowWaits: 10}, state{procs: 4, quiet: 1, need: q, since: 1}},
		{"a raise by busy on a slow tick clears the count", state{procs: 1, need: q, since: long}, load{busy: 0.9, waits: 100, slowWaits: 10}, state{procs: 4, need: q, since: long + 1}},
		{"a quiet tick counts", state{procs: 4, quiet: q - 2, need: q}, idle, state{procs: 4, quiet: q - 1, need: q, since: 1}},
		{"enough quiet ticks lower", state{procs: 4, quiet: q - 1, need: q, since: 20}, idle, state{procs: 1, need: q}},
		{"a raise soon after a lowering doubles the quiet ticks", state{procs: 1, need: q, since: soon}, load{busy: 0.9}, state{procs: 4, need: 2 * q, since: soon + 1}},
		{"a raise long after one does not", state{procs: 1, need: q, since: long - 1}, load{busy: 0.9}, state{procs: 4, need: q, since: long}},
		{"up to a bound", state{procs: 1, need: 32 * q, since: soon}, load{busy: 0.9}, state{procs: 4, need: maxQuietTicks, since: soon + 1}},
		{"one P that kept up long lowers promptly again", state{procs: 1, need: 8 * q, since: long - 1}, idle, state{procs: 1, need: q, since: long}},
	} {
		if got := tc.from.decide(4, tc.l); got != tc.want {
			t.Errorf("%s: %+v after %+v = %+v, want %+v", tc.name, tc.from, tc.l, got, tc.want)
		}
	}
}

// fake drives a controller tick by tick with the loads a test gives.
type fake struct {
	c     *Controller
	ticks chan time.Time
	procs chan int
	mu    sync.Mutex
	at    time.Time
	cpu   time.Duration
	set   []int
}

func newFake() *fake {
	f := &fake{ticks: make(chan time.Time), procs: make(chan int), at: time.Unix(0, 0)}
	f.c = New(quiet)
	f.c.sample = func() sample {
		f.mu.Lock()
		defer f.mu.Unlock()
		return sample{at: f.at, cpu: f.cpu, ok: true}
	}
	f.c.set = func(n int) { f.mu.Lock(); f.set = append(f.set, n); f.mu.Unlock() }
	f.c.ticks = func() (<-chan time.Time, func()) { return f.ticks, func() {} }
	f.c.decided = func(n int) { f.procs <- n }
	return f
}

// tick advances the clock by a tick in which the host used busy of a
// CPU, and returns the Ps the controller then chose.
func (f *fake) tick(busy float64) int {
	f.mu.Lock()
	f.at = f.at.Add(tick)
	f.cpu += time.Duration(busy * float64(tick))
	f.mu.Unlock()
	f.ticks <- f.at
	return <-f.procs
}

func TestControllerFollowsTheLoad(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	f := newFake()
	if err := f.c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	most := f.c.most
	if most < 2 {
		t.Fatalf("the runtime chose %d Ps: the test needs 2 or more (run it with GOMAXPROCS unset on a machine with 2 CPUs)", most)
	}
	for i := 1; i < quietTicks; i++ {
		if p := f.tick(0.1); p != most {
			t.Fatalf("lowered after %d quiet ticks", i)
		}
	}
	if p := f.tick(0.1); p != 1 {
		t.Fatalf("after %d quiet ticks: %d Ps, want 1", quietTicks, p)
	}
	if p := f.tick(0.5); p != 1 {
		t.Fatalf("half a CPU raised to %d Ps", p)
	}
	if p := f.tick(0.95); p != most {
		t.Fatalf("a busy P: %d Ps, want %d", p, most)
	}
	if err := f.c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []int{1, most, most}; !slices.Equal(f.set, want) {
		t.Errorf("set %v, want %v (the last by Stop)", f.set, want)
	}
}

func TestOperatorsGOMAXPROCSIsLeftAlone(t *testing.T) {
	t.Setenv("GOMAXPROCS", "2")
	f := newFake()
	if err := f.c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.c.adapted || len(f.set) != 0 {
		t.Errorf("took GOMAXPROCS over (set it to %v) though the operator set it", f.set)
	}
}

// TestRealRuntime: the controller measuring this process lowers it to one
// P while it idles and gives every P back once goroutines queue for the
// one, then Stop leaves GOMAXPROCS as it found it.
func TestRealRuntime(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // at least two to go back to, on any machine
	c := New(quiet)
	procs := make(chan int, 1)
	c.decided = func(n int) {
		select {
		case <-procs:
		default:
		}
		procs <- n
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	most := c.most
	until := func(want int) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case n := <-procs:
				if n == want && runtime.GOMAXPROCS(0) == want {
					return
				}
			case <-deadline:
				t.Fatalf("GOMAXPROCS is %d, want %d", runtime.GOMAXPROCS(0), want)
			}
		}
	}
	until(1)
	// With a follower, one P pins the host where there is a CPU to leave.
	envtest.Follower(t)
	if pinned := affinity.Process.CPU() >= 0; pinned != (runtime.NumCPU() > 1) {
		t.Errorf("on one P with %d CPUs and a follower, pinned to a CPU: %v", runtime.NumCPU(), pinned)
	}
	// Goroutines that each work 100 µs and yield: on one P each waits
	// for the others.
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
				for t := time.Now(); time.Since(t) < 100*time.Microsecond; {
				}
				runtime.Gosched()
			}
		})
	}
	until(most)
	if cpu := affinity.Process.CPU(); cpu >= 0 {
		t.Errorf("on every P, still pinned to CPU %d", cpu)
	}
	stop.Store(true)
	wg.Wait()
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := runtime.GOMAXPROCS(0); n != most {
		t.Errorf("after Stop GOMAXPROCS is %d, want %d", n, most)
	}
	if cpu := affinity.Process.CPU(); cpu >= 0 {
		t.Errorf("after Stop still pinned to CPU %d", cpu)
	}
}
