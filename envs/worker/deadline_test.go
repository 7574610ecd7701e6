package worker

import (
	"testing"
	"time"
)

func TestDeadlinePausesWhileCallsWait(t *testing.T) {
	t.Parallel()
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
		if waited := time.Since(resumed); waited < 40*time.Millisecond || waited > 45*time.Millisecond+time.Second {
			t.Fatalf("fired %v after resuming, want about the 50 ms that remained", waited)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("never fired after resuming")
	}
}
