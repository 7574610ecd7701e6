// Package keys holds the API keys and their roles (DESIGN §13 "Keys and
// roles"): keys are random, stored only as their SHA-256 hash, shown once
// when created, and revoked by deleting their row. The operator's key
// (CYRNEL_API_KEY or the data directory's api-key file) is the bootstrap
// admin key: it lives in the host's configuration, not in the database.
package keys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/store"
)

// BootstrapID is the id of the operator's key.
const BootstrapID = "bootstrap"

// Errors the API maps to statuses.
var (
	ErrNotFound = errors.New("key not found")
	// ErrBootstrap: the operator's key is changed where it is configured,
	// not through the API.
	ErrBootstrap = errors.New("the bootstrap key cannot be revoked through the API: change CYRNEL_API_KEY or the data directory's api-key file and restart")
	// ErrUnknown: no key was given, or it is not one (never was, or was
	// revoked).
	ErrUnknown = errors.New("missing, unknown or revoked API key")
	// ErrExpired: the key is past its expiresAt.
	ErrExpired = errors.New("the API key has expired")
)

// Key is a key without its secret.
type Key struct {
	ID         string
	Name       string
	Roles      []caller.Role
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
}

// CreatedKey is a new key with its secret, which is shown this once.
type CreatedKey struct {
	Key
	Secret string
}

// CreateInput is a new key.
type CreateInput struct {
	Name      string
	Roles     []caller.Role
	ExpiresAt *time.Time
}

// ListInput pages through keys, newest first.
type ListInput struct {
	Before string // id of the last item of the previous page
	Limit  int
}

// Store is what keys need of the database.
type Store interface {
	InsertAPIKey(ctx context.Context, k *store.APIKey) error
	GetAPIKey(ctx context.Context, id string) (*store.APIKey, error)
	APIKeyByHash(ctx context.Context, h []byte) (*store.APIKey, error)
	ListAPIKeys(ctx context.Context, f store.APIKeyFilter) ([]store.APIKey, error)
	DeleteAPIKey(ctx context.Context, id string) (bool, error)
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
}

// Recorder is told of every key created and revoked (GET /changes).
type Recorder interface {
	Record(ctx context.Context, action, target string, detail map[string]any)
}

// Options tune a Manager; zero values take the defaults.
type Options struct {
	// Bootstrap is the operator's key ("": none).
	Bootstrap string
	// BootstrapSince is what the bootstrap key shows as createdAt.
	BootstrapSince time.Time
	// Now is the clock keys' expiry, the cache and lastUsedAt are decided
	// by (nil: time.Now); tests pass one they move.
	Now func() time.Time
	// CacheTTL is how long a key read from the database is trusted
	// without reading it again (default 500 ms): a key revoked on another
	// host is refused here at most this much later.
	CacheTTL time.Duration
	// TouchEvery is how often a key's lastUsedAt is written at most
	// (default 1 minute).
	TouchEvery time.Duration
}

// Manager creates, lists and revokes keys, and authenticates requests.
type Manager struct {
	log  *slog.Logger
	st   Store
	rec  Recorder
	opts Options
	boot [sha256.Size]byte
	// bootUsed is the bootstrap key's last use (unix nanoseconds) on this
	// host: it has no row to record it in.
	bootUsed atomic.Int64

	mu    sync.RWMutex
	cache map[[sha256.Size]byte]*entry

	touches chan touch
	writer  lifecycle.Loop // writes lastUsedAt
}

// entry is a key as read from the database, trusted until until.
type entry struct {
	c       caller.Caller
	expires *time.Time
	until   time.Time
	// touched is when this host last queued a lastUsedAt write for the
	// key (unix nanoseconds), carried over when the entry is read again.
	touched atomic.Int64
}

type touch struct {
	id string
	at time.Time
}

// maxCache bounds the cache; only keys that exist are cached, so it holds
// at most as many entries as there are keys in use.
const maxCache = 10000

// New returns a manager; its writer of lastUsedAt runs from Start to Stop.
func New(log *slog.Logger, st Store, rec Recorder, opts Options) *Manager {
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = 500 * time.Millisecond
	}
	if opts.TouchEvery <= 0 {
		opts.TouchEvery = time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.BootstrapSince.IsZero() {
		opts.BootstrapSince = opts.Now().UTC()
	}
	m := &Manager{log: log, st: st, rec: rec, opts: opts, cache: map[[sha256.Size]byte]*entry{},
		touches: make(chan touch, 256)}
	if opts.Bootstrap != "" {
		m.boot = sha256.Sum256([]byte(opts.Bootstrap))
	}
	return m
}

