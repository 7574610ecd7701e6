// Package approval holds the human approvals that ask-policy tool calls
// wait on: one approval per call, decided once (approved, denied) or
// expired when nobody decides in time, when the waiting call goes away, or
// when the host that held it restarts.
package approval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/retention"
	"github.com/cyrnel/cyrnel/host/store"
)

// State is where an approval stands.
type State string

// States of an approval.
const (
	Pending  State = "pending"
	Approved State = "approved"
	Denied   State = "denied"
	Expired  State = "expired"
)

// States are every approval state, in the order the API's spec lists them.
var States = []State{Pending, Approved, Denied, Expired}

// Errors the API maps to statuses.
var (
	ErrNotFound = errors.New("approval not found")
	ErrDecided  = errors.New("approval already decided")
	// ErrOwnExecution: the deciding key owns the execution that asked
	// (403); another key must decide.
	ErrOwnExecution = errors.New("an approval cannot be decided by the key that owns the execution that asked for it")
)

// Approval is an approval; host/api and host/mcp map it to their wire shapes.
type Approval struct {
	ID         string
	State      string
	PID        *int64
	ServiceID  string
	ToolID     string
	Parameters map[string]any
	CreatedAt  time.Time
	ExpiresAt  time.Time
	DecidedAt  *time.Time
	KeyID      string
	DecidedBy  string
}

func view(a *store.Approval) *Approval {
	return &Approval{ID: a.ID, State: a.State, PID: a.PID, ServiceID: a.ServiceID, ToolID: a.ToolID, Parameters: a.Parameters,
		CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, DecidedAt: a.DecidedAt, KeyID: a.KeyID, DecidedBy: a.DecidedBy}
}

// Store is what approvals need of the database.
type Store interface {
	InsertApproval(ctx context.Context, a *store.Approval) error
	GetApproval(ctx context.Context, id string) (*store.Approval, error)
	DecideApproval(ctx context.Context, id, state, decidedBy string, at time.Time) (bool, error)
	ExpirePendingApprovals(ctx context.Context, at time.Time) (int64, error)
	ExpireOrphanApprovals(ctx context.Context, at time.Time) (int64, error)
	ListApprovals(ctx context.Context, f store.ApprovalFilter) ([]store.Approval, error)
	PruneApprovals(ctx context.Context, keep int64, before time.Time) error
}

// DefaultTTL is how long an approval waits for a decision.
const DefaultTTL = 10 * time.Minute

// Options bound approvals.
type Options struct {
	// TTL is how long an approval waits for a decision (default DefaultTTL).
	TTL time.Duration
	// Bounds keep the decided approvals bounded, as the audit's do (see
	// retention.Bounds for defaults); pending ones are never pruned.
	retention.Bounds
	// Now is the clock approvals are created, expired, decided and pruned
	// by (nil: time.Now).
	Now func() time.Time
}

// Manager creates approvals and wakes the calls waiting on them.
type Manager struct {
	log   *slog.Logger
	st    Store
	opts  Options
	prune lifecycle.Loop

	relay Relay // nil: one host

	mu      sync.Mutex
	waiting map[string]chan string // by id: the decision, for the call waiting here
}

// Relay tells the other hosts sharing the database that an approval was
// decided here, in case the call waiting on it is theirs.
type Relay interface {
	Decided(ctx context.Context, id string) error
}

// New returns a manager; it recovers and prunes from Start. With a relay
// (nil: one host) the manager is one of several hosts on one database:
// decisions are relayed, and only orphan approvals are expired
// (ExpireOrphans), not every pending one.
func New(log *slog.Logger, st Store, relay Relay, opts Options) *Manager {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	opts.Bounds = opts.WithDefaults()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Manager{log: log, st: st, relay: relay, opts: opts, waiting: map[string]chan string{}}
}

// Start expires the approvals a previous host left pending, then starts the
// pruning, which applies the bounds at once and then every PruneEvery.
func (m *Manager) Start(ctx context.Context) error {
	if err := m.expireLeftPending(ctx); err != nil {
		return err
	}
	return m.prune.Start(ctx, m.pruneLoop)
}

// Stop stops the pruning and waits for it. Calls waiting on approvals are
// the callers' to end (their contexts).
func (m *Manager) Stop(ctx context.Context) error { return m.prune.Stop(ctx) }

