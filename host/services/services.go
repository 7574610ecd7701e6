// Package services keeps the services adapters built from descriptions and
// their tools: import, refresh, enable/disable, config and sealed secrets,
// and the tool calls themselves, validated against each tool's input schema
// before an adapter sees them.
package services

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/adapters"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/store"
)

// Errors the API maps to statuses.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrUnavailable: the service or tool exists but is not callable.
	ErrUnavailable = errors.New("not callable")
	// ErrAdapter wraps failures of the adapter's call (transport, timeout).
	ErrAdapter = errors.New("tool call failed")
)

// Sealer seals secrets at rest.
type Sealer interface {
	Seal(v map[string]any) ([]byte, error)
	Open(sealed []byte) (map[string]any, error)
}

// Store is what the manager needs from storage.
type Store interface {
	ListServices(ctx context.Context) ([]store.Service, error)
	GetService(ctx context.Context, id string) (*store.Service, error)
	InsertService(ctx context.Context, svc *store.Service, tools []store.Tool) error
	PutService(ctx context.Context, svc *store.Service, tools []store.Tool) error
	UpdateService(ctx context.Context, svc *store.Service, columns ...string) error
	DeleteService(ctx context.Context, id string) error
	ListTools(ctx context.Context, f store.ToolFilter) ([]store.Tool, error)
	GetTool(ctx context.Context, serviceID, id string) (*store.Tool, error)
	SetToolEnabled(ctx context.Context, serviceID, id string, enabled bool) error
	SearchTools(ctx context.Context, f store.SearchFilter) ([]store.ScoredTool, error)
}

// Manager owns services and tools. Every change to them goes through the
// control plane (one at a time, all or nothing); tool calls only read.
type Manager struct {
	log      *slog.Logger
	st       Store
	box      Sealer
	plane    *control.Plane
	adapters map[string]adapters.Adapter
	compiler *schema.Compiler
	now      func() time.Time

	mu   sync.RWMutex
	live map[string]*liveService // what tool calls need, without the database

	stopOnce sync.Once
}

type liveService struct {
	adapter string
	enabled bool
	tools   map[string]*liveTool
}

type liveTool struct {
	enabled bool
	mu      sync.Mutex
	schema  *schema.Schema // compiled on first use; failures are not kept
}

// Options are what a manager works with besides its parts.
type Options struct {
	// Now is the clock services are stamped by (nil: time.Now).
	Now func() time.Time
}

// New returns a manager of services built by the given adapters (by id),
// changed through plane.
func New(log *slog.Logger, st Store, box Sealer, plane *control.Plane, byID map[string]adapters.Adapter, opts Options) *Manager {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Manager{log: log, st: st, box: box, plane: plane, adapters: byID, compiler: schema.NewCompiler(4096), live: map[string]*liveService{}, now: opts.Now}
}

// Start sets the adapters up and loads every stored service, the way a
// change made by another host is loaded (Reload).
func (m *Manager) Start(ctx context.Context) error {
	for id, a := range m.adapters {
		if err := a.Setup(ctx); err != nil {
			return fmt.Errorf("set up adapter %s: %w", id, err)
		}
	}
	svcs, err := m.st.ListServices(ctx)
	if err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	for i := range svcs {
		if err := m.Reload(ctx, control.Event{Kind: control.KindService, ID: svcs[i].ID}); err != nil {
			// One broken service must not keep the host down.
			m.log.Error("service not loaded", "service", svcs[i].ID, "err", err)
		}
	}
	return nil
}

// Stop takes no more changes (once the one under way has ended) and tears
// the adapters down. A second Stop does nothing.
func (m *Manager) Stop(ctx context.Context) error {
	err := m.plane.Stop(ctx)
	m.stopOnce.Do(func() {
		for id, a := range m.adapters {
			if terr := a.Teardown(ctx); terr != nil {
				err = errors.Join(err, fmt.Errorf("tear adapter %s down: %w", id, terr))
			}
		}
	})
	return err
}

// Reload applies the stored state of one service (a change another host
// made, or start-up): hydrated as stored, forgotten when gone.
func (m *Manager) Reload(ctx context.Context, ev control.Event) error {
	if ev.Kind != control.KindService {
		return nil
	}
	c := m.change(ev.ID, nil, "", func(_ context.Context, prev *stored) (*stored, func(context.Context) error, error) {
		return prev, nil, nil
	})
	c.Persist = nil // it is what is stored
	return m.plane.Apply(ctx, c)
}