// Start starts the writer of lastUsedAt.
func (m *Manager) Start(ctx context.Context) error { return m.writer.Start(ctx, m.writeTouches) }

// Stop stops the writer of lastUsedAt once it wrote what is queued.
func (m *Manager) Stop(ctx context.Context) error { return m.writer.Stop(ctx) }

// Authenticate returns the caller a key stands for. A key read from the
// database is cached for CacheTTL, so the warm path is a hash and a map
// lookup, and a revocation anywhere takes effect within CacheTTL.
func (m *Manager) Authenticate(ctx context.Context, key string) (caller.Caller, error) {
	if key == "" {
		return caller.Caller{}, ErrUnknown
	}
	h := sha256.Sum256([]byte(key))
	now := m.opts.Now()
	if m.opts.Bootstrap != "" && subtle.ConstantTimeCompare(h[:], m.boot[:]) == 1 {
		m.bootUsed.Store(now.UnixNano())
		return caller.Caller{KeyID: BootstrapID, Roles: []caller.Role{caller.Admin}}, nil
	}
	m.mu.RLock()
	e := m.cache[h]
	m.mu.RUnlock()
	if e == nil || now.After(e.until) {
		var err error
		if e, err = m.load(ctx, h, e, now); err != nil {
			return caller.Caller{}, err
		}
	}
	if e.expires != nil && !now.Before(*e.expires) {
		return caller.Caller{}, ErrExpired
	}
	m.used(e, now)
	return e.c, nil
}

// load reads the key whose hash is h and caches it; prev is the entry it
// replaces (nil: none).
func (m *Manager) load(ctx context.Context, h [sha256.Size]byte, prev *entry, now time.Time) (*entry, error) {
	row, err := m.st.APIKeyByHash(ctx, h[:])
	if errors.Is(err, store.ErrNotFound) {
		if prev != nil {
			m.mu.Lock()
			delete(m.cache, h)
			m.mu.Unlock()
		}
		return nil, ErrUnknown
	}
	if err != nil {
		return nil, fmt.Errorf("authenticate: %w", err)
	}
	e := &entry{c: callerOf(row), expires: row.ExpiresAt, until: now.Add(m.opts.CacheTTL)}
	if prev != nil {
		e.touched.Store(prev.touched.Load())
	}
	m.mu.Lock()
	if len(m.cache) >= maxCache {
		clear(m.cache)
	}
	m.cache[h] = e
	m.mu.Unlock()
	return e, nil
}

// used queues a lastUsedAt write for the key when none was queued in the
// last TouchEvery: the request itself never waits on a write.
func (m *Manager) used(e *entry, now time.Time) {
	last := e.touched.Load()
	if now.UnixNano()-last < int64(m.opts.TouchEvery) || !e.touched.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	select {
	case m.touches <- touch{e.c.KeyID, now.UTC()}:
	default: // the writer is behind; a later use records it
		e.touched.Store(last)
	}
}

func (m *Manager) writeTouches(ctx context.Context) {
	write := func(t touch) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := m.st.TouchAPIKey(ctx, t.id, t.at); err != nil {
			m.log.Warn("record a key's last use", "key", t.id, "err", err)
		}
	}
	for {
		select {
		case t := <-m.touches:
			write(t)
		case <-ctx.Done():
			for {
				select {
				case t := <-m.touches:
					write(t)
				default:
					return
				}
			}
		}
	}
}

func callerOf(row *store.APIKey) caller.Caller {
	roles := make([]caller.Role, len(row.Roles))
	for i, r := range row.Roles {
		roles[i] = caller.Role(r)
	}
	return caller.Caller{KeyID: row.ID, Roles: roles}
}

func view(row *store.APIKey) Key {
	return Key{ID: row.ID, Name: row.Name, Roles: callerOf(row).Roles, CreatedAt: row.CreatedAt, ExpiresAt: row.ExpiresAt, LastUsedAt: row.LastUsedAt}
}

// bootstrap is the operator's key as listed.
func (m *Manager) bootstrap() Key {
	k := Key{ID: BootstrapID, Name: BootstrapID, Roles: []caller.Role{caller.Admin}, CreatedAt: m.opts.BootstrapSince}
	if n := m.bootUsed.Load(); n != 0 {
		t := time.Unix(0, n).UTC()
		k.LastUsedAt = &t
	}
	return k
}

// MaxName bounds a key's name.
const MaxName = 100

