package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/cyrnel/cyrnel/envs/sandbox"
)

// Sandboxed launches workers inside the sandbox (envs/sandbox): their own
// namespaces, private root and /tmp, cgroup limits, Landlock and seccomp.
type Sandboxed struct {
	ReadPaths []string
	Limits    sandbox.Limits
	Relax     sandbox.Relax
	Log       *slog.Logger
}

// Launch starts the command in a fresh sandbox.
func (s Sandboxed) Launch(ctx context.Context, c Command, f Files) (Handle, error) {
	p, err := sandbox.Start(ctx, sandbox.Spec{
		Argv:       append([]string{c.Path}, c.Args...),
		Env:        c.Env,
		Stdout:     f.Stdout,
		Stderr:     f.Stderr,
		ExtraFiles: f.Extra(),
		ReadPaths:  s.ReadPaths,
		Limits:     s.Limits,
		Relax:      s.Relax,
		Logger:     s.Log,
	})
	if err != nil {
		return nil, err
	}
	return sandboxHandle{p}, nil
}

type sandboxHandle struct{ p *sandbox.Process }

// Kill takes the whole sandbox down: its init, and with it every process in
// its PID namespace (setsid'd ones too).
func (h sandboxHandle) Kill()                 { _ = h.p.Kill() }
func (h sandboxHandle) Done() <-chan struct{} { return h.p.Done() }

// Pid is the sandbox's init, whose descendants are the worker.
func (h sandboxHandle) Pid() int { return h.p.Pid() }

func (h sandboxHandle) ResetUsage() { h.p.ResetUsage() }

func (h sandboxHandle) Usage() (time.Duration, int64) {
	u := h.p.Usage()
	return u.CPU, u.PeakMemoryBytes
}

func (h sandboxHandle) Exit() Exit {
	x := h.p.Exit()
	return Exit{Code: x.Code, Signal: x.Signal, MemoryLimit: x.MemoryLimit, CPULimit: x.CPULimit}
}
