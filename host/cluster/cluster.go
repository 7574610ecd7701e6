// Package cluster joins a host to the others sharing its PostgreSQL
// database: it renews the host's lease and, on each renewal, has lost
// hosts' executions finished; it carries configuration events and kills
// between hosts with LISTEN/NOTIFY. One host on SQLite has none of it.
package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cyrnel/cyrnel/host/control"
)

// DefaultTTL is how long a host's lease lasts unless renewed; it is renewed
// every third of it, so a host must miss two renewals to be taken for lost.
const DefaultTTL = 15 * time.Second

// Leases is the store's side of the leases.
type Leases interface {
	RenewLease(ctx context.Context, hostID string, ttl time.Duration) error
	DropLease(ctx context.Context, hostID string) error
}

// Handlers are what this host does with what the others say.
type Handlers struct {
	// Config applies another host's configuration change from the store.
	Config func(ctx context.Context, ev control.Event) error
	// Resync reapplies every piece of configuration, after notifications
	// may have been missed (the listening connection was lost).
	Resync func(ctx context.Context) error
	// Kill kills an execution this host runs.
	Kill func(ctx context.Context, pid int64) error
	// Lost finishes the executions (and expires the approvals) of hosts
	// whose lease ran out.
	Lost func(ctx context.Context) (int64, error)
	// Decided wakes the call waiting here on an approval decided elsewhere.
	Decided func(ctx context.Context, id string) error
}

// Options tune a Cluster.
type Options struct {
	TTL time.Duration // 0: DefaultTTL
}

// message is what travels on the channel.
type message struct {
	Type  string        `json:"type"` // "config", "kill" or "decided"
	From  string        `json:"from"`
	Event control.Event `json:"event,omitzero"`
	Host  string        `json:"host,omitempty"` // kill: the runner
	PID   int64         `json:"pid,omitempty"`
	ID    string        `json:"id,omitempty"` // decided: the approval
}

// Cluster is this host's membership.
type Cluster struct {
	log     *slog.Logger
	url     string
	host    string
	ttl     time.Duration
	leases  Leases
	channel string

	mu       sync.Mutex
	handlers Handlers
	started  bool      // handlers are set
	notify   *pgx.Conn // NOTIFY goes on its own connection, serialised by mu
	// first is the listening connection opened by New, so what other hosts
	// announce while this one loads its configuration waits on it until
	// Start reads it.
	first *pgx.Conn

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New joins hostID to the hosts on the database at url: it takes the lease
// at once (so a host is never without one while it runs anything) and
// returns; Start begins renewing and listening.
func New(ctx context.Context, log *slog.Logger, url, hostID string, leases Leases, o Options) (*Cluster, error) {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect: %w", err)
	}
	// Channels are per database, while hosts sharing state share a schema:
	// the channel is named for the schema, so separate installations in
	// one database (tests among them) do not hear each other.
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("cluster: current schema: %w", err)
	}
	sum := sha256.Sum256([]byte(schema))
	c := &Cluster{log: log, url: url, host: hostID, ttl: o.TTL, leases: leases, notify: conn,
		channel: "cyrnel_" + hex.EncodeToString(sum[:8])}
	if c.first, err = c.subscribe(ctx); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	if err := leases.RenewLease(ctx, hostID, o.TTL); err != nil {
		conn.Close(ctx)
		c.first.Close(ctx)
		return nil, err
	}
	// Renewing starts now: loading the configuration (an environment's
	// interpreters) may take longer than the lease lasts.
	rctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go func() { defer c.wg.Done(); c.renew(rctx) }()
	return c, nil
}

// Start handles what the other hosts say, and finishes lost hosts'
// executions at each renewal, until Stop.
func (c *Cluster) Start(h Handlers) {
	c.mu.Lock()
	c.handlers = h
	c.started = true
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	stopRenew := c.cancel
	c.cancel = func() { cancel(); stopRenew() }
	c.wg.Add(1)
	go func() { defer c.wg.Done(); c.listen(ctx) }()
}

