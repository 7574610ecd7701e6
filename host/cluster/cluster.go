// Package cluster joins a host to the others sharing its PostgreSQL
// database. The database is the truth and notifications are hints: a host
// renews its lease and, once it has been reachable for a whole lease,
// finishes lost hosts' executions; it hears configuration changes, kills and
// approval decisions through LISTEN/NOTIFY, and also syncs from the database
// at a short interval and after every reconnection, so a lost notification
// delays a change by at most that interval. One host on SQLite has none of
// it.
package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/lifecycle"
)

// DefaultTTL is how long a host's lease lasts unless renewed; it is renewed
// every third of it, so a host must miss two renewals to be taken for lost.
const DefaultTTL = 15 * time.Second

// DefaultSync is how often a host syncs from the database what
// notifications may have missed.
const DefaultSync = 2 * time.Second

// retry is how soon a renewal or a notification connection that failed is
// tried again: after an outage the host holds a lease again (and the others
// can forward to it), and hears and resyncs what changed, within about this
// long of the database's return, not a third of the TTL later. Only the
// first failure of a run of them is logged.
const retry = 250 * time.Millisecond

// Store is the database's side of the cluster.
type Store interface {
	RenewLease(ctx context.Context, hostID, addr string, ttl time.Duration) error
	DropLease(ctx context.Context, hostID string) error
	// Notify sends a payload to every host listening on channel.
	Notify(ctx context.Context, channel, payload string) error
	// RequestKill records a kill for the host that runs pid; TakeKills
	// removes and returns a host's requests.
	RequestKill(ctx context.Context, hostID string, pid int64) error
	TakeKills(ctx context.Context, hostID string) ([]int64, error)
	// HostsAlive counts the hosts whose lease has not run out.
	HostsAlive(ctx context.Context) (int, error)
}

// Observer is told how late notifications arrive (host/metrics).
type Observer interface {
	NotificationLag(d time.Duration)
}

// Handlers are what this host does with what the others say.
type Handlers struct {
	// Config applies a configuration change from the store; applying what
	// is already in force must be cheap.
	Config func(ctx context.Context, ev control.Event) error
	// Versions names a version of each piece of stored configuration: a
	// piece whose version changed since the last sync is applied with
	// Config.
	Versions func(ctx context.Context) (map[control.Event]string, error)
	// Kill kills an execution this host runs.
	Kill func(ctx context.Context, pid int64) error
	// Lost finishes the executions (and expires the approvals) of hosts
	// whose lease ran out.
	Lost func(ctx context.Context) (int64, error)
	// Decided wakes the call waiting here on an approval decided elsewhere.
	Decided func(ctx context.Context, id string) error
	// Recheck reads again what calls here wait on (approval decisions).
	Recheck func(ctx context.Context) error
}

// Options tune a Cluster.
type Options struct {
	TTL      time.Duration // 0: DefaultTTL
	Sync     time.Duration // 0: DefaultSync
	Observer Observer      // nil: not observed
}

// message is what travels on the channel.
type message struct {
	Type  string        `json:"type"` // "config", "kill" or "decided"
	From  string        `json:"from"`
	Event control.Event `json:"event,omitzero"`
	Host  string        `json:"host,omitempty"` // kill: the runner
	PID   int64         `json:"pid,omitempty"`
	ID    string        `json:"id,omitempty"` // decided: the approval
	// At is when it was sent (Unix nanoseconds, the sender's clock), for
	// the notification lag.
	At int64 `json:"at,omitempty"`
}

// Cluster is this host's membership: its lease, renewed from Start to
// Stop, and the channel it tells the other hosts things on.
type Cluster struct {
	log     *slog.Logger
	url     string
	host    string
	opts    Options
	store   Store
	channel string // set by Start
	// alive counts the hosts holding a lease at the last renewal (-1:
	// unknown).
	alive atomic.Int64

	mu       sync.Mutex
	addr     string    // advertised with the lease ("" until Advertise)
	handling *Handling // nil: what the others say is not handled (yet, or any more)
	// first is the listening connection opened by Start, so what other
	// hosts announce while this one loads its configuration waits on it
	// until the handling reads it.
	first *pgx.Conn
	kick  chan struct{} // a sync is due now (after a reconnection, a kill notice)
	// joined: Start took the lease (a second Start does nothing); left:
	// Stop gave it up (Start after it is refused).
	joined, left bool

	seen map[control.Event]string // versions applied at the last sync; nil before the first
	// changed (under mu) are the pieces changed outside the sync since it
	// last looked (made here, or heard of): it reloads them whatever their
	// version, which is a digest of the value and can come back.
	changed map[control.Event]bool

	renewal lifecycle.Loop
}

