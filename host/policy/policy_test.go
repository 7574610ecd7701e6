package policy

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/cyrnel/cyrnel/host/schema"
)

func TestDecideFirstMatchWins(t *testing.T) {
	t.Parallel()
	s := &Set{Default: Allow, Rules: []Rule{
		{Pattern: "github.delete*", Decision: Block},
		{Pattern: "github.*", Decision: Ask},
		{Pattern: "*.get?", Decision: Block},
	}}
	for _, c := range []struct {
		svc, tool string
		want      Decision
	}{
		{"github", "deleteRepo", Block},
		{"github", "listRepos", Ask},
		{"petstore", "getX", Block},
		{"petstore", "getXY", Allow},
		{"gitlab", "deleteRepo", Allow},
		// The dot separates service and tool: a pattern for one service does
		// not reach another whose id merely starts the same way.
		{"githubx", "listRepos", Allow},
	} {
		if got := s.Decide(c.svc, c.tool); got != c.want {
			t.Errorf("Decide(%s.%s) = %s, want %s", c.svc, c.tool, got, c.want)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		set   Set
		field string
	}{
		{Set{Default: "maybe"}, "default"},
		{Set{Default: Allow, Rules: []Rule{{"a.*", Allow}, {"b.*", Ask}, {"[", Block}}}, "rules[2].pattern"},
		{Set{Default: Allow, Rules: []Rule{{"a.*", "yes"}}}, "rules[0].decision"},
		{Set{Default: Allow, Rules: []Rule{{"", Allow}}}, "rules[0].pattern"},
	} {
		err := c.set.Validate()
		var fe *schema.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Validate(%+v) = %v, want a problem at %s", c.set, err, c.field)
		}
	}
}

type memSettings struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *memSettings) Setting(_ context.Context, k string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[k]
	return v, ok, nil
}

func (s *memSettings) SetSetting(_ context.Context, k, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = v
	return nil
}

func TestEnginePersistsAndRejectsWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &memSettings{m: map[string]string{}}
	e, err := Load(ctx, st, "", With{})
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Decide("a", "b"); d != Allow {
		t.Fatalf("default = %s, want allow", d)
	}
	if _, err := e.Put(ctx, Set{Default: Ask, Rules: []Rule{{"a.*", Block}}}); err != nil {
		t.Fatal(err)
	}
	// An invalid set changes nothing, not even its valid first rules.
	if _, err := e.Put(ctx, Set{Default: Allow, Rules: []Rule{{"x.*", Allow}, {"[", Allow}}}); err == nil {
		t.Fatal("invalid set accepted")
	}
	e2, err := Load(ctx, st, Allow, With{})
	if err != nil {
		t.Fatal(err)
	}
	if d := e2.Decide("a", "b"); d != Block {
		t.Errorf("reloaded a.b = %s, want block", d)
	}
	if d := e2.Decide("x", "y"); d != Ask {
		t.Errorf("reloaded default = %s, want ask", d)
	}
}
