package api

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cyrnel/cyrnel/host/process"
)

type fakeProcesses struct {
	procs   []*process.Process // oldest first
	err     error
	created process.CreateInput
	listed  process.ListInput
	waited  time.Duration
	forced  bool
	replay  []process.Event
	live    chan process.Event // nil: the process is not running
	stopped chan struct{}      // closed when a follower stops
}

func (f *fakeProcesses) get(pid int64) (*process.Process, error) {
	if f.err != nil {
		return nil, f.err
	}
	for _, p := range f.procs {
		if p.PID == pid {
			return p, nil
		}
	}
	return nil, fmt.Errorf("process %d: %w", pid, process.ErrNotFound)
}

func (f *fakeProcesses) Create(_ context.Context, in process.CreateInput) (*process.Process, error) {
	f.created = in
	if f.err != nil {
		return nil, f.err
	}
	p := &process.Process{ProcessSummary: process.ProcessSummary{PID: int64(len(f.procs) + 1), Ref: in.Ref, State: process.Idle, TimeoutMs: in.TimeoutMs}, Code: in.Code}
	f.procs = append(f.procs, p)
	return p, nil
}

func (f *fakeProcesses) List(_ context.Context, in process.ListInput) ([]process.ProcessSummary, bool, error) {
	f.listed = in
	if f.err != nil {
		return nil, false, f.err
	}
	var out []process.ProcessSummary
	for _, p := range slices.Backward(f.procs) {
		if in.BeforePID == 0 || p.PID < in.BeforePID {
			out = append(out, p.ProcessSummary)
		}
	}
	if len(out) > in.Limit {
		return out[:in.Limit], true, nil
	}
	return out, false, nil
}

func (f *fakeProcesses) Get(_ context.Context, pid int64) (*process.Process, error) {
	return f.get(pid)
}

func (f *fakeProcesses) Wait(_ context.Context, pid int64, timeout time.Duration) (*process.Process, error) {
	f.waited = timeout
	return f.get(pid)
}

func (f *fakeProcesses) Kill(_ context.Context, pid int64) (*process.Process, error) {
	return f.get(pid)
}

func (f *fakeProcesses) Run(_ context.Context, pid int64, force bool) (*process.Process, error) {
	f.forced = force
	return f.get(pid)
}

func (f *fakeProcesses) Delete(_ context.Context, pid int64) error {
	_, err := f.get(pid)
	return err
}

func (f *fakeProcesses) Follow(_ context.Context, pid int64) ([]process.Event, <-chan process.Event, func(), error) {
	if _, err := f.get(pid); err != nil {
		return nil, nil, nil, err
	}
	stop := func() {
		if f.stopped != nil {
			close(f.stopped)
		}
	}
	if f.live == nil {
		return f.replay, nil, stop, nil
	}
	return f.replay, f.live, stop, nil
}

func (f *fakeProcesses) Files(_ context.Context, pid int64) ([]process.OutputFile, error) {
	_, err := f.get(pid)
	return nil, err
}

func (f *fakeProcesses) File(_ context.Context, pid int64, _ string) (int64, io.Reader, error) {
	_, err := f.get(pid)
	return 0, nil, err
}

func (f *fakeProcesses) Displays(_ context.Context, pid int64) ([]process.Display, error) {
	_, err := f.get(pid)
	return nil, err
}
