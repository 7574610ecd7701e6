package api

import (
	"encoding/json"
	"time"

	"github.com/cyrnel/cyrnel/host/services"
)

// The wire shapes of services and tools, mapped from host/services' plain
// types.

// ToolSummary is a tool as listings show it.
type ToolSummary struct {
	ServiceID   string `json:"serviceId"`
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	Enabled     bool   `json:"enabled"`
}

// Tool is a tool with its input and output schemas.
type Tool struct {
	ToolSummary
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
}

// Service is a service as the API shows it.
type Service struct {
	ID            string          `json:"id"`
	Adapter       string          `json:"adapter"`
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	SourceURL     string          `json:"sourceUrl,omitempty" doc:"Where the description was read from; absent for inline content."`
	Hash          string          `json:"hash" doc:"Hash of the service definition; changes when a refresh changes it."`
	Enabled       bool            `json:"enabled" doc:"Whether its tools are callable."`
	ConfigSchema  json.RawMessage `json:"configSchema"`
	SecretsSchema json.RawMessage `json:"secretsSchema"`
	Config        map[string]any  `json:"config"`
	SecretsSet    []string        `json:"secretsSet" doc:"Which secrets are set (never their values)."`
	ToolCount     int             `json:"toolCount"`
	Tools         []ToolSummary   `json:"tools,omitempty" doc:"The service's tools (not in listings)."`
	CreatedAt     time.Time       `json:"createdAt"`
	UpdatedAt     time.Time       `json:"updatedAt"`
}

// RefreshResult says what a refresh changed.
type RefreshResult struct {
	Service *Service `json:"service"`
	Added   []string `json:"added" doc:"Ids of tools that are new."`
	Removed []string `json:"removed" doc:"Ids of tools that are gone."`
}

func toolSummaryOf(t services.ToolSummary) ToolSummary { return ToolSummary(t) }

func toolOf(t *services.Tool) *Tool {
	return &Tool{ToolSummary: toolSummaryOf(t.ToolSummary), InputSchema: t.InputSchema, OutputSchema: t.OutputSchema}
}

func serviceOf(v *services.Service) *Service {
	out := &Service{
		ID: v.ID, Adapter: v.Adapter, Name: v.Name, Description: v.Description, SourceURL: v.SourceURL, Hash: v.Hash,
		Enabled: v.Enabled, ConfigSchema: v.ConfigSchema, SecretsSchema: v.SecretsSchema, Config: v.Config,
		SecretsSet: v.SecretsSet, ToolCount: v.ToolCount, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
	}
	if v.Tools != nil {
		out.Tools = make([]ToolSummary, len(v.Tools))
		for i, t := range v.Tools {
			out.Tools[i] = toolSummaryOf(t)
		}
	}
	return out
}

func servicesOf(vs []*services.Service) []*Service {
	out := make([]*Service, len(vs))
	for i, v := range vs {
		out[i] = serviceOf(v)
	}
	return out
}

func refreshResultOf(r *services.RefreshResult) *RefreshResult {
	out := &RefreshResult{Added: r.Added, Removed: r.Removed}
	if r.Service != nil {
		out.Service = serviceOf(r.Service)
	}
	return out
}
