// Package session runs sessions: long-lived sandboxed interpreters that keep
// their state between the executions run in them, one at a time and in
// order. Each session's interpreter is owned by one goroutine, which runs
// its executions, ends it (idle timeout, maximum lifetime, a crash, a kill it
// did not survive, DELETE) and records why.
package session

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/store"
)

// State is a session's state (its row holds it as a string).
type State string

// States of a session.
const (
	Starting State = "starting"
	Ready    State = "ready"
	Busy     State = "busy"
	Ended    State = store.SessionEnded
)

// States are every session state, in the order the API's spec lists them.
var States = []State{Starting, Ready, Busy, Ended}

// Reasons a session ended.
const (
	EndDeleted     = "deleted"
	EndIdleTimeout = "idle_timeout"
	EndMaxLifetime = "max_lifetime"
	EndCrashed     = "crashed"      // the interpreter died between executions
	EndKilled      = "killed"       // a killed program did not stop within the grace
	EndStartFailed = "start_failed" // the interpreter never became ready
	EndHostRestart = string(module.ReasonHostRestart)
	EndShutdown    = string(module.ReasonHostShutdown)
	EndHostLost    = string(module.ReasonHostLost) // its host stopped renewing its lease
)

// Starter is an environment that can start a session's interpreter,
// outside its pool.
type Starter interface {
	StartSession(ctx context.Context) (module.Session, error)
}

// Environments gives the active environment (the module registry).
type Environments interface {
	Active() (module.Environment, error)
}

// Config bounds the sessions of one host.
type Config struct {
	MaxSessions  int           // live sessions at once (default 16)
	QueueLimit   int           // executions waiting in one session (default 16)
	StartTimeout time.Duration // for an interpreter to become ready (default 2 min: preloads such as pandas are slow)
	// Now is the clock sessions are stamped and ended (idle, lifetime) by
	// (nil: time.Now).
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.MaxSessions <= 0 {
		c.MaxSessions = 16
	}
	if c.QueueLimit <= 0 {
		c.QueueLimit = 16
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 2 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Defaults of CreateInput and the bound of both durations.
const (
	DefaultIdleTimeoutMs = 600_000
	DefaultMaxLifetimeMs = 86_400_000
	MaxDurationMs        = 7 * 86_400_000
)

// Store is what sessions need of the database.
type Store interface {
	InsertSession(ctx context.Context, ses *store.Session) error
	// UpdateSession writes the columns of a session that has not ended and
	// reports whether it did.
	UpdateSession(ctx context.Context, ses *store.Session, columns ...string) (bool, error)
	GetSession(ctx context.Context, id string) (*store.Session, error)
	ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, error)
	// EndHostSessions ends a host's live sessions; EndLostSessions those of
	// every other host whose lease ran out.
	EndHostSessions(ctx context.Context, hostID, reason string, at time.Time) (int64, error)
	EndLostSessions(ctx context.Context, self, reason string) (int64, error)
}

// Manager owns this host's sessions.
type Manager struct {
	log  *slog.Logger
	st   Store
	envs Environments
	host string
	cfg  Config

	mu       sync.Mutex
	live     map[string]*live
	starting int
	stopping bool
	wg       sync.WaitGroup
}

// New returns a manager; Start it before serving, Stop it to stop.
func New(log *slog.Logger, st Store, envs Environments, hostID string, cfg Config) *Manager {
	return &Manager{log: log, st: st, envs: envs, host: hostID, cfg: cfg.withDefaults(), live: map[string]*live{}}
}

// Start ends the sessions this host left open when it stopped: their
// interpreters died with it, and a session never silently gets a fresh one.
// Each session's goroutine starts with the session. Start after Stop fails.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	stopped := m.stopping
	m.mu.Unlock()
	if stopped {
		return lifecycle.ErrStopped
	}
	n, err := m.st.EndHostSessions(ctx, m.host, EndHostRestart, m.now())
	if err != nil {
		return err
	}
	if n > 0 {
		m.log.Info("ended sessions left open by the previous run", "count", n)
	}
	return nil
}

// FinishLost ends, with reason host_lost, the live sessions of every other
// host whose lease ran out: their interpreters went with their host. Any
// live host may run it; doing it twice is harmless.
func (m *Manager) FinishLost(ctx context.Context) (int64, error) {
	n, err := m.st.EndLostSessions(ctx, m.host, EndHostLost)
	if n > 0 {
		m.log.Warn("ended sessions of a lost host", "count", n)
	}
	return n, err
}

// CreateInput is a new session.
type CreateInput struct {
	Module        string
	EnvConfig     map[string]any
	IdleTimeoutMs int64
	MaxLifetimeMs int64
	Ref           string
}

