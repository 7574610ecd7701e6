package api

import (
	"context"
	"fmt"

	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/store"
)

// fakePolicies decides block for tools named z, allow for the others.
type fakePolicies struct {
	set policy.Set
	err error
}

func (f *fakePolicies) Get() *policy.Set { return &f.set }

func (f *fakePolicies) Put(_ context.Context, s policy.Set) (*policy.Set, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.set = s
	return &f.set, nil
}

func (f *fakePolicies) Decide(_, toolID string) policy.Decision {
	if toolID == "z" {
		return policy.Block
	}
	return policy.Allow
}

type fakeApprovals struct {
	items  []approval.Approval // newest first
	err    error
	listed approval.ListInput
}

func (f *fakeApprovals) List(_ context.Context, in approval.ListInput) ([]approval.Approval, bool, error) {
	f.listed = in
	if f.err != nil {
		return nil, false, f.err
	}
	var out []approval.Approval
	for _, a := range f.items {
		if in.Before == "" || a.ID < in.Before {
			out = append(out, a)
		}
	}
	if len(out) > in.Limit {
		return out[:in.Limit], true, nil
	}
	return out, false, nil
}

func (f *fakeApprovals) Get(_ context.Context, id string) (*approval.Approval, error) {
	if f.err != nil {
		return nil, f.err
	}
	for i, a := range f.items {
		if a.ID == id {
			return &f.items[i], nil
		}
	}
	return nil, fmt.Errorf("%s: %w", id, approval.ErrNotFound)
}

func (f *fakeApprovals) Decide(ctx context.Context, id string, approve bool) (*approval.Approval, error) {
	a, err := f.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if a.State != "pending" {
		return nil, fmt.Errorf("%s: %w", id, approval.ErrDecided)
	}
	a.State = map[bool]string{true: "approved", false: "denied"}[approve]
	return a, nil
}

type fakeToolCalls struct {
	calls  []audit.Call // newest first
	listed store.ToolCallFilter
}

func (f *fakeToolCalls) List(_ context.Context, in store.ToolCallFilter) ([]audit.Call, bool, error) {
	f.listed = in
	var out []audit.Call
	for _, c := range f.calls {
		if (in.BeforeID == 0 || c.ID < in.BeforeID) && (in.PID == 0 || c.PID != nil && *c.PID == in.PID) {
			out = append(out, c)
		}
	}
	if len(out) > in.Limit {
		return out[:in.Limit], true, nil
	}
	return out, false, nil
}