func validate(in CreateInput, now time.Time) error {
	if in.Name == "" || len(in.Name) > MaxName || !utf8.ValidString(in.Name) || strings.ContainsRune(in.Name, 0) {
		return &schema.FieldError{Field: "name", Message: fmt.Sprintf("must be 1 to %d bytes of text without NUL", MaxName)}
	}
	if len(in.Roles) == 0 {
		return &schema.FieldError{Field: "roles", Message: "name at least one role: runner, approver or admin"}
	}
	seen := map[caller.Role]bool{}
	for i, r := range in.Roles {
		if !r.Valid() {
			return &schema.FieldError{Field: fmt.Sprintf("roles[%d]", i), Message: fmt.Sprintf("unknown role %q: want runner, approver or admin", r)}
		}
		if seen[r] {
			return &schema.FieldError{Field: fmt.Sprintf("roles[%d]", i), Message: fmt.Sprintf("role %q is named twice", r)}
		}
		seen[r] = true
	}
	if in.ExpiresAt != nil && !in.ExpiresAt.After(now) {
		return &schema.FieldError{Field: "expiresAt", Message: "must be in the future"}
	}
	return nil
}

// Create makes a key. Its secret is in the answer only; the database holds
// its SHA-256 (the key is 256 random bits, so a plain hash is as strong as
// any slow one, and cheap to check on every request).
func (m *Manager) Create(ctx context.Context, in CreateInput) (*CreatedKey, error) {
	now := m.opts.Now().UTC()
	if err := validate(in, now); err != nil {
		return nil, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("make a key: %w", err)
	}
	secret := "cyk_" + base64.RawURLEncoding.EncodeToString(raw)
	h := sha256.Sum256([]byte(secret))
	roles := make([]string, len(in.Roles))
	for i, r := range in.Roles {
		roles[i] = string(r)
	}
	var expires *time.Time
	if in.ExpiresAt != nil {
		t := in.ExpiresAt.UTC()
		expires = &t
	}
	row := &store.APIKey{ID: newID(now), Name: in.Name, Roles: roles, Hash: h[:], CreatedAt: now, ExpiresAt: expires}
	if err := m.st.InsertAPIKey(ctx, row); err != nil {
		return nil, err
	}
	detail := map[string]any{"name": in.Name, "roles": roles}
	if expires != nil {
		detail["expiresAt"] = expires.Format(time.RFC3339)
	}
	m.record(ctx, "key.create", row.ID, detail)
	return &CreatedKey{Key: view(row), Secret: secret}, nil
}

func newID(t time.Time) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("key_%016x%s", t.UnixNano(), hex.EncodeToString(b[:]))
}

// Get returns one key.
func (m *Manager) Get(ctx context.Context, id string) (*Key, error) {
	if id == BootstrapID {
		k := m.bootstrap()
		return &k, nil
	}
	row, err := m.st.GetAPIKey(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("key %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	k := view(row)
	return &k, nil
}

// List lists keys, newest first, the bootstrap key at the head of the
// first page; more says another page follows.
func (m *Manager) List(ctx context.Context, in ListInput) (items []Key, more bool, err error) {
	limit, before := in.Limit, in.Before
	if before == "" {
		items = append(items, m.bootstrap())
		limit--
	}
	if before == BootstrapID {
		before = ""
	}
	if limit == 0 {
		// The bootstrap key fills the page: ask only whether others follow.
		rows, err := m.st.ListAPIKeys(ctx, store.APIKeyFilter{Limit: 1})
		return items, len(rows) > 0, err
	}
	rows, err := m.st.ListAPIKeys(ctx, store.APIKeyFilter{Before: before, Limit: limit + 1})
	if err != nil {
		return nil, false, err
	}
	if len(rows) > limit {
		rows, more = rows[:limit], true
	}
	for i := range rows {
		items = append(items, view(&rows[i]))
	}
	return items, more, nil
}

// Revoke deletes a key: it is refused at once on this host and within
// CacheTTL on every other.
func (m *Manager) Revoke(ctx context.Context, id string) error {
	if id == BootstrapID {
		return ErrBootstrap
	}
	ok, err := m.st.DeleteAPIKey(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("key %s: %w", id, ErrNotFound)
	}
	m.mu.Lock()
	for h, e := range m.cache {
		if e.c.KeyID == id {
			delete(m.cache, h)
		}
	}
	m.mu.Unlock()
	m.record(ctx, "key.revoke", id, map[string]any{})
	return nil
}

func (m *Manager) record(ctx context.Context, action, target string, detail map[string]any) {
	if m.rec != nil {
		m.rec.Record(ctx, action, target, detail)
	}
}
