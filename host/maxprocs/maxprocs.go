// Package maxprocs sets how many threads run the host's Go code at once
// (GOMAXPROCS) from the host's own load: one while one keeps up, every
// CPU the runtime would use as soon as it does not. With one P the host
// is also pinned to one CPU while a TypeScript worker follows it
// (envs/affinity).
//
// Why: a host serving one client at a time spends much of its CPU handing
// work between goroutines. With a second P idle, each hand-off wakes a
// thread to run or steal the goroutine; on one P the woken goroutine
// simply runs next. On 2 cores, one client of TypeScript executions: the
// host's CPU per execution a fifth lower and its context switches 14 → 6.7
// (docs/benchmarks.md). Under load one P would cap the host, so the
// controller gives every CPU back once work waits for the P.
package maxprocs

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"syscall"
	"time"

	"github.com/cyrnel/cyrnel/envs/affinity"
	"github.com/cyrnel/cyrnel/host/lifecycle"
)

const (
	// tick is how often the load is sampled. One client's load on one P
	// sees a slow wait now and then; a 25 ms tick held too few samples,
	// and a tick that by chance had raiseSlowShare slow raised the Ps
	// (then held them: see flapTicks). A 100 ms tick holds ~4 times the
	// samples, and a burst of work still finds every P within two ticks
	// of its start (8 clients: 100–170 slow of 600–700 waits per tick).
	tick = 100 * time.Millisecond
	// slowWait is a runnable goroutine's wait for a P that counts as slow.
	slowWait = 250 * time.Microsecond
	// One P no longer keeps up once the host's threads used raiseBusy of
	// a CPU in a tick, or once, in each of slowTicks ticks in a row, at
	// least raiseWaits goroutines were made runnable (as the runtime
	// samples them) and raiseSlowShare of them waited slowWait or more.
	// One client's load on one P had single ticks of 15 % slow (a CPU
	// taken away for a moment) and ticks of a few dozen waits between
	// its blocks (4 of 27 slow); a load one P cannot carry stays slow.
	raiseBusy      = 0.85
	raiseSlowShare = 0.10
	raiseWaits     = 100
	slowTicks      = 2
	// All the CPUs go back to one P once the host used less than
	// lowerBusy of a CPU for a second of ticks in a row. The same work
	// costs more CPU on all the Ps (the hand-offs above): one
	// TypeScript client's ticks measure 0.63–0.76 of a CPU there and
	// 0.54–0.65 on one, so a bound at 0.76 or under (0.75 was) could keep
	// such a load on all the Ps, and 0.9 of a CPU on all the Ps is ~0.77
	// on one, under raiseBusy. The bounds are inverted on purpose: a load
	// that costs as much on one P as on all (CPU-bound Go code), or one
	// that waits for a CPU other processes hold, lowers and raises again,
	// and the flap rule below spaces that out to one tick a minute.
	lowerBusy  = 0.9
	quietTicks = int(time.Second / tick)
	// A raise within flapTicks (10 s) of the last lowering doubles the
	// quiet ticks the next lowering needs, up to a minute's: a load one
	// P keeps up with only in bursts stays on all of them.
	flapTicks     = 10 * quietTicks
	maxQuietTicks = 60 * quietTicks
)

// Controller adapts GOMAXPROCS between 1 and the runtime's own choice.
// It owns the process's GOMAXPROCS from Start to Stop: one per process.
type Controller struct {
	log     *slog.Logger
	loop    lifecycle.Loop
	most    int  // the runtime's choice at Start (its CPUs, or a cgroup's limit)
	adapted bool // Start took GOMAXPROCS over

	// Seams for tests: the measure, the setter and the ticks.
	sample func() sample
	set    func(n int)
	ticks  func() (<-chan time.Time, func())
	// decided, if set, receives the Ps after each tick (tests wait on it).
	decided func(procs int)
}

// New returns a controller; Start starts it.
func New(log *slog.Logger) *Controller {
	return &Controller{log: log, sample: read, set: func(n int) { setProcs(log, n) },
		ticks: func() (<-chan time.Time, func()) { t := time.NewTicker(tick); return t.C, t.Stop }}
}

