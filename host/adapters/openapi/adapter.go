// Package openapi is the built-in "openapi" adapter: it turns OpenAPI 3.0 and
// 3.1 documents and Swagger 2.0 ones (JSON or YAML, from a URL or inline)
// into tools, one per operation, and invokes them as HTTP requests.
//
// Documents are read with kin-openapi; Swagger 2.0 is converted to 3.0 first,
// so one code path serves all three versions. Tool input schemas are flat
// JSON Schema 2020-12 objects (one property per parameter plus "body"), with
// the document's components as "$defs". What the adapter needs to make a
// request is kept in the adapter domains (see domain.go), which the host
// stores and hands back through Hydrate. docs/openapi-adapter.md explains the
// choices.
package openapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/adapters"
	"github.com/cyrnel/cyrnel/host/egress"
)

// ID is the module id of the adapter.
const ID = "openapi"

// Version is the adapter's version.
const Version = "1.0.0"

const (
	defaultTimeoutMs        = 30000
	maxTimeoutMs            = 3_600_000 // an hour: beyond any execution's sensible wait
	defaultMaxDocumentBytes = 64 << 20
	defaultMaxResponseBytes = 10 << 20
	defaultFetchTimeout     = 60 * time.Second
)

// Options tune the adapter; the zero value gives the defaults.
type Options struct {
	// Guard refuses connections to the host's own API, and to non-public
	// addresses unless a service's config sets allowPrivateNetwork. Default:
	// a guard that knows no listen address.
	Guard *egress.Guard
	// MaxDocumentBytes bounds a fetched document (default 64 MiB).
	MaxDocumentBytes int64
	// FetchTimeout bounds fetching a document (default 60 s).
	FetchTimeout time.Duration
	// MaxResponseBytes bounds a tool call's response body (default 10 MiB);
	// a larger one fails the call.
	MaxResponseBytes int64
	// WrapTransport, when set, wraps the transport of every upstream
	// request (the host's tracing: a client span, traceparent sent).
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// Adapter is the openapi adapter. It is safe for concurrent use.
type Adapter struct {
	opts Options
	// public reaches public addresses only; private also private ones
	// (services with allowPrivateNetwork). Neither reaches the host itself.
	public, private *http.Client

	mu       sync.RWMutex
	services map[string]*service
}

var _ adapters.Adapter = (*Adapter)(nil)

// New returns an adapter with opts (zero fields take their defaults).
func New(opts Options) *Adapter {
	if opts.MaxDocumentBytes <= 0 {
		opts.MaxDocumentBytes = defaultMaxDocumentBytes
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = defaultFetchTimeout
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = defaultMaxResponseBytes
	}
	if opts.Guard == nil {
		opts.Guard = &egress.Guard{}
	}
	return &Adapter{opts: opts, public: guardedClient(opts, false), private: guardedClient(opts, true), services: map[string]*service{}}
}

// The connections a service's calls keep alive: bounded per upstream and in
// all, and closed after a while unused, so an upstream called once holds
// nothing for long.
const (
	maxIdlePerHost = 16
	maxIdle        = 100
	idleTimeout    = 90 * time.Second
)

// guardedClient is net/http's client over a Transport that dials through
// the guard. It knows no proxies (HTTP_PROXY and friends): through a proxy
// the guard would judge the proxy's address, not the upstream's. Redirects
// are followed by the client, so every hop is dialled through the guard.
// Response heads are bounded by the Transport's default (10 MiB), bodies by
// Invoke (MaxResponseBytes); each call's context bounds the whole exchange.
// opts.WrapTransport, when set, wraps it (tracing).
func guardedClient(opts Options, allowPrivate bool) *http.Client {
	var rt http.RoundTripper = &http.Transport{
		DialContext:           opts.Guard.Dialer(allowPrivate).DialContext,
		ForceAttemptHTTP2:     true, // a custom dialer turns HTTP/2 off unless asked for
		MaxIdleConns:          maxIdle,
		MaxIdleConnsPerHost:   maxIdlePerHost,
		IdleConnTimeout:       idleTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if opts.WrapTransport != nil {
		rt = opts.WrapTransport(rt)
	}
	return &http.Client{Transport: rt}
}

// client is the client a service's calls use.
func (a *Adapter) client(allowPrivate bool) *http.Client {
	if allowPrivate {
		return a.private
	}
	return a.public
}

// moduleSchema is the config and secrets schema of the module itself: it has
// neither (services have their own).
var moduleSchema = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)

// Info describes the module.
func (a *Adapter) Info() module.Info {
	return module.Info{
		ID:            ID,
		Type:          module.TypeAdapter,
		Name:          "OpenAPI",
		Version:       Version,
		Description:   "Turns OpenAPI 3.0/3.1 and Swagger 2.0 documents into tools, one per operation, and calls them over HTTP.",
		ConfigSchema:  moduleSchema,
		SecretsSchema: moduleSchema,
	}
}

// Setup has nothing to prepare.
func (a *Adapter) Setup(context.Context) error { return nil }

// Teardown drops every service and the idle connections.
func (a *Adapter) Teardown(context.Context) error {
	a.mu.Lock()
	a.services = map[string]*service{}
	a.mu.Unlock()
	a.public.CloseIdleConnections()
	a.private.CloseIdleConnections()
	return nil
}

// Definition reads the document of src (its Content, else fetched from its
// URL) and describes the service. With both, Content is the document and URL
// says where it came from (relative server URLs resolve against it).
func (a *Adapter) Definition(ctx context.Context, src adapters.Source) (adapters.ServiceDefinition, error) {
	data := []byte(src.Content)
	if len(data) == 0 {
		if src.URL == "" {
			return adapters.ServiceDefinition{}, errors.New("openapi: source has neither url nor content")
		}
		var err error
		if data, err = a.fetch(ctx, src.URL, allowPrivate(src.Config)); err != nil {
			return adapters.ServiceDefinition{}, fmt.Errorf("openapi: %w", err)
		}
	}
	doc, err := parseDocument(ctx, data)
	if err != nil {
		return adapters.ServiceDefinition{}, fmt.Errorf("openapi: %w", err)
	}
	def, err := define(ctx, doc, src.URL)
	if err != nil {
		return adapters.ServiceDefinition{}, fmt.Errorf("openapi: %w", err)
	}
	return def, nil
}

// service is what Invoke needs of one hydrated service.
type service struct {
	domain    serviceDomain
	tools     map[string]*toolDomain
	serverURL string
	variables map[string]string
	timeout   time.Duration
	secrets   map[string]any
	// allowPrivate lets calls reach private and loopback addresses.
	allowPrivate bool
}

// Hydrate replaces the state of one service.
func (a *Adapter) Hydrate(_ context.Context, st adapters.ServiceState) error {
	// The secrets map is copied: the host may reuse its own.
	svc := &service{tools: make(map[string]*toolDomain, len(st.Tools)), secrets: maps.Clone(st.Secrets)}
	if len(st.AdapterDomain) > 0 {
		if err := json.Unmarshal(st.AdapterDomain, &svc.domain); err != nil {
			return fmt.Errorf("openapi: service %q: adapter domain: %w", st.ID, err)
		}
	}
	for id, raw := range st.Tools {
		td := &toolDomain{}
		if err := json.Unmarshal(raw, td); err != nil {
			return fmt.Errorf("openapi: service %q: tool %q: adapter domain: %w", st.ID, id, err)
		}
		svc.tools[id] = td
	}
	if err := svc.configure(st.Config); err != nil {
		return fmt.Errorf("openapi: service %q: config: %w", st.ID, err)
	}
	a.mu.Lock()
	a.services[st.ID] = svc
	a.mu.Unlock()
	return nil
}

// configure reads the service config (already validated by the host against
// the config schema, but read defensively).
func (s *service) configure(cfg map[string]any) error {
	s.timeout = defaultTimeoutMs * time.Millisecond
	if v, ok := cfg["serverUrl"]; ok && v != nil {
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("serverUrl: want a string, got %T", v)
		}
		s.serverURL = str
	}
	if v, ok := cfg["variables"]; ok && v != nil {
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("variables: want an object, got %T", v)
		}
		s.variables = make(map[string]string, len(m))
		for k, x := range m {
			s.variables[k] = scalar(x)
		}
	}
	s.allowPrivate = allowPrivate(cfg)
	if v, ok := cfg["timeoutMs"]; ok && v != nil {
		ms, err := toFloat(v)
		if err != nil || ms < 1 || ms > maxTimeoutMs {
			return fmt.Errorf("timeoutMs: want 1 to %d milliseconds, got %v", maxTimeoutMs, v)
		}
		s.timeout = time.Duration(ms * float64(time.Millisecond))
	}
	return nil
}

// allowPrivate reads allowPrivateNetwork from a service config.
func allowPrivate(cfg map[string]any) bool {
	b, _ := cfg["allowPrivateNetwork"].(bool)
	return b
}

func toFloat(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case json.Number:
		return x.Float64()
	case int:
		return float64(x), nil
	case int64:
		return float64(x), nil
	}
	return 0, fmt.Errorf("not a number: %T", v)
}

// Forget drops a service's state.
func (a *Adapter) Forget(_ context.Context, serviceID string) error {
	a.mu.Lock()
	delete(a.services, serviceID)
	a.mu.Unlock()
	return nil
}

func (a *Adapter) service(id string) *service {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.services[id]
}
