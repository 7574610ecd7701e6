package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/sse"

	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/process"
)

// SSE event payloads; each Go type names one event.
type (
	stateEvent struct {
		State processState `json:"state"`
	}
	stdoutEvent struct {
		Text string `json:"text" doc:"Decoded text written to stdout."`
	}
	stderrEvent struct {
		Text string `json:"text" doc:"Decoded text written to stderr."`
	}
	outputEvent struct {
		Patch map[string]any `json:"patch" doc:"A patch merged into the structured output (on replay: the whole output so far)."`
	}
	exitEvent struct {
		Process
	}
	displayEvent struct {
		Display
	}
	// approvalEvent: a tool call of the process waits on this approval.
	approvalEvent struct {
		Approval
	}
)

func (s *server) registerEvents(api huma.API) {
	sse.Register(api, huma.Operation{
		OperationID: "streamProcessEvents", Method: http.MethodGet, Path: "/processes/{pid}/events", Tags: []string{"processes"},
		Summary: "Follow a process as Server-Sent Events",
		Description: "Replays what happened so far (state, stdout, stderr, output, display), then follows live (an approval event when a tool call starts waiting on one); the last event is `exit`, " +
			"carrying the final process, and the stream ends after it. A process that never ran ends after its state.",
		Middlewares: huma.Middlewares{s.requireProcess(api)},
	}, map[string]any{
		"state":    stateEvent{},
		"stdout":   stdoutEvent{},
		"stderr":   stderrEvent{},
		"output":   outputEvent{},
		"exit":     exitEvent{},
		"approval": approvalEvent{},
		"display":  displayEvent{},
	}, func(ctx context.Context, in *pidPath, send sse.Sender) {
		replay, next, stop, err := s.Processes.Follow(ctx, in.PID)
		if err != nil {
			return // the middleware answered for a missing process
		}
		defer stop()
		for _, ev := range replay {
			if send.Data(payload(ev)) != nil {
				return
			}
		}
		if next == nil {
			return // not live: the replay was the whole story
		}
		for {
			select {
			case ev, ok := <-next:
				if !ok {
					return
				}
				if send.Data(payload(ev)) != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	})
}

// requireProcess answers 404 before a stream starts for a missing process:
// once streaming, no status can be sent.
func (s *server) requireProcess(api huma.API) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		pid, err := strconv.ParseInt(ctx.Param("pid"), 10, 64)
		if err == nil && pid > 0 {
			if _, err = s.Processes.Get(ctx.Context(), pid); errors.Is(err, process.ErrNotFound) {
				_ = huma.WriteErr(api, ctx, http.StatusNotFound, err.Error())
				return
			}
		}
		next(ctx)
	}
}

func payload(ev process.Event) any {
	switch ev.Type {
	case process.EventState:
		return stateEvent{State: processState(ev.State)}
	case process.EventStdout:
		return stdoutEvent{Text: ev.Text}
	case process.EventStderr:
		return stderrEvent{Text: ev.Text}
	case process.EventOutput:
		return outputEvent{Patch: ev.Output}
	case process.EventDisplay:
		return displayEvent{displayOf(*ev.Display)}
	case process.EventApproval:
		if a, ok := ev.Approval.(*approval.Approval); ok {
			return approvalEvent{*approvalOf(a)}
		}
	}
	return exitEvent{*processOf(ev.Process)}
}
