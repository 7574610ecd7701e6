package api

import (
	"context"

	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/changes"
	"github.com/cyrnel/cyrnel/host/keys"
)

// fakeKeys authenticates the keys it maps; it records what it is asked.
type fakeKeys struct {
	keys    map[string]caller.Caller
	created keys.CreateInput
	err     error
	authErr error // the database cannot be read
}

func (f *fakeKeys) Authenticate(_ context.Context, key string) (caller.Caller, error) {
	if f.authErr != nil {
		return caller.Caller{}, f.authErr
	}
	if c, ok := f.keys[key]; ok {
		return c, nil
	}
	return caller.Caller{}, keys.ErrUnknown
}

func (f *fakeKeys) Create(_ context.Context, in keys.CreateInput) (*keys.CreatedKey, error) {
	f.created = in
	if f.err != nil {
		return nil, f.err
	}
	return &keys.CreatedKey{Key: keys.Key{ID: "key_1", Name: in.Name, Roles: in.Roles}, Secret: "cyk_x"}, nil
}

func (f *fakeKeys) List(context.Context, keys.ListInput) ([]keys.Key, bool, error) {
	return []keys.Key{{ID: "bootstrap", Roles: []caller.Role{caller.Admin}}}, false, f.err
}

func (f *fakeKeys) Get(_ context.Context, id string) (*keys.Key, error) {
	if id != "bootstrap" {
		return nil, keys.ErrNotFound
	}
	return &keys.Key{ID: id, Roles: []caller.Role{caller.Admin}}, nil
}

func (f *fakeKeys) Revoke(_ context.Context, id string) error {
	switch id {
	case "bootstrap":
		return keys.ErrBootstrap
	case "key_1":
		return nil
	}
	return keys.ErrNotFound
}

// fakeChanges lists one change.
type fakeChanges struct{}

func (fakeChanges) List(context.Context, changes.ListInput) ([]changes.Change, bool, error) {
	return []changes.Change{{ID: 1, KeyID: "bootstrap", Action: "key.create", Target: "key_1", Detail: map[string]any{}}}, false, nil
}