// Create starts a session and returns it once its interpreter is ready.
func (m *Manager) Create(ctx context.Context, in CreateInput) (*store.Session, error) {
	if in.IdleTimeoutMs == 0 {
		in.IdleTimeoutMs = DefaultIdleTimeoutMs
	}
	if in.MaxLifetimeMs == 0 {
		in.MaxLifetimeMs = DefaultMaxLifetimeMs
	}
	if strings.ContainsRune(in.Ref, 0) {
		return nil, &schema.FieldError{Field: "ref", Message: "contains a NUL character"}
	}
	for field, v := range map[string]int64{"idleTimeoutMs": in.IdleTimeoutMs, "maxLifetimeMs": in.MaxLifetimeMs} {
		if v < 1 || v > MaxDurationMs {
			return nil, &schema.FieldError{Field: field, Message: fmt.Sprintf("must be between 1 and %d", MaxDurationMs)}
		}
	}
	env, err := m.envs.Active()
	if err != nil {
		return nil, fmt.Errorf("start session: %w", err)
	}
	id := env.Info().ID
	if in.Module != "" && in.Module != id {
		return nil, &schema.FieldError{Field: "module", Message: fmt.Sprintf("sessions run in the active environment (%s), not %q", id, in.Module)}
	}
	starter, ok := env.(Starter)
	if !ok {
		return nil, &schema.FieldError{Field: "module", Message: fmt.Sprintf("the %s environment does not support sessions", id)}
	}
	m.mu.Lock()
	switch {
	case m.stopping:
		m.mu.Unlock()
		return nil, ErrStopping
	case len(m.live)+m.starting >= m.cfg.MaxSessions:
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: this host runs at most %d at once", ErrTooMany, m.cfg.MaxSessions)
	}
	m.starting++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.starting--
		m.mu.Unlock()
	}()

	now := m.now()
	row := &store.Session{
		ID: "ses_" + rand.Text(), Module: id, State: string(Starting), Ref: in.Ref, EnvConfig: in.EnvConfig,
		IdleTimeoutMs: in.IdleTimeoutMs, MaxLifetimeMs: in.MaxLifetimeMs, HostID: m.host, CreatedAt: now, LastUsedAt: now,
		Owner: caller.KeyID(ctx),
	}
	if err := m.st.InsertSession(ctx, row); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(context.Background(), m.cfg.StartTimeout)
	ws, err := starter.StartSession(sctx)
	cancel()
	if err != nil {
		m.end(row, EndStartFailed, nil)
		return nil, fmt.Errorf("start session: %w", err)
	}
	row.State = string(Ready)
	if _, err := m.st.UpdateSession(context.Background(), row, store.SesState); err != nil {
		ws.Close()
		m.end(row, EndStartFailed, nil)
		return nil, err
	}
	l := &live{row: *row, jobs: make(chan *job, m.cfg.QueueLimit), stop: make(chan string, 1), done: make(chan struct{})}
	l.ctx, l.end = context.WithCancel(context.Background())
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		ws.Close()
		m.end(row, EndShutdown, nil)
		return nil, ErrStopping
	}
	m.live[row.ID] = l
	m.wg.Add(1)
	m.mu.Unlock()
	// The deadlines are set before the session is handed out.
	go m.own(l, ws, m.deadlines(row))
	out := *row
	return &out, nil
}

// now reads the manager's clock, in UTC as the rows hold it.
func (m *Manager) now() time.Time { return m.cfg.Now().UTC() }

func ptr[T any](v T) *T { return &v }

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func (m *Manager) write(row *store.Session, columns ...string) {
	if _, err := m.st.UpdateSession(context.Background(), row, columns...); err != nil {
		m.log.Error("record session", "session", row.ID, "err", err)
	}
}

// end records that a session ended and why.
func (m *Manager) end(row *store.Session, reason string, l *live) {
	now := m.now()
	row.State, row.EndReason, row.EndedAt = string(Ended), reason, &now
	if l != nil {
		l.mu.Lock()
		l.row = *row
		l.mu.Unlock()
	}
	m.write(row, store.SesState, store.SesEndReason, store.SesEndedAt, store.SesCPUMs, store.SesMemoryBytes, store.SesLastUsedAt)
	m.log.Info("session ended", "session", row.ID, "reason", reason)
}

// Check says whether the caller ctx carries may queue an execution in the
// session: ErrNotFound (a runner's key is told so of another key's session
// too), ErrNotOwner when the session is another key's, or ErrEnded (with
// the reason) when it can no longer run one.
func (m *Manager) Check(ctx context.Context, id string) error {
	row, err := m.Get(ctx, id)
	if err != nil {
		return err
	}
	if c, ok := caller.From(ctx); ok && c.KeyID != row.Owner {
		return fmt.Errorf("session %s: %w", id, ErrNotOwner)
	}
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l != nil {
		return nil
	}
	return unavailable(row)
}

