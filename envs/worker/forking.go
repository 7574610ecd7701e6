package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/sandbox"
)

// Forking launches each worker as a child forked from a warm template
// (sandbox.Template): as isolated as a spawned sandbox, without paying an
// interpreter start and its imports per worker. The template is started on
// first use and started again when it dies or stops answering.
type Forking struct {
	log  *slog.Logger
	spec sandbox.TemplateSpec

	mu     sync.Mutex // held while a template starts: launches wait for it
	tpl    *sandbox.Template
	closed bool
	starts int64 // templates started
	// Sessions' children being forked (pending) and forked (sessions, the
	// ended ones pruned at each launch): Stop does not wait for them.
	pending  int
	sessions []*sandbox.Process
}

// ChooseForking returns a forking launcher for the template argv when the
// sandbox config asks for the full sandbox and the machine can hold forked
// children as tightly as spawned ones; otherwise nil and the reason, for
// GET /environment. Each template it starts forks that many idle keepers
// before its first program (sandbox.TemplateSpec.Keepers).
func ChooseForking(log *slog.Logger, s module.SandboxConfig, l module.LimitsConfig, readPaths []string, argv, env []string, keepers int) (*Forking, string) {
	if !s.Enabled {
		return nil, "the sandbox is disabled"
	}
	if why := sandbox.TemplateUnavailable(relaxOf(s)); why != "" {
		return nil, why
	}
	return &Forking{log: log, spec: sandbox.TemplateSpec{
		Argv: argv, Env: env, ReadPaths: readPaths, Limits: limitsOf(l), Network: s.Network,
		Stderr: slogWriter{log}, Logger: log, Keepers: keepers,
	}}, ""
}

// Launch forks a child of the template; the command is the template's.
func (f *Forking) Launch(ctx context.Context, _ Command, files Files) (Handle, error) {
	tpl, err := f.template(ctx)
	if err != nil {
		return nil, err
	}
	p, err := tpl.Fork(ctx, files.Stdout, files.Stderr, files.Extra())
	if err != nil {
		return nil, f.forkFailed(tpl, err)
	}
	return sandboxHandle{p}, nil
}

// Sessions is the launcher of sessions' interpreters: children of the same
// template whose runtime serves a session (sandbox.Template.ForkSession).
// A session outlives the environment that started it: Stop leaves the
// template to end with its last session.
func (f *Forking) Sessions() Launcher { return forkingSessions{f} }

type forkingSessions struct{ f *Forking }

// Launch forks a session's child; the command is the template's.
func (s forkingSessions) Launch(ctx context.Context, _ Command, files Files) (Handle, error) {
	f := s.f
	f.mu.Lock()
	tpl, err := f.templateLocked(ctx)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	f.pending++ // with the template: Stop, from now on, counts it
	f.mu.Unlock()
	p, err := tpl.ForkSession(ctx, files.Stdout, files.Stderr, files.Extra())
	f.mu.Lock()
	f.pending--
	f.sessions = slices.DeleteFunc(f.sessions, ended)
	if err == nil {
		f.sessions = append(f.sessions, p)
	}
	f.mu.Unlock()
	if err != nil {
		return nil, f.forkFailed(tpl, err)
	}
	return sandboxHandle{p}, nil
}

// ended says whether a forked child has been reaped.
func ended(p *sandbox.Process) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// forkFailed explains a failed fork and replaces a template too slow to
// fork.
func (f *Forking) forkFailed(tpl *sandbox.Template, err error) error {
	select {
	case <-tpl.Done():
	default:
		if !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		// A template that does not fork in time is replaced; drained,
		// not killed, so the executions it forked run on.
		f.log.Warn("the python template did not fork in time: replacing it")
		tpl.Drain()
	}
	return fmt.Errorf("fork from template: %w", err)
}

// template returns the running template, starting one if there is none or
// the last one died.
func (f *Forking) template(ctx context.Context) (*sandbox.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.templateLocked(ctx)
}

func (f *Forking) templateLocked(ctx context.Context) (*sandbox.Template, error) {
	if f.closed {
		return nil, ErrClosed
	}
	if f.tpl != nil {
		if f.tpl.Alive() {
			return f.tpl, nil
		}
		f.log.Warn("the python template ended: starting a new one")
	}
	tpl, err := sandbox.StartTemplate(ctx, f.spec)
	if err != nil {
		return nil, err
	}
	f.tpl = tpl
	f.starts++
	return tpl, nil
}

// Restarts counts the templates started after the first.
func (f *Forking) Restarts() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(f.starts-1, 0)
}

// Stop drains the template: it forks no more, and ends once its last child
// has ended. Stop waits for that, no longer than ctx allows, then kills it:
// a stopped host leaves no process behind. With sessions still live on it
// (their owner stops them) Stop does not wait: the template ends with the
// last of them.
func (f *Forking) Stop(ctx context.Context) error {
	f.mu.Lock()
	f.closed = true
	tpl := f.tpl
	f.sessions = slices.DeleteFunc(f.sessions, ended)
	sessions := f.pending + len(f.sessions)
	f.mu.Unlock()
	if tpl == nil {
		return nil
	}
	tpl.Drain()
	if sessions > 0 {
		f.log.Info("the python template ends with its last session", "sessions", sessions)
		return nil
	}
	select {
	case <-tpl.Done():
		return nil
	case <-ctx.Done():
		tpl.Kill()
		<-tpl.Done()
		return fmt.Errorf("python template did not end: %w", ctx.Err())
	}
}

// slogWriter logs what the template writes to its stderr (warm-up errors).
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Warn("python template", "stderr", string(p))
	return len(p), nil
}
