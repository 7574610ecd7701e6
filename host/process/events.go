package process

import (
	"context"
	"maps"

	"github.com/cyrnel/cyrnel/host/store"
)

// EventType names a process event.
type EventType string

const (
	EventState  EventType = "state"
	EventStdout EventType = "stdout"
	EventStderr EventType = "stderr"
	EventOutput EventType = "output"
	EventExit   EventType = "exit"
	// EventApproval: a tool call of the process waits on an approval.
	EventApproval EventType = "approval"
	EventDisplay  EventType = "display"
)

// Event is one thing that happened to a process.
type Event struct {
	Type    EventType
	State   State          // state
	Text    string         // stdout, stderr
	Output  map[string]any // output: a patch
	Process *Process       // exit: the final process
	Display *Display       // display
	// Approval is the approval (the approval package's view), for approval events.
	Approval any
}

// followBuffer bounds how far a follower may lag before it is cut off.
const followBuffer = 1024

func (r *run) publishLocked(ev Event) {
	for ch := range r.subs {
		select {
		case ch <- ev:
		default:
			// A follower that cannot keep up is dropped rather than buffered
			// without bound; it sees its channel close before an exit event.
			delete(r.subs, ch)
			close(ch)
		}
	}
}

// Follow returns what happened to a process so far and, while it is live, a
// channel of what happens next (closed after the exit event, or early when
// the follower lags). stop releases the subscription.
func (m *Manager) Follow(ctx context.Context, pid int64) (replay []Event, next <-chan Event, stop func(), err error) {
	noop := func() {}
	r, err := m.live(ctx, pid)
	if err != nil {
		return nil, nil, noop, err
	}
	if r != nil {
		r.mu.Lock()
		if r.final == nil {
			replay = []Event{{Type: EventState, State: r.state}}
			if s := r.stdout.text.String(); s != "" {
				replay = append(replay, Event{Type: EventStdout, Text: s})
			}
			if s := r.stderr.text.String(); s != "" {
				replay = append(replay, Event{Type: EventStderr, Text: s})
			}
			if len(r.output) > 0 {
				replay = append(replay, Event{Type: EventOutput, Output: maps.Clone(r.output)})
			}
			for _, d := range displayViews(r.displays) {
				replay = append(replay, Event{Type: EventDisplay, Display: &d})
			}
			for _, ev := range r.waiting {
				replay = append(replay, *ev)
			}
			ch := make(chan Event, followBuffer)
			r.subs[ch] = struct{}{}
			r.mu.Unlock()
			return replay, ch, func() {
				r.mu.Lock()
				if _, ok := r.subs[ch]; ok {
					delete(r.subs, ch)
					close(ch)
				}
				r.mu.Unlock()
			}, nil
		}
		r.mu.Unlock()
	}
	p, err := m.get(ctx, pid)
	if err != nil {
		return nil, nil, noop, err
	}
	if m.remote(p) {
		replay, next, stop := m.followRemote(ctx, p)
		return replay, next, stop, nil
	}
	v := m.view(p)
	replay = replayOf(v, p.Displays)
	if v.State == Idle && v.ExitState != nil {
		replay = append(replay, Event{Type: EventExit, Process: v})
	}
	return replay, nil, noop, nil
}

// replayOf is what a follower that arrives late is told first: the state,
// then the streams and output so far, then the displays in their order.
func replayOf(v *Process, ds []store.Display) []Event {
	replay := []Event{{Type: EventState, State: v.State}}
	if v.Stdout != "" {
		replay = append(replay, Event{Type: EventStdout, Text: v.Stdout})
	}
	if v.Stderr != "" {
		replay = append(replay, Event{Type: EventStderr, Text: v.Stderr})
	}
	if len(v.Output) > 0 {
		replay = append(replay, Event{Type: EventOutput, Output: v.Output})
	}
	for _, d := range displayViews(ds) {
		replay = append(replay, Event{Type: EventDisplay, Display: &d})
	}
	return replay
}
