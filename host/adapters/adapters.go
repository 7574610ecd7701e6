// Package adapters is the Go form of the cyrnel adapter contract: an adapter
// turns a service description (an OpenAPI document, …) into tools and invokes
// them. It depends only on the standard library and the shared module
// vocabulary.
package adapters

import (
	"context"
	"encoding/json"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Source is where a service description comes from: a URL or inline content.
type Source struct {
	URL     string `json:"url,omitempty"`
	Content string `json:"content,omitempty"`
	// Config is the service's config, not stored with the source: how a
	// document is fetched can depend on it (the openapi adapter's
	// allowPrivateNetwork).
	Config map[string]any `json:"-"`
}

// ToolDefinition is one tool of a service.
type ToolDefinition struct {
	// ID is a valid identifier in both Python and TypeScript, unique within
	// its service.
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	InputSchema   json.RawMessage `json:"inputSchema"`
	OutputSchema  json.RawMessage `json:"outputSchema"`
	AdapterDomain json.RawMessage `json:"adapterDomain"`
}

// ServiceDefinition is what an adapter makes of a source.
type ServiceDefinition struct {
	Name          string           `json:"name"`
	Description   string           `json:"description"`
	ConfigSchema  json.RawMessage  `json:"configSchema"`
	SecretsSchema json.RawMessage  `json:"secretsSchema"`
	Tools         []ToolDefinition `json:"tools"`
	AdapterDomain json.RawMessage  `json:"adapterDomain"`
}

// ServiceState is the snapshot the host hands to Hydrate: everything the
// adapter needs to serve invocations of one service.
type ServiceState struct {
	ID            string
	AdapterDomain json.RawMessage
	// Tools maps a tool id to its adapter domain.
	Tools   map[string]json.RawMessage
	Config  map[string]any
	Secrets map[string]any // decrypted
}

// Adapter turns service descriptions into tools and invokes them.
type Adapter interface {
	Info() module.Info
	Setup(ctx context.Context) error
	Teardown(ctx context.Context) error
	// Definition reads a source and describes the service it defines.
	Definition(ctx context.Context, src Source) (ServiceDefinition, error)
	// Hydrate refreshes the adapter's internal state for one service.
	Hydrate(ctx context.Context, st ServiceState) error
	// Forget drops a service's state after it is removed.
	Forget(ctx context.Context, serviceID string) error
	// Invoke calls a tool; parameters were already validated by the host.
	Invoke(ctx context.Context, in module.InvokeInput) (any, error)
}
