package api

import (
	"context"
	"fmt"
	"strings"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/gate"
	"github.com/cyrnel/cyrnel/host/services"
)

type fakeServices struct {
	fakeSettings
	svcs    []*services.Service
	created services.CreateInput
}

func (f *fakeServices) Create(_ context.Context, in services.CreateInput) (*services.Service, error) {
	f.created = in
	if f.err != nil {
		return nil, f.err
	}
	s := &services.Service{ID: in.ID, Adapter: in.Adapter, Enabled: true, Config: in.Config}
	f.svcs = append(f.svcs, s)
	return s, nil
}

func (f *fakeServices) List(context.Context) ([]*services.Service, error) { return f.svcs, f.err }

func (f *fakeServices) Get(_ context.Context, id string) (*services.Service, error) {
	if f.err != nil {
		return nil, f.err
	}
	for _, s := range f.svcs {
		if s.ID == id {
			return s, nil
		}
	}
	return nil, fmt.Errorf("service %s: %w", id, services.ErrNotFound)
}

func (f *fakeServices) SetEnabled(ctx context.Context, id string, enabled bool) (*services.Service, error) {
	s, err := f.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	s.Enabled = enabled
	return s, nil
}

func (f *fakeServices) Delete(ctx context.Context, id string) error {
	_, err := f.Get(ctx, id)
	return err
}

func (f *fakeServices) Refresh(ctx context.Context, id string) (*services.RefreshResult, error) {
	s, err := f.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return &services.RefreshResult{Service: s, Added: []string{"newOp"}, Removed: []string{}}, nil
}

type fakeTools struct {
	tools    []services.Tool // sorted by service id, then tool id
	err      error
	listed   services.ToolListInput
	searched services.SearchInput
}

func (f *fakeTools) Tools(_ context.Context, in services.ToolListInput) ([]services.ToolSummary, bool, error) {
	f.listed = in
	if f.err != nil {
		return nil, false, f.err
	}
	var out []services.ToolSummary
	for _, t := range f.tools {
		if in.After == ([2]string{}) || t.ServiceID > in.After[0] || t.ServiceID == in.After[0] && t.ID > in.After[1] {
			out = append(out, t.ToolSummary)
		}
	}
	if len(out) > in.Limit {
		return out[:in.Limit], true, nil
	}
	return out, false, nil
}

func (f *fakeTools) Tool(_ context.Context, serviceID, toolID string) (*services.Tool, error) {
	if f.err != nil {
		return nil, f.err
	}
	for i, t := range f.tools {
		if t.ServiceID == serviceID && t.ID == toolID {
			return &f.tools[i], nil
		}
	}
	return nil, fmt.Errorf("tool %s.%s: %w", serviceID, toolID, services.ErrNotFound)
}

func (f *fakeTools) SetToolEnabled(ctx context.Context, serviceID, toolID string, enabled bool) (*services.Tool, error) {
	t, err := f.Tool(ctx, serviceID, toolID)
	if err != nil {
		return nil, err
	}
	t.Enabled = enabled
	return t, nil
}

// Search scores every tool whose id contains the query by its position,
// best first, and pages by offset.
func (f *fakeTools) Search(_ context.Context, in services.SearchInput) ([]services.ScoredTool, bool, error) {
	f.searched = in
	if f.err != nil {
		return nil, false, f.err
	}
	var out []services.ScoredTool
	for i, t := range f.tools {
		if strings.Contains(t.ID, in.Query) {
			out = append(out, services.ScoredTool{ToolSummary: t.ToolSummary, Score: float64(len(f.tools) - i)})
		}
	}
	out = out[min(in.Offset, len(out)):]
	if len(out) > in.Limit {
		return out[:in.Limit], true, nil
	}
	return out, false, nil
}

type fakeGate struct {
	invoked module.InvokeInput
	src     gate.Source
	result  any
	err     error
}

func (f *fakeGate) Invoke(_ context.Context, src gate.Source, in module.InvokeInput) (any, error) {
	f.src, f.invoked = src, in
	return f.result, f.err
}