// New returns hostID's membership of the hosts on the database at url;
// Start joins it.
func New(log *slog.Logger, url, hostID string, st Store, o Options) *Cluster {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Sync <= 0 {
		o.Sync = DefaultSync
	}
	c := &Cluster{log: log, url: url, host: hostID, opts: o, store: st, kick: make(chan struct{}, 1)}
	c.alive.Store(-1)
	return c
}

// Start takes the lease at once (so a host is never without one while it
// runs anything), starts listening, and renews the lease until Stop:
// loading the configuration (an environment's interpreters) may take longer
// than the lease lasts. What the others say is handled once the Handling
// starts. A failed Start leaves nothing open; a second Start does nothing,
// and Start after Stop is refused.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	joined, left := c.joined, c.left
	c.mu.Unlock()
	if left {
		return lifecycle.ErrStopped
	}
	if joined {
		return nil
	}
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return fmt.Errorf("cluster: connect: %w", err)
	}
	// Channels are per database, while hosts sharing state share a schema:
	// the channel is named for the schema, so separate installations in
	// one database (tests among them) do not hear each other.
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		conn.Close(ctx)
		return fmt.Errorf("cluster: current schema: %w", err)
	}
	sum := sha256.Sum256([]byte(schema))
	c.channel = "cyrnel_" + hex.EncodeToString(sum[:8])
	if err := c.listenOn(ctx, conn); err != nil {
		return err
	}
	if err := c.store.RenewLease(ctx, c.host, "", c.opts.TTL); err != nil {
		conn.Close(ctx)
		return err
	}
	c.countAlive(ctx)
	if err := c.renewal.Start(ctx, c.renew); err != nil {
		conn.Close(ctx)
		return err
	}
	c.mu.Lock()
	c.first, c.joined = conn, true
	c.mu.Unlock()
	return nil
}

// Handling is the handling of what the other hosts say, and the sync from
// the database: a component of its own, as its handlers call parts (the
// processes, the registry) that take the cluster as their relay, so it
// starts once they have and stops before them.
type Handling struct {
	c    *Cluster
	h    Handlers
	loop lifecycle.Loop
}

// Handling returns the handling of what the others say with h.
func (c *Cluster) Handling(h Handlers) *Handling { return &Handling{c: c, h: h} }

