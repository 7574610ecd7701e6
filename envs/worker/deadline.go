package worker

import (
	"sync"
	"time"
)

// deadline is an execution's timeout timer that can be paused while tool
// calls wait on a human: time spent paused does not count. Pauses nest (one
// per waiting call); the clock runs again when the last one resumes.
type deadline struct {
	t      *time.Timer
	mu     sync.Mutex
	due    time.Time
	left   time.Duration // while paused: what remained
	paused int
}

func newDeadline(d time.Duration) *deadline {
	return &deadline{t: time.NewTimer(d), due: time.Now().Add(d)}
}

// C fires when the deadline passes.
func (d *deadline) C() <-chan time.Time { return d.t.C }

func (d *deadline) stop() { d.t.Stop() }

// passed reports whether the deadline has passed: the clock runs and is
// due.
func (d *deadline) passed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.paused == 0 && !time.Now().Before(d.due)
}

// pause stops the clock until the returned function is called.
func (d *deadline) pause() (resume func()) {
	d.mu.Lock()
	if d.paused == 0 {
		// Since Go 1.23 a stopped timer delivers nothing stale.
		if d.t.Stop() {
			d.left = max(time.Until(d.due), 0)
		} else {
			d.left = 0 // it fired already: the execution times out anyway
		}
	}
	d.paused++
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.paused--; d.paused == 0 {
				d.due = time.Now().Add(d.left)
				d.t.Reset(d.left)
			}
		})
	}
}
