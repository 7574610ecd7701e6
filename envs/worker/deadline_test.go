package worker

import (
	"testing"
	"testing/synctest"
	"time"
)

// In a synctest bubble time is virtual: it moves only once every goroutine
// of the test waits, so "the deadline passes four times" costs no real
// time and the remaining time is exact.
func TestDeadlinePausesWhileCallsWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		d := newDeadline(50 * time.Millisecond)
		defer d.stop()
		r1 := d.pause()
		r2 := d.pause() // a second waiting call
		// Four times the deadline passes while paused: it must not fire.
		select {
		case <-d.C():
			t.Fatal("fired while paused")
		case <-time.After(200 * time.Millisecond):
		}
		r1()
		r1() // resuming twice counts once
		select {
		case <-d.C():
			t.Fatal("fired while one call still waits")
		case <-time.After(200 * time.Millisecond):
		}
		resumed := time.Now()
		r2()
		select {
		case <-d.C():
			if waited := time.Since(resumed); waited != 50*time.Millisecond {
				t.Fatalf("fired %v after resuming, want the 50 ms that remained", waited)
			}
		case <-time.After(time.Hour):
			t.Fatal("never fired after resuming")
		}
	})
}
