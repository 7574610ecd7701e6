package api

import (
	"context"
	"io"
	"strings"

	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/store"
)

// fakeSessions answers every call with err, or with a session s1.
type fakeSessions struct {
	err     error
	created session.CreateInput
	put     []byte
}

func (f *fakeSessions) Create(_ context.Context, in session.CreateInput) (*store.Session, error) {
	f.created = in
	if f.err != nil {
		return nil, f.err
	}
	return &store.Session{ID: "s1", State: "idle"}, nil
}

func (f *fakeSessions) List(context.Context, store.SessionFilter) ([]store.Session, error) {
	return nil, f.err
}

func (f *fakeSessions) Get(context.Context, string) (*store.Session, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &store.Session{ID: "s1", State: "idle"}, nil
}

func (f *fakeSessions) End(context.Context, string) error { return f.err }

func (f *fakeSessions) ListFiles(context.Context, string) ([]session.File, error) { return nil, f.err }

func (f *fakeSessions) PutFile(_ context.Context, _, _ string, data []byte) error {
	f.put = data
	return f.err
}

func (f *fakeSessions) OpenFile(context.Context, string, string) (io.Reader, int64, error) {
	return strings.NewReader("a,b\n"), 4, f.err
}

func (f *fakeSessions) DeleteFile(context.Context, string, string) error { return f.err }