func (m *Manager) pruneLoop(ctx context.Context) {
	t := time.NewTicker(m.opts.PruneEvery)
	defer t.Stop()
	for {
		m.opts.Apply(m.log, "approvals", m.now(), m.st.PruneApprovals)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// expireLeftPending expires the approvals a previous host left pending: the calls
// waiting on them ended with it.
func (m *Manager) expireLeftPending(ctx context.Context) error {
	now := m.now()
	expire := m.st.ExpirePendingApprovals
	if m.relay != nil {
		// The others' pending approvals have live calls waiting on them.
		expire = m.st.ExpireOrphanApprovals
	}
	n, err := expire(ctx, now)
	if err != nil {
		return err
	}
	if n > 0 {
		m.log.Warn("expired approvals left pending by a previous host", "count", n)
	}
	return nil
}

// Request is one call that needs a decision.
type Request struct {
	PID        *int64
	ServiceID  string
	ToolID     string
	Parameters map[string]any // already redacted
	KeyID      string         // the key that owns the calling execution ("": none)
}

// Wait creates an approval for req, calls created with it (to suspend the
// process and tell its followers), and blocks until it is decided, expires
// or ctx ends (then it is expired). It returns the final approval.
func (m *Manager) Wait(ctx context.Context, req Request, created func(*Approval)) (*Approval, error) {
	now := m.now()
	row := &store.Approval{ID: newID(now), State: string(Pending), PID: req.PID, ServiceID: req.ServiceID, ToolID: req.ToolID,
		Parameters: req.Parameters, CreatedAt: now, ExpiresAt: now.Add(m.opts.TTL), KeyID: req.KeyID}
	decided := make(chan string, 1)
	m.mu.Lock()
	m.waiting[row.ID] = decided
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waiting, row.ID)
		m.mu.Unlock()
	}()
	if err := m.st.InsertApproval(context.WithoutCancel(ctx), row); err != nil {
		return nil, err
	}
	created(view(row))
	// The deadline is the clock's: the time created took counts.
	timer := time.NewTimer(row.ExpiresAt.Sub(m.now()))
	defer timer.Stop()
	select {
	case <-decided:
	case <-timer.C:
	case <-ctx.Done():
	}
	// Expire it unless a decision got there first; the compare-and-set in
	// the database settles the race.
	at := m.now()
	if _, err := m.st.DecideApproval(context.WithoutCancel(ctx), row.ID, string(Expired), "", at); err != nil {
		return nil, err
	}
	final, err := m.st.GetApproval(context.WithoutCancel(ctx), row.ID)
	if err != nil {
		return nil, err
	}
	return view(final), nil
}

// Decide approves or denies a pending approval, as the caller ctx carries,
// and wakes its call. The key that owns the execution that asked may not
// decide (ErrOwnExecution): an agent never approves its own call.
func (m *Manager) Decide(ctx context.Context, id string, approve bool) (*Approval, error) {
	state := Denied
	if approve {
		state = Approved
	}
	by, _ := caller.From(ctx)
	a, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if by.KeyID != "" && by.KeyID == a.KeyID {
		return nil, fmt.Errorf("approval %s: key %s: %w", id, by.KeyID, ErrOwnExecution)
	}
	ok, err := m.st.DecideApproval(ctx, id, string(state), by.KeyID, m.now())
	if err != nil {
		return nil, err
	}
	if a, err = m.Get(ctx, id); err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("approval %s is %s: %w", id, a.State, ErrDecided)
	}
	if !m.wake(id, string(state)) && m.relay != nil {
		if err := m.relay.Decided(ctx, id); err != nil {
			m.log.Warn("tell the other hosts of a decision", "approval", id, "err", err)
		}
	}
	return a, nil
}

// wake hands the decision to the call waiting here, if there is one.
func (m *Manager) wake(id, state string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.waiting[id]
	if ch != nil {
		select {
		case ch <- state:
		default:
		}
	}
	return ch != nil
}

// Wake hands a decision made on another host to the call waiting here.
func (m *Manager) Wake(ctx context.Context, id string) error {
	a, err := m.st.GetApproval(ctx, id)
	if err != nil {
		return err
	}
	if State(a.State) != Pending {
		m.wake(id, a.State)
	}
	return nil
}

// Recheck reads every approval a call waits on here and wakes the decided
// ones: a decision whose relayed notice was lost reaches its call at the
// next recheck.
func (m *Manager) Recheck(ctx context.Context) error {
	m.mu.Lock()
	ids := slices.Collect(maps.Keys(m.waiting))
	m.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, m.Wake(ctx, id))
	}
	return errors.Join(errs...)
}

// ExpireOrphans expires the pending approvals no live call waits on (their
// host was lost): run after lost hosts' processes are finished.
func (m *Manager) ExpireOrphans(ctx context.Context) error {
	n, err := m.st.ExpireOrphanApprovals(ctx, m.now())
	if n > 0 {
		m.log.Warn("expired approvals of lost hosts", "count", n)
	}
	return err
}

// now reads the manager's clock, in UTC as the rows hold it.
func (m *Manager) now() time.Time { return m.opts.Now().UTC() }

// Get returns one approval.
func (m *Manager) Get(ctx context.Context, id string) (*Approval, error) {
	a, err := m.st.GetApproval(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("approval %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return view(a), nil
}

// ListInput filters and pages approvals.
type ListInput struct {
	State  State
	PID    int64
	Before string
	Limit  int
}

// List returns approvals, newest first; more says whether more follow.
func (m *Manager) List(ctx context.Context, in ListInput) ([]Approval, bool, error) {
	rows, err := m.st.ListApprovals(ctx, store.ApprovalFilter{State: string(in.State), PID: in.PID, Before: in.Before, Limit: in.Limit + 1})
	if err != nil {
		return nil, false, err
	}
	more := len(rows) > in.Limit
	if more {
		rows = rows[:in.Limit]
	}
	out := make([]Approval, 0, len(rows))
	for i := range rows {
		out = append(out, *view(&rows[i]))
	}
	return out, more, nil
}

// newID makes an id that sorts by creation time (newest-first listings
// page on it) and cannot be guessed.
func newID(t time.Time) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("apr_%016x%s", t.UnixNano(), hex.EncodeToString(b[:]))
}

// Pending counts the calls on this host waiting on an approval.
func (m *Manager) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiting)
}
