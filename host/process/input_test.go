package process

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/host/schema"
)

// TestBadInputNamesTheDomainField: a refused input is a FieldError naming
// the process's own field (code, ref, timeoutMs), not a request location:
// the API and the MCP endpoint say where it sits for their callers.
func TestBadInputNamesTheDomainField(t *testing.T) {
	t.Parallel()
	m, _, _ := newManager(t)
	for _, c := range []struct {
		in    CreateInput
		field string
	}{
		{CreateInput{Code: "x\x00"}, "code"},
		{CreateInput{Code: strings.Repeat("#", DefaultLimits().CodeBytes+1)}, "code"},
		{CreateInput{Code: "x", Ref: "\x00"}, "ref"},
		{CreateInput{Code: "x", TimeoutMs: -1}, "timeoutMs"},
		{CreateInput{Code: "x", TimeoutMs: DefaultLimits().MaxTimeoutMs + 1}, "timeoutMs"},
	} {
		_, err := m.Create(context.Background(), c.in)
		var fe *schema.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("err %v, want a FieldError on %s", err, c.field)
		}
	}
}
