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
	"github.com/cyrnel/cyrnel/host/adapter"
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

// Manager owns services and tools.
type Manager struct {
	log      *slog.Logger
	st       *store.Store
	box      Sealer
	adapters map[string]adapter.Adapter
	compiler *schema.Compiler

	// writes serialises changes to services (imports, refreshes, config,
	// deletes): admin operations, rare, and racing each other they could
	// bring back a deleted service.
	writes sync.Mutex
	mu     sync.RWMutex
	live   map[string]*liveService // what tool calls need, without the database
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

// New returns a manager of services built by the given adapters (by id).
func New(log *slog.Logger, st *store.Store, box Sealer, adapters map[string]adapter.Adapter) *Manager {
	return &Manager{log: log, st: st, box: box, adapters: adapters, compiler: schema.NewCompiler(4096), live: map[string]*liveService{}}
}

// Start sets the adapters up and hydrates every stored service.
func (m *Manager) Start(ctx context.Context) error {
	for id, a := range m.adapters {
		if err := a.Setup(ctx); err != nil {
			return fmt.Errorf("set up adapter %s: %w", id, err)
		}
	}
	svcs, err := m.st.ListServices(ctx)
	if err != nil {
		return err
	}
	for i := range svcs {
		svc, err := m.st.GetService(ctx, svcs[i].ID)
		if err != nil {
			return err
		}
		if err := m.hydrate(ctx, svc); err != nil {
			// One broken service must not keep the host down.
			m.log.Error("service not hydrated", "service", svc.ID, "err", err)
		}
	}
	return nil
}

// Stop tears the adapters down.
func (m *Manager) Stop(ctx context.Context) {
	for id, a := range m.adapters {
		if err := a.Teardown(ctx); err != nil {
			m.log.Warn("adapter teardown failed", "adapter", id, "err", err)
		}
	}
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

// hydrate hands the adapter the service's state and refreshes the cache.
func (m *Manager) hydrate(ctx context.Context, svc *store.Service) error {
	a, ok := m.adapters[svc.Adapter]
	if !ok {
		return fmt.Errorf("service %s: adapter %q is not available", svc.ID, svc.Adapter)
	}
	tools, err := m.st.ListTools(ctx, store.ToolFilter{ServiceID: svc.ID, Schemas: true})
	if err != nil {
		return err
	}
	sec, err := m.box.Open(svc.Secrets)
	if err != nil {
		return fmt.Errorf("service %s: %w", svc.ID, err)
	}
	st := adapter.ServiceState{ID: svc.ID, AdapterDomain: svc.AdapterDomain, Tools: map[string]json.RawMessage{}, Config: orEmpty(svc.Config), Secrets: sec}
	live := &liveService{adapter: svc.Adapter, enabled: svc.Enabled, tools: map[string]*liveTool{}}
	for _, t := range tools {
		st.Tools[t.ID] = t.AdapterDomain
		live.tools[t.ID] = &liveTool{enabled: t.Enabled}
	}
	if err := a.Hydrate(ctx, st); err != nil {
		return fmt.Errorf("hydrate service %s: %w", svc.ID, err)
	}
	m.mu.Lock()
	m.live[svc.ID] = live
	m.mu.Unlock()
	return nil
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
	Source  adapter.Source
	Config  map[string]any
	Secrets map[string]any
}

// Create imports a service. It is enabled at once when its config and
// secrets validate (given or empty); given ones that do not validate are an
// error.
func (m *Manager) Create(ctx context.Context, in CreateInput) (*Service, error) {
	m.writes.Lock()
	defer m.writes.Unlock()
	if !idPattern.MatchString(in.ID) || reserved[in.ID] {
		return nil, &schema.FieldError{Field: "body.id", Message: "must be an identifier (letters, digits, _; not starting with a digit; at most 64; not a Python or TypeScript keyword)"}
	}
	a, ok := m.adapters[in.Adapter]
	if !ok {
		return nil, &schema.FieldError{Field: "body.adapter", Message: fmt.Sprintf("unknown adapter %q", in.Adapter)}
	}
	if (in.Source.URL == "") == (in.Source.Content == "") {
		return nil, &schema.FieldError{Field: "body.source", Message: "give exactly one of url or content"}
	}
	if strings.ContainsRune(in.Source.Content, 0) || strings.ContainsRune(in.Source.URL, 0) {
		return nil, &schema.FieldError{Field: "body.source", Message: "contains a NUL character"}
	}
	if _, err := m.st.GetService(ctx, in.ID); err == nil {
		return nil, fmt.Errorf("service %s: %w", in.ID, ErrExists)
	}
	src := in.Source
	src.Config = in.Config // the adapter may fetch the source by the service's rules
	def, err := a.Definition(ctx, src)
	if err != nil {
		return nil, &schema.FieldError{Field: "body.source", Message: err.Error()}
	}
	enabled := true
	if err := m.check(def.ConfigSchema, in.Config, "body.config"); err != nil {
		if in.Config != nil {
			return nil, err
		}
		enabled = false
	}
	if err := m.check(def.SecretsSchema, in.Secrets, "body.secrets"); err != nil {
		if in.Secrets != nil {
			return nil, schema.Redact(err)
		}
		enabled = false
	}
	sealed, err := m.box.Seal(orEmpty(in.Secrets))
	if err != nil {
		return nil, err
	}
	stored, _ := json.Marshal(in.Source)
	now := time.Now().UTC()
	svc := &store.Service{
		ID: in.ID, Adapter: in.Adapter, Name: noNUL(def.Name), Description: noNUL(def.Description), Source: stored, Hash: hash(def),
		ConfigSchema: def.ConfigSchema, SecretsSchema: def.SecretsSchema, AdapterDomain: def.AdapterDomain,
		Config: in.Config, Secrets: sealed, Enabled: enabled, CreatedAt: now, UpdatedAt: now,
	}
	tools := toolRows(in.ID, def.Tools, nil)
	if err := m.st.InsertService(ctx, svc, tools); err != nil {
		if errors.Is(err, store.ErrExists) {
			return nil, fmt.Errorf("service %s: %w", in.ID, ErrExists)
		}
		return nil, err
	}
	if err := m.hydrate(ctx, svc); err != nil {
		return nil, err
	}
	m.log.Info("service imported", "service", in.ID, "adapter", in.Adapter, "tools", len(tools), "enabled", enabled)
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

func hash(def adapter.ServiceDefinition) string {
	b, _ := json.Marshal(def)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// toolRows makes tool rows; enabled carries flags over from a previous
// definition (new tools are enabled).
func toolRows(serviceID string, defs []adapter.ToolDefinition, enabled map[string]bool) []store.Tool {
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

// reserved are words that cannot name a service: Python keywords and
// TypeScript/JavaScript reserved words.
var reserved = map[string]bool{}

func init() {
	for _, w := range []string{
		"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
		"elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
		"not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
		"case", "catch", "const", "debugger", "default", "delete", "do", "enum", "export", "extends", "false",
		"function", "implements", "instanceof", "interface", "let", "new", "null", "package", "private", "protected",
		"public", "static", "super", "switch", "this", "throw", "true", "typeof", "var", "void",
	} {
		reserved[w] = true
	}
}

// noNUL drops NUL characters, which documents may carry in their text and
// PostgreSQL text columns refuse.
func noNUL(s string) string { return strings.ReplaceAll(s, "\x00", "") }
