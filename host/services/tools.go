package services

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/store"
)

// Tool is a tool with its schemas.
type Tool struct {
	ToolSummary
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
}

// ToolListInput filters and pages tools.
type ToolListInput struct {
	ServiceID string
	Enabled   *bool
	After     [2]string // (service id, tool id) of the last item of the previous page
	Limit     int
}

// Tools lists tools ordered by service and id; more says whether more follow.
func (m *Manager) Tools(ctx context.Context, in ToolListInput) (items []ToolSummary, more bool, err error) {
	rows, err := m.st.ListTools(ctx, store.ToolFilter{ServiceID: in.ServiceID, Enabled: in.Enabled, AfterKey: in.After, Limit: in.Limit + 1})
	if err != nil {
		return nil, false, err
	}
	if more = len(rows) > in.Limit; more {
		rows = rows[:in.Limit]
	}
	items = make([]ToolSummary, 0, len(rows))
	for _, t := range rows {
		items = append(items, summary(t))
	}
	return items, more, nil
}

// Tool returns one tool with its schemas.
func (m *Manager) Tool(ctx context.Context, serviceID, toolID string) (*Tool, error) {
	t, err := m.st.GetTool(ctx, serviceID, toolID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("tool %s.%s: %w", serviceID, toolID, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &Tool{ToolSummary: summary(*t), InputSchema: t.InputSchema, OutputSchema: t.OutputSchema}, nil
}

// SetToolEnabled enables or disables one tool.
func (m *Manager) SetToolEnabled(ctx context.Context, serviceID, toolID string, enabled bool) (*Tool, error) {
	err := m.plane.Apply(ctx, recorded(enabledAction("tool", enabled), serviceID+"."+toolID, map[string]any{"enabled": enabled}, m.change(serviceID, nil, "", func(ctx context.Context, prev *stored) (*stored, func(context.Context) error, error) {
		next := &stored{svc: prev.svc, tools: slices.Clone(prev.tools)}
		i := slices.IndexFunc(next.tools, func(t store.Tool) bool { return t.ID == toolID })
		if i < 0 {
			return nil, nil, fmt.Errorf("tool %s.%s: %w", serviceID, toolID, ErrNotFound)
		}
		next.tools[i].Enabled = enabled
		return next, func(ctx context.Context) error { return m.st.SetToolEnabled(ctx, serviceID, toolID, enabled) }, nil
	})))
	if err != nil {
		return nil, err
	}
	return m.Tool(ctx, serviceID, toolID)
}

// callable finds a tool a program may call, or says why it may not.
func (m *Manager) callable(serviceID, toolID string) (*liveService, *liveTool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	l := m.live[serviceID]
	if l == nil {
		return nil, nil, fmt.Errorf("no service %q: %w", serviceID, ErrNotFound)
	}
	t := l.tools[toolID]
	if t == nil {
		return nil, nil, fmt.Errorf("service %s has no tool %q: %w", serviceID, toolID, ErrNotFound)
	}
	if !l.enabled {
		return nil, nil, fmt.Errorf("service %s is disabled: %w", serviceID, ErrUnavailable)
	}
	if !t.enabled {
		return nil, nil, fmt.Errorf("tool %s.%s is disabled: %w", serviceID, toolID, ErrUnavailable)
	}
	return l, t, nil
}

// inputSchema compiles a tool's input schema on first use. Only a success
// is kept: one caller's cancelled context must not break the tool for the
// next.
func (m *Manager) inputSchema(ctx context.Context, serviceID, toolID string, t *liveTool) (*schema.Schema, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.schema != nil {
		return t.schema, nil
	}
	row, err := m.st.GetTool(context.WithoutCancel(ctx), serviceID, toolID)
	if err != nil {
		return nil, fmt.Errorf("input schema of %s.%s: %w", serviceID, toolID, err)
	}
	s, err := m.compiler.Compile(row.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema of %s.%s: %w", serviceID, toolID, err)
	}
	t.schema = s
	return s, nil
}

// Invoke calls a tool: the same path for programs and for the API. The
// parameters are validated against the tool's input schema first.
func (m *Manager) Invoke(ctx context.Context, in module.InvokeInput) (any, error) {
	adapter, params, err := m.prepare(ctx, in)
	if err != nil {
		return nil, err
	}
	in.Parameters = params
	res, err := m.adapters[adapter].Invoke(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("%s.%s: %w: %w", in.ServiceID, in.ToolID, ErrAdapter, err)
	}
	return res, nil
}

// Validate checks a call as Invoke would before making it: the tool is
// callable and the parameters fit its input schema.
func (m *Manager) Validate(ctx context.Context, in module.InvokeInput) error {
	_, _, err := m.prepare(ctx, in)
	return err
}

// prepare finds the tool's adapter and validates the parameters (none is
// an empty object).
func (m *Manager) prepare(ctx context.Context, in module.InvokeInput) (string, map[string]any, error) {
	l, t, err := m.callable(in.ServiceID, in.ToolID)
	if err != nil {
		code := module.ToolNotFound
		if errors.Is(err, ErrUnavailable) {
			code = module.ToolUnavailable
		}
		return "", nil, &module.ToolError{Code: code, Err: err}
	}
	s, err := m.inputSchema(ctx, in.ServiceID, in.ToolID, t)
	if err != nil {
		return "", nil, err
	}
	params := in.Parameters
	if params == nil {
		params = map[string]any{}
	}
	if err := s.Validate(params); err != nil {
		var ve *schema.ValidationError
		if errors.As(err, &ve) {
			return "", nil, &module.ToolError{Code: module.ToolInvalidParameters, Details: ve.Problems,
				Err: &schema.FieldError{Field: "parameters", Message: fmt.Sprintf("invalid parameters for %s.%s", in.ServiceID, in.ToolID), Problems: ve.Problems}}
		}
		return "", nil, err
	}
	return l.adapter, params, nil
}

// ListTools lists the callable tools (enabled, of enabled services) for
// runtimes to build their stubs from.
func (m *Manager) ListTools(ctx context.Context) ([]module.Tool, error) {
	return m.ListServiceTools(ctx, "")
}

// ListServiceTools is ListTools for one service ("" for all).
func (m *Manager) ListServiceTools(ctx context.Context, serviceID string) ([]module.Tool, error) {
	on := true
	rows, err := m.st.ListTools(ctx, store.ToolFilter{ServiceID: serviceID, Enabled: &on, Schemas: true})
	if err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]module.Tool, 0, len(rows))
	for _, t := range rows {
		if l := m.live[t.ServiceID]; l == nil || !l.enabled {
			continue
		}
		out = append(out, module.Tool{ServiceID: t.ServiceID, ToolID: t.ID, Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return out, nil
}

// Has reports whether the service exists and has the tool (enabled or
// not), from memory.
func (m *Manager) Has(serviceID, toolID string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	l := m.live[serviceID]
	return l != nil && l.tools[toolID] != nil
}