// Start listens and syncs, and finishes lost hosts' executions at each
// renewal, until Stop.
func (h *Handling) Start(ctx context.Context) error {
	c := h.c
	err := h.loop.Start(ctx, func(ctx context.Context) {
		var wg sync.WaitGroup // the listener, the sync, and each relayed kill
		wg.Go(func() { c.listen(ctx, h.h) })
		wg.Go(func() { c.syncLoop(ctx, h.h, &wg) })
		wg.Wait()
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.handling = h
	c.mu.Unlock()
	return nil
}

// Stop ends listening and syncing, and the renewals' finishing of lost
// hosts; it returns once their goroutines have.
func (h *Handling) Stop(ctx context.Context) error {
	c := h.c
	c.mu.Lock()
	if c.handling == h {
		c.handling = nil
	}
	c.mu.Unlock()
	return h.loop.Stop(ctx)
}

// Advertise records the address the other hosts reach this one at (they
// forward there requests for its sessions), now and with every renewal.
func (c *Cluster) Advertise(ctx context.Context, addr string) error {
	c.mu.Lock()
	c.addr = addr
	c.mu.Unlock()
	return c.store.RenewLease(ctx, c.host, addr, c.opts.TTL)
}

// Stop ends renewing and gives the lease up: the host finished its
// executions before (the processes stop first), so there is nothing for the
// others to finish. The Handling is stopped before it.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.left = true
	c.mu.Unlock()
	if err := c.renewal.Stop(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	first := c.first
	c.first = nil
	c.mu.Unlock()
	if first != nil { // never handled
		first.Close(ctx)
	}
	return c.store.DropLease(ctx, c.host)
}

// renew renews the lease every third of its TTL (a failed renewal is tried
// again within retry). Lost hosts are judged only
// once this host has renewed for a whole TTL without failing: after an
// outage of the database every host needs that long to renew again, and
// none is taken for lost meanwhile. The leases themselves run on the
// database's clock.
func (c *Cluster) renew(ctx context.Context) {
	every := c.opts.TTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	reachable := time.Now() // Start just renewed
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		addr := c.addr
		c.mu.Unlock()
		if err := c.store.RenewLease(ctx, c.host, addr, c.opts.TTL); err != nil {
			if ctx.Err() == nil && !reachable.IsZero() {
				c.log.Warn("renew the lease", "err", err)
			}
			reachable = time.Time{}
			c.alive.Store(-1)
			t.Reset(min(retry, every))
			continue
		}
		t.Reset(every)
		c.countAlive(ctx)
		if reachable.IsZero() {
			c.log.Info("lease renewed again")
			reachable = time.Now()
		}
		c.mu.Lock()
		handling := c.handling
		c.mu.Unlock()
		if handling == nil || time.Since(reachable) < c.opts.TTL {
			continue
		}
		lost := handling.h.Lost
		if _, err := lost(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("finish lost hosts' processes", "err", err)
		}
	}
}

// listen holds a connection LISTENing on the channel, reconnecting when it
// is lost; after a reconnection it has a sync run at once, as
// notifications may have been missed meanwhile.
func (c *Cluster) listen(ctx context.Context, h Handlers) {
	first, connected := true, true
	for ctx.Err() == nil {
		err := c.listenOnce(ctx, h, !first, &connected)
		first = false
		if ctx.Err() != nil {
			return
		}
		if connected {
			c.log.Warn("cluster notifications lost; reconnecting", "err", err)
			connected = false
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

// subscribe opens a connection LISTENing on the channel.
func (c *Cluster) subscribe(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect: %w", err)
	}
	return conn, c.listenOn(ctx, conn)
}

// listenOn LISTENs on conn, closing it if that fails.
func (c *Cluster) listenOn(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "LISTEN "+c.channel); err != nil {
		conn.Close(ctx)
		return fmt.Errorf("cluster: listen: %w", err)
	}
	return nil
}

// listenOnce listens on one connection until it is lost, setting
// *connected once it listens.
func (c *Cluster) listenOnce(ctx context.Context, h Handlers, reconnected bool, connected *bool) error {
	c.mu.Lock()
	conn := c.first
	c.first = nil
	c.mu.Unlock()
	if conn == nil {
		var err error
		if conn, err = c.subscribe(ctx); err != nil {
			return err
		}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	*connected = true
	if reconnected {
		c.log.Info("cluster notifications heard again")
		c.syncNow()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var msg message
		if err := json.Unmarshal([]byte(n.Payload), &msg); err != nil {
			c.log.Warn("unreadable cluster notification", "err", err)
			continue
		}
		if c.opts.Observer != nil && msg.At > 0 {
			c.opts.Observer.NotificationLag(time.Since(time.Unix(0, msg.At)))
		}
		c.handle(ctx, h, msg)
	}
}

func (c *Cluster) handle(ctx context.Context, h Handlers, msg message) {
	switch {
	case msg.Type == "config" && msg.From != c.host:
		c.markChanged(msg.Event)
		if err := h.Config(ctx, msg.Event); err != nil {
			c.log.Error("apply another host's configuration change", "event", msg.Event.String(), "from", msg.From, "err", err)
		}
	case msg.Type == "decided" && msg.From != c.host:
		if err := h.Decided(ctx, msg.ID); err != nil {
			c.log.Warn("relayed approval decision", "approval", msg.ID, "err", err)
		}
	case msg.Type == "kill" && msg.Host == c.host:
		c.syncNow() // the request is in the database: the sync takes it
	}
}

// syncNow has the sync loop run at once.
func (c *Cluster) syncNow() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// syncLoop syncs every Sync interval and whenever kicked.
// Relayed kills run on wg.
func (c *Cluster) syncLoop(ctx context.Context, h Handlers, wg *sync.WaitGroup) {
	t := time.NewTicker(c.opts.Sync)
	defer t.Stop()
	for {
		c.sync(ctx, h, wg)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// sync applies what the database holds that notifications may have missed:
// configuration whose version changed, kills asked of this host, decisions
// on approvals calls here wait on. What fails is tried at the next sync.
func (c *Cluster) sync(ctx context.Context, h Handlers, wg *sync.WaitGroup) {
	// Taken before the versions are read: a change made meanwhile is
	// either in what is read or marked for the next sync.
	c.mu.Lock()
	changed := c.changed
	c.changed = nil
	c.mu.Unlock()
	if cur, err := h.Versions(ctx); err != nil {
		c.log.Debug("read configuration versions", "err", err)
		for ev := range changed {
			c.markChanged(ev) // for the next sync
		}
	} else {
		c.apply(ctx, h, cur, changed)
	}
	pids, err := c.store.TakeKills(ctx, c.host)
	if err != nil {
		c.log.Debug("take kill requests", "err", err)
	}
	for _, pid := range pids {
		// Its own goroutine: a kill waits for the execution.
		wg.Go(func() {
			if err := h.Kill(ctx, pid); err != nil {
				c.log.Info("relayed kill", "pid", pid, "err", err)
			}
		})
	}
	if err := h.Recheck(ctx); err != nil {
		c.log.Debug("recheck approvals", "err", err)
	}
}

// apply reloads each piece of configuration whose version differs from the
// last sync's or that changed outside the sync since (every piece at the
// first sync: anything may have changed between loading and listening). A
// reload of what is in force does nothing.
func (c *Cluster) apply(ctx context.Context, h Handlers, cur map[control.Event]string, changed map[control.Event]bool) {
	first := c.seen == nil
	if first {
		c.seen = map[control.Event]string{}
	}
	for ev, v := range cur {
		if old, ok := c.seen[ev]; ok && old == v && !first && !changed[ev] {
			continue
		}
		if err := h.Config(ctx, ev); err != nil {
			c.log.Warn("apply a configuration change found in the database", "event", ev.String(), "err", err)
			c.markChanged(ev) // tried again at the next sync
			continue
		}
		c.seen[ev] = v
	}
	for ev := range c.seen {
		if _, ok := cur[ev]; ok {
			continue
		}
		if err := h.Config(ctx, ev); err != nil {
			c.log.Warn("apply a configuration removal found in the database", "event", ev.String(), "err", err)
			continue
		}
		delete(c.seen, ev)
	}
}

// markChanged marks pieces of configuration changed outside the sync. The
// active environment is one piece, whichever module an event names.
func (c *Cluster) markChanged(evs ...control.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range evs {
		if ev.Kind == control.KindEnvironment {
			ev.ID = ""
		}
		if c.changed == nil {
			c.changed = map[control.Event]bool{}
		}
		c.changed[ev] = true
	}
}

// publish sends msg to every host (this one included, which ignores it).
func (c *Cluster) publish(ctx context.Context, msg message) error {
	msg.From, msg.At = c.host, time.Now().UnixNano()
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if err := c.store.Notify(ctx, c.channel, string(b)); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// countAlive records how many hosts hold a lease (-1 when the database
// cannot say).
func (c *Cluster) countAlive(ctx context.Context) {
	n, err := c.store.HostsAlive(ctx)
	if err != nil {
		n = -1
	}
	c.alive.Store(int64(n))
}

// HostsAlive is how many hosts held a lease at the last renewal; ok is
// false when that renewal could not say.
func (c *Cluster) HostsAlive() (n int, ok bool) {
	v := c.alive.Load()
	return int(v), v >= 0
}

// Notify tells the other hosts of a stored configuration change
// (control.Notifier). A host that misses it catches up at its next sync.
func (c *Cluster) Notify(ctx context.Context, ev control.Event) {
	c.markChanged(ev)
	if err := c.publish(ctx, message{Type: "config", Event: ev}); err != nil {
		c.log.Warn("tell the other hosts of a configuration change; they find it at their next sync", "event", ev.String(), "err", err)
	}
}

// Kill asks hostID to kill pid (process.Relay): the request is stored, and
// the notice only hurries it.
func (c *Cluster) Kill(ctx context.Context, hostID string, pid int64) error {
	if err := c.store.RequestKill(ctx, hostID, pid); err != nil {
		return err
	}
	if err := c.publish(ctx, message{Type: "kill", Host: hostID, PID: pid}); err != nil {
		c.log.Warn("hurry a kill; the runner finds it at its next sync", "pid", pid, "host", hostID, "err", err)
	}
	return nil
}

// Decided tells the other hosts that approval id was decided
// (approval.Relay). A host that misses it finds it at its next sync.
func (c *Cluster) Decided(ctx context.Context, id string) error {
	err := c.publish(ctx, message{Type: "decided", ID: id})
	if err != nil {
		c.log.Warn("tell the other hosts of an approval decision; they find it at their next sync", "approval", id, "err", err)
	}
	return nil
}