// Stop ends renewing and listening and gives the lease up: the host
// finished its executions before (Shutdown), so there is nothing for the
// others to finish.
func (c *Cluster) Stop(ctx context.Context) error {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	if c.first != nil { // never started
		c.first.Close(ctx)
		c.first = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.leases.DropLease(ctx, c.host)
	return errors.Join(err, c.notify.Close(ctx))
}

func (c *Cluster) renew(ctx context.Context) {
	t := time.NewTicker(c.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.leases.RenewLease(ctx, c.host, c.ttl); err != nil {
			c.log.Warn("renew the lease", "err", err)
			continue
		}
		c.mu.Lock()
		lost, started := c.handlers.Lost, c.started
		c.mu.Unlock()
		if !started {
			continue
		}
		if _, err := lost(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("finish lost hosts' processes", "err", err)
		}
	}
}

// listen holds a connection LISTENing on the channel, reconnecting when it
// is lost; after a reconnection it resyncs, as notifications may have
// been missed meanwhile.
func (c *Cluster) listen(ctx context.Context) {
	first := true
	for ctx.Err() == nil {
		err := c.listenOnce(ctx, !first)
		first = false
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("cluster notifications lost; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// subscribe opens a connection LISTENing on the channel.
func (c *Cluster) subscribe(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+c.channel); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("cluster: listen: %w", err)
	}
	return conn, nil
}

func (c *Cluster) listenOnce(ctx context.Context, resync bool) error {
	conn := c.first
	c.first = nil
	if conn == nil {
		var err error
		if conn, err = c.subscribe(ctx); err != nil {
			return err
		}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if resync {
		if err := c.handlers.Resync(ctx); err != nil {
			c.log.Warn("reload the configuration", "err", err)
		}
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
		c.handle(ctx, msg)
	}
}

func (c *Cluster) handle(ctx context.Context, msg message) {
	switch {
	case msg.Type == "config" && msg.From != c.host:
		if err := c.handlers.Config(ctx, msg.Event); err != nil {
			c.log.Error("apply another host's configuration change", "event", msg.Event.String(), "from", msg.From, "err", err)
		}
	case msg.Type == "decided" && msg.From != c.host:
		if err := c.handlers.Decided(ctx, msg.ID); err != nil {
			c.log.Warn("relayed approval decision", "approval", msg.ID, "err", err)
		}
	case msg.Type == "kill" && msg.Host == c.host:
		// Its own goroutine: a kill waits for the execution, and
		// notifications must keep flowing meanwhile.
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if err := c.handlers.Kill(ctx, msg.PID); err != nil {
				c.log.Info("relayed kill", "pid", msg.PID, "from", msg.From, "err", err)
			}
		}()
	}
}

// publish sends msg to every host (this one included, which ignores it).
func (c *Cluster) publish(ctx context.Context, msg message) error {
	msg.From = c.host
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.notify.IsClosed() {
		if c.notify, err = pgx.Connect(ctx, c.url); err != nil {
			return fmt.Errorf("cluster: connect: %w", err)
		}
	}
	if _, err := c.notify.Exec(ctx, "SELECT pg_notify($1, $2)", c.channel, string(b)); err != nil {
		return fmt.Errorf("cluster: notify: %w", err)
	}
	return nil
}

// Notify tells the other hosts of a stored configuration change
// (control.Notifier). A host that misses it catches up at its next resync.
func (c *Cluster) Notify(ctx context.Context, ev control.Event) {
	if err := c.publish(ctx, message{Type: "config", Event: ev}); err != nil {
		c.log.Error("tell the other hosts of a configuration change", "event", ev.String(), "err", err)
	}
}

// Kill asks hostID to kill pid (process.Relay).
func (c *Cluster) Kill(ctx context.Context, hostID string, pid int64) error {
	return c.publish(ctx, message{Type: "kill", Host: hostID, PID: pid})
}

// Decided tells the other hosts that approval id was decided
// (approval.Relay).
func (c *Cluster) Decided(ctx context.Context, id string) error {
	return c.publish(ctx, message{Type: "decided", ID: id})
}