// unavailable says why a session that is not live on this host takes no
// execution: it ended, or it lives on another host.
func unavailable(row *store.Session) error {
	if State(row.State) == Ended {
		return &endedError{fmt.Sprintf("session %s has ended (%s); start a new session", row.ID, row.EndReason)}
	}
	return &endedError{fmt.Sprintf("session %s runs on host %s, not this one", row.ID, row.HostID)}
}

// Execute runs in in the session, after the executions queued before it.
// It returns the environment's id. An ended session answers a failed
// result with reason session_ended (and the session's reason as the error).
func (m *Manager) Execute(ctx context.Context, id string, in module.ExecutionInput) (string, module.Result, error) {
	j := &job{ctx: ctx, in: in, done: make(chan struct{})}
	m.mu.Lock()
	l := m.live[id]
	if l == nil || l.ended {
		m.mu.Unlock()
		return "", module.Result{}, m.Check(ctx, id)
	}
	if j.in.EnvConfig == nil {
		// The session's envConfig applies to executions that bring none.
		j.in.EnvConfig = l.snapshot().EnvConfig
	}
	select {
	case l.jobs <- j:
	default:
		m.mu.Unlock()
		return "", module.Result{}, fmt.Errorf("%w: %d executions already wait", ErrBusy, cap(l.jobs))
	}
	m.mu.Unlock()
	envID := l.snapshot().Module
	select {
	case <-j.done:
	case <-ctx.Done():
		if j.state.CompareAndSwap(jobWaiting, jobDropped) {
			return envID, module.Result{Exit: module.ExitCanceled, Reason: module.ReasonKilled}, nil
		}
		<-j.done
	}
	return envID, j.res, j.err
}

// Get returns a session as stored (a live one as it is now), if the caller
// ctx carries may see it: a runner's key sees only the sessions it owns,
// and one it does not own is not found, as a missing one is.
func (m *Manager) Get(ctx context.Context, id string) (*store.Session, error) {
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	var row *store.Session
	if l != nil {
		snap := l.snapshot()
		row = &snap
	} else {
		var err error
		row, err = m.st.GetSession(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFoundError{id}
		}
		if err != nil {
			return nil, err
		}
	}
	if !caller.Sees(ctx, row.Owner) {
		return nil, notFoundError{id}
	}
	return row, nil
}

// List lists sessions newest first: for a runner's key, only those it owns.
func (m *Manager) List(ctx context.Context, f store.SessionFilter) ([]store.Session, error) {
	owner, scoped := caller.Scope(ctx)
	if scoped && owner == "" {
		return nil, nil // a key without an id owns nothing
	}
	f.Owner = owner
	rows, err := m.st.ListSessions(ctx, f)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range rows {
		if l := m.live[rows[i].ID]; l != nil {
			rows[i] = l.snapshot()
		}
	}
	return rows, nil
}

// End ends a session (DELETE): a running execution is stopped with it.
// Ending an ended session does nothing.
func (m *Manager) End(ctx context.Context, id string) error {
	row, err := m.Get(ctx, id)
	if err != nil {
		return err
	}
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l == nil {
		if State(row.State) != Ended {
			// Live on another host: only that host can end it.
			return &endedError{fmt.Sprintf("session %s runs on host %s, not this one", id, row.HostID)}
		}
		return nil
	}
	select {
	case l.stop <- EndDeleted:
		l.end()
	default:
	}
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ends every session and refuses new ones; it returns once their
// goroutines have, or when ctx ends. A second Stop waits the same way.
func (m *Manager) Stop(ctx context.Context) error {
	m.mu.Lock()
	m.stopping = true
	for _, l := range m.live {
		select {
		case l.stop <- EndShutdown:
			l.end()
		default:
		}
	}
	m.mu.Unlock()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	if err := lifecycle.Await(ctx, done); err != nil {
		return fmt.Errorf("sessions still ending: %w", err)
	}
	return nil
}

// Counts are this host's sessions by state (ended ones are not kept).
func (m *Manager) Counts() map[State]int {
	m.mu.Lock()
	counts := map[State]int{Starting: m.starting, Ready: 0, Busy: 0}
	lives := make([]*live, 0, len(m.live))
	for _, l := range m.live {
		lives = append(lives, l)
	}
	m.mu.Unlock()
	for _, l := range lives {
		if s := State(l.snapshot().State); s != Ended {
			counts[s]++
		}
	}
	return counts
}
