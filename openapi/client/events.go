package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// oapi-codegen hands back a Server-Sent Events response as a raw body (or,
// WithResponse, reads it to the end), so following a process live needs this
// small reader on top of the generated request and payload types.

// ProcessEvent is one event of GET /processes/{pid}/events; exactly one
// payload field is set, the one Event names.
type ProcessEvent struct {
	Event    string // state, stdout, stderr, output, approval, display or exit
	State    *StateEvent
	Stdout   *StdoutEvent
	Stderr   *StderrEvent
	Output   *OutputEvent
	Approval *ApprovalEvent
	Display  *DisplayEvent
	Exit     *ExitEvent
}

// ErrStreamEnded is returned by FollowProcess when the stream ends without an
// exit event: the server cut off a follower that lagged, or shut down.
var ErrStreamEnded = errors.New("event stream ended before the process exited")

// FollowProcess streams a process's events (what happened so far, then
// live) to fn until the stream ends, fn returns an error, or ctx ends.
func (c *ClientWithResponses) FollowProcess(ctx context.Context, pid int64, fn func(ProcessEvent) error, reqEditors ...RequestEditorFn) error {
	resp, err := c.StreamProcessEvents(ctx, pid, reqEditors...)
	if err != nil {
		return fmt.Errorf("stream events of process %d: %w", pid, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("stream events of process %d: %w", pid, newProblem(resp.StatusCode, b))
	}
	// The stream ends normally after exit, or after the state of a process
	// that never ran (idle); anything else was cut short.
	complete := false
	err = ReadProcessEvents(resp.Body, func(ev ProcessEvent) error {
		complete = ev.Exit != nil || (ev.State != nil && ev.State.State == StateEventStateIdle)
		return fn(ev)
	})
	switch {
	case err != nil:
		return fmt.Errorf("stream events of process %d: %w", pid, err)
	case !complete:
		return fmt.Errorf("process %d: %w", pid, ErrStreamEnded)
	}
	return nil
}

// ReadProcessEvents decodes a text/event-stream body of process events,
// calling fn for each, until the body ends or fn returns an error.
func ReadProcessEvents(body io.Reader, fn func(ProcessEvent) error) error {
	// bufio.Reader rather than Scanner: an exit event carries the whole
	// process (stdout and stderr up to their caps), longer than Scanner's
	// line limit.
	r := bufio.NewReader(body)
	var name string
	var data bytes.Buffer
	for {
		line, err := r.ReadString('\n')
		if err != nil && (err != io.EOF || line == "") {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("read event stream: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data.Len() > 0 {
				ev, err := decodeEvent(name, data.Bytes())
				if err != nil {
					return err
				}
				if err := fn(ev); err != nil {
					return err
				}
			}
			name = ""
			data.Reset()
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

func decodeEvent(name string, data []byte) (ProcessEvent, error) {
	ev := ProcessEvent{Event: name}
	var target any
	switch name {
	case "state":
		ev.State = &StateEvent{}
		target = ev.State
	case "stdout":
		ev.Stdout = &StdoutEvent{}
		target = ev.Stdout
	case "stderr":
		ev.Stderr = &StderrEvent{}
		target = ev.Stderr
	case "output":
		ev.Output = &OutputEvent{}
		target = ev.Output
	case "approval":
		ev.Approval = &ApprovalEvent{}
		target = ev.Approval
	case "display":
		ev.Display = &DisplayEvent{}
		target = ev.Display
	case "exit":
		ev.Exit = &ExitEvent{}
		target = ev.Exit
	default:
		return ev, fmt.Errorf("unknown process event %q", name)
	}
	if err := json.Unmarshal(data, target); err != nil {
		return ev, fmt.Errorf("decode %s event: %w", name, err)
	}
	return ev, nil
}