// setProcs sets GOMAXPROCS. On one P the host's threads, and the workers
// that follow them, are pinned to the CPU it runs on (envs/affinity: a
// wake-up across CPUs is dear on a VM); on more they get their CPUs back
// first. A pin that fails costs only its gain.
func setProcs(log *slog.Logger, n int) {
	if n > 1 {
		if err := affinity.Process.Release(); err != nil {
			log.Debug("release the CPU pin", "err", err)
		}
		runtime.GOMAXPROCS(n)
		return
	}
	runtime.GOMAXPROCS(n)
	if err := affinity.Process.To(); err != nil {
		log.Debug("pin to one CPU", "err", err)
	}
}

// Start takes GOMAXPROCS over, unless the operator set it (the GOMAXPROCS
// environment variable) or the runtime uses one P already.
func (c *Controller) Start(ctx context.Context) error {
	c.most = runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" || c.most <= 1 {
		c.log.Info("GOMAXPROCS left as it is", "procs", c.most)
		return nil
	}
	c.adapted = true
	first := c.sample()
	return c.loop.Start(ctx, func(ctx context.Context) { c.run(ctx, first) })
}

// Stop ends the controller and gives GOMAXPROCS back as it found it.
func (c *Controller) Stop(ctx context.Context) error {
	err := c.loop.Stop(ctx)
	if c.adapted {
		c.set(c.most)
	}
	return err
}

func (c *Controller) run(ctx context.Context, last sample) {
	ch, stop := c.ticks()
	defer stop()
	st := state{procs: c.most, need: quietTicks}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		now := c.sample()
		l, ok := last.to(now)
		last = now
		if !ok {
			st.slow = 0 // slow ticks count only in a row
			continue
		}
		next := st.decide(c.most, l)
		if next.procs != st.procs {
			c.set(next.procs)
			c.log.Debug("GOMAXPROCS", "from", st.procs, "to", next.procs)
		}
		st = next
		if c.decided != nil {
			c.decided(st.procs)
		}
	}
}

// load is what a tick measured.
type load struct {
	busy      float64 // the host's CPU time over the wall time
	waits     uint64  // runnable goroutines that then ran (sampled)
	slowWaits uint64  // of which waited slowWait or more
}

// state is the controller's between ticks.
type state struct {
	procs int // GOMAXPROCS now
	slow  int // ticks in a row on one P that counted as slow (raiseWaits and raiseSlowShare)
	quiet int // ticks in a row on all the Ps below lowerBusy
	need  int // quiet ticks the next lowering needs
	since int // ticks since the last lowering
}

// decide is the state after a tick that measured l.
func (s state) decide(most int, l load) state {
	s.since++
	if s.procs < most {
		if l.waits >= raiseWaits && float64(l.slowWaits) >= raiseSlowShare*float64(l.waits) {
			s.slow++
		} else {
			s.slow = 0
		}
		if s.slow < slowTicks && l.busy < raiseBusy*float64(s.procs) {
			if s.since >= flapTicks {
				s.need = quietTicks // one P kept up for long: lower promptly again
			}
			return s
		}
		if s.since < flapTicks {
			s.need = min(2*s.need, maxQuietTicks)
		}
		s.procs, s.slow, s.quiet = most, 0, 0
		return s
	}
	if l.busy >= lowerBusy {
		s.quiet = 0
		return s
	}
	if s.quiet++; s.quiet >= s.need {
		s.procs, s.quiet, s.since = 1, 0, 0
	}
	return s
}

// sample is the cumulative counters a load is the difference of.
type sample struct {
	at    time.Time
	cpu   time.Duration
	waits uint64
	slow  uint64
	ok    bool
}

// to is the load from s to n; false if either could not be read.
func (s sample) to(n sample) (load, bool) {
	wall := n.at.Sub(s.at)
	if wall <= 0 || !s.ok || !n.ok {
		return load{}, false
	}
	return load{busy: float64(n.cpu-s.cpu) / float64(wall), waits: n.waits - s.waits, slowWaits: n.slow - s.slow}, true
}

// read samples the process's CPU time and the runtime's histogram of how
// long runnable goroutines waited for a P.
func read() sample {
	s := sample{at: time.Now()}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s
	}
	s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	m := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindFloat64Histogram {
		return s
	}
	h := m[0].Value.Float64Histogram()
	for i, n := range h.Counts {
		s.waits += n
		if h.Buckets[i] >= slowWait.Seconds() { // bucket i's lower bound
			s.slow += n
		}
	}
	s.ok = true
	return s
}