// Adapters lists the adapters' module infos.
func (m *Manager) Adapters() []module.Info {
	out := make([]module.Info, 0, len(m.adapters))
	for _, a := range m.adapters {
		out = append(out, a.Info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// stored is a service as stored: its row and its tools (with their adapter
// domains). A nil svc is no service.
type stored struct {
	svc   *store.Service
	tools []store.Tool
}

// load reads service id as stored.
func (m *Manager) load(ctx context.Context, id string) (*stored, error) {
	svc, err := m.st.GetService(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return &stored{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", id, err)
	}
	tools, err := m.st.ListTools(ctx, store.ToolFilter{ServiceID: id, Schemas: true})
	if err != nil {
		return nil, fmt.Errorf("service %s: tools: %w", id, err)
	}
	return &stored{svc: svc, tools: tools}, nil
}

// editFunc validates a change against the service as stored (prev.svc nil:
// none) and returns the service as it will be (nil: deleted; the same prev:
// unchanged) and how to store it (nil: nothing to store).
type editFunc func(ctx context.Context, prev *stored) (next *stored, persist func(context.Context) error, err error)

// change is a change to one service. Build hands the adapter the next
// state (an adapter replaces a service's state only once it has read the
// new one, so a failure leaves it as it was); Swap makes tool calls see it;
// Unswap puts the previous state back in both; Commit makes the adapter
// forget a deleted service. A state the adapter refuses is a FieldError on
// field (when not empty: adapters read secrets without judging them, so
// their errors are about config or domain and quote no secret).
func (m *Manager) change(id string, cfg map[string]any, field string, edit editFunc) control.Change {
	var prev, next *stored
	var prevLive, nextLive *liveService
	c := control.Change{Event: control.Event{Kind: control.KindService, ID: id}, Config: cfg}
	var persist func(context.Context) error
	c.Validate = func(ctx context.Context) error {
		var err error
		if prev, err = m.load(ctx, id); err != nil {
			return err
		}
		next, persist, err = edit(ctx, prev)
		return err
	}
	c.Build = func(ctx context.Context) error {
		if next == nil || next.svc == nil {
			return nil
		}
		var err error
		if nextLive, err = m.hydrate(ctx, next); err != nil {
			if field == "" {
				return err
			}
			return &schema.FieldError{Field: field, Message: err.Error()}
		}
		return nil
	}
	c.Swap = func() {
		m.mu.Lock()
		prevLive = m.live[id]
		if nextLive != nil {
			m.live[id] = nextLive
		} else {
			delete(m.live, id)
		}
		m.mu.Unlock()
	}
	c.Unswap = func() {
		m.mu.Lock()
		if prevLive != nil {
			m.live[id] = prevLive
		} else {
			delete(m.live, id)
		}
		m.mu.Unlock()
		ctx := context.Background()
		switch {
		case prev.svc != nil:
			if _, err := m.hydrate(ctx, prev); err != nil {
				m.log.Error("restore the adapter's state of a service", "service", id, "err", err)
			}
		case next != nil && next.svc != nil:
			m.forget(ctx, next.svc.Adapter, id)
		}
	}
	c.Commit = func(ctx context.Context) {
		if (next == nil || next.svc == nil) && prevLive != nil {
			m.forget(ctx, prevLive.adapter, id)
		}
	}
	// persist is set by Validate, which Apply runs first.
	c.Persist = func(ctx context.Context) error {
		if persist == nil {
			return nil
		}
		return persist(ctx)
	}
	return c
}

// forget drops a service from its adapter.
func (m *Manager) forget(ctx context.Context, adapterID, id string) {
	if a, ok := m.adapters[adapterID]; ok {
		if err := a.Forget(ctx, id); err != nil {
			m.log.Warn("adapter forget failed", "service", id, "err", err)
		}
	}
}

// hydrate hands the adapter a service's state and returns what tool calls
// need of it.
func (m *Manager) hydrate(ctx context.Context, s *stored) (*liveService, error) {
	a, ok := m.adapters[s.svc.Adapter]
	if !ok {
		return nil, fmt.Errorf("service %s: adapter %q is not available", s.svc.ID, s.svc.Adapter)
	}
	sec, err := m.box.Open(s.svc.Secrets)
	if err != nil {
		return nil, fmt.Errorf("service %s: open secrets: %w", s.svc.ID, err)
	}
	st := adapters.ServiceState{ID: s.svc.ID, AdapterDomain: s.svc.AdapterDomain, Tools: map[string]json.RawMessage{}, Config: orEmpty(s.svc.Config), Secrets: sec}
	live := &liveService{adapter: s.svc.Adapter, enabled: s.svc.Enabled, tools: map[string]*liveTool{}}
	for _, t := range s.tools {
		st.Tools[t.ID] = t.AdapterDomain
		live.tools[t.ID] = &liveTool{enabled: t.Enabled}
	}
	if err := a.Hydrate(ctx, st); err != nil {
		return nil, fmt.Errorf("hydrate service %s: %w", s.svc.ID, err)
	}
	return live, nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// idPattern: a service id is an attribute in Python and a key in TypeScript.
var idPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// CreateInput is a new service.
type CreateInput struct {
	ID      string
	Adapter string
	Source  adapters.Source
	Config  map[string]any
	Secrets map[string]any
}

// Create imports a service. It is enabled at once when its config and
// secrets validate (given or empty); given ones that do not validate are an
// error.
func (m *Manager) Create(ctx context.Context, in CreateInput) (*Service, error) {
	err := m.plane.Apply(ctx, recorded("service.create", in.ID, createDetail(in), m.change(in.ID, in.Config, "config", func(ctx context.Context, prev *stored) (*stored, func(context.Context) error, error) {
		if !idPattern.MatchString(in.ID) || module.Reserved(in.ID) {
			return nil, nil, &schema.FieldError{Field: "id", Message: "must be an identifier (letters, digits, _; not starting with a digit; at most 64; not a Python or TypeScript reserved word)"}
		}
		a, ok := m.adapters[in.Adapter]
		if !ok {
			return nil, nil, &schema.FieldError{Field: "adapter", Message: fmt.Sprintf("unknown adapter %q", in.Adapter)}
		}
		if (in.Source.URL == "") == (in.Source.Content == "") {
			return nil, nil, &schema.FieldError{Field: "source", Message: "give exactly one of url or content"}
		}
		if strings.ContainsRune(in.Source.Content, 0) || strings.ContainsRune(in.Source.URL, 0) {
			return nil, nil, &schema.FieldError{Field: "source", Message: "contains a NUL character"}
		}
		if prev.svc != nil {
			return nil, nil, fmt.Errorf("service %s: %w", in.ID, ErrExists)
		}
		src := in.Source
		src.Config = in.Config // the adapter may fetch the source by the service's rules
		def, err := a.Definition(ctx, src)
		if err != nil {
			return nil, nil, &schema.FieldError{Field: "source", Message: err.Error()}
		}
		enabled := true
		if err := m.check(def.ConfigSchema, in.Config, "config"); err != nil {
			if in.Config != nil {
				return nil, nil, err
			}
			enabled = false
		}
		if err := m.check(def.SecretsSchema, in.Secrets, "secrets"); err != nil {
			if in.Secrets != nil {
				return nil, nil, schema.Redact(err)
			}
			enabled = false
		}
		sealed, err := m.box.Seal(orEmpty(in.Secrets))
		if err != nil {
			return nil, nil, fmt.Errorf("service %s: seal secrets: %w", in.ID, err)
		}
		source, _ := json.Marshal(in.Source)
		now := m.now().UTC()
		next := &stored{svc: &store.Service{
			ID: in.ID, Adapter: in.Adapter, Name: noNUL(def.Name), Description: noNUL(def.Description), Source: source, Hash: hash(def),
			ConfigSchema: def.ConfigSchema, SecretsSchema: def.SecretsSchema, AdapterDomain: def.AdapterDomain,
			Config: in.Config, Secrets: sealed, Enabled: enabled, CreatedAt: now, UpdatedAt: now,
		}, tools: toolRows(in.ID, def.Tools, nil)}
		return next, func(ctx context.Context) error {
			if err := m.st.InsertService(ctx, next.svc, next.tools); err != nil {
				if errors.Is(err, store.ErrExists) {
					return fmt.Errorf("service %s: %w", in.ID, ErrExists)
				}
				return err
			}
			m.log.Info("service imported", "service", in.ID, "adapter", in.Adapter, "tools", len(next.tools), "enabled", enabled)
			return nil
		}, nil
	})))
	if err != nil {
		return nil, err
	}
	return m.Get(ctx, in.ID)
}

// check validates v (nil: an empty object) against raw, naming each path.
func (m *Manager) check(raw json.RawMessage, v map[string]any, field string) error {
	if len(raw) == 0 {
		return nil
	}
	s, err := m.compiler.Compile(raw)
	if err != nil {
		return fmt.Errorf("%s schema: %w", field, err)
	}
	if err := s.Validate(orEmpty(v)); err != nil {
		var ve *schema.ValidationError
		if errors.As(err, &ve) {
			return &schema.FieldError{Field: field, Message: "does not match its schema", Problems: ve.Problems}
		}
		return &schema.FieldError{Field: field, Message: err.Error()}
	}
	return nil
}

func hash(def adapters.ServiceDefinition) string {
	b, _ := json.Marshal(def)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// toolRows makes tool rows; enabled carries flags over from a previous
// definition (new tools are enabled).
func toolRows(serviceID string, defs []adapters.ToolDefinition, enabled map[string]bool) []store.Tool {
	rows := make([]store.Tool, 0, len(defs))
	for _, t := range defs {
		on, known := enabled[t.ID]
		rows = append(rows, store.Tool{
			ServiceID: serviceID, ID: t.ID, Name: noNUL(t.Name), Description: noNUL(t.Description),
			InputSchema: nonNull(t.InputSchema), OutputSchema: nonNull(t.OutputSchema), AdapterDomain: nonNull(t.AdapterDomain),
			Enabled: on || !known,
		})
	}
	return rows
}

func nonNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("{}")
	}
	return raw
}

// noNUL drops NUL characters, which documents may carry in their text and
// PostgreSQL text columns refuse.
func noNUL(s string) string { return strings.ReplaceAll(s, "\x00", "") }
