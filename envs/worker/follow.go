package worker

import (
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/affinity"
)

// followHost makes the worker's processes follow the host's CPU pin
// (Command.FollowHost) until the worker ends: then at once, since its pid
// may be given to another process.
func (w *Worker) followHost() {
	p, ok := w.h.(interface{ Pid() int })
	if !ok {
		return
	}
	w.follow = true
	unfollow, err := affinity.Process.Follow(p.Pid())
	if err != nil {
		w.log.Debug("worker: follow the host's CPU pin", "err", err)
	}
	go func() {
		<-w.h.Done()
		if err := unfollow(); err != nil {
			w.log.Debug("worker: stop following the host's CPU pin", "err", err)
		}
	}()
}

// longRun is how long a following worker's execution runs before it
// counts as computing rather than answering.
const longRun = 10 * time.Millisecond

// runsLong releases the host's CPU pin while the execution under way runs
// past longRun: a program that computes wants a CPU of its own, and two
// of them the two CPUs, not the server's one (envs/affinity). The
// returned func, called as the execution ends, gives the pin back.
func (w *Worker) runsLong() (end func()) {
	var mu sync.Mutex
	var done func() error
	ended := false
	t := time.AfterFunc(longRun, func() {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return
		}
		var err error
		if done, err = affinity.Process.Busy(); err != nil {
			w.log.Debug("worker: release the host's CPU pin for a long execution", "err", err)
		}
	})
	return func() {
		t.Stop()
		mu.Lock()
		ended = true
		d := done
		mu.Unlock()
		if d == nil {
			return
		}
		if err := d(); err != nil {
			w.log.Debug("worker: pin again after a long execution", "err", err)
		}
	}
}
