package schema

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRedactNeverEchoesTheValue(t *testing.T) {
	t.Parallel()
	s, err := Compile(json.RawMessage(`{"type":"object","properties":{"token":{"type":"string","pattern":"^ok$"},"n":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	secret := `sk'LIVE'SECRET"TAIL`
	err = s.Validate(map[string]any{"token": secret, "n": "x"})
	var ve *ValidationError
	if err == nil || !asValidation(err, &ve) {
		t.Fatalf("validate: %v", err)
	}
	red := Redact(&FieldError{Field: "body", Message: "does not match", Problems: ve.Problems})
	msg := red.Error()
	for _, part := range []string{"LIVE", "SECRET", "TAIL", "sk"} {
		if strings.Contains(msg, part) {
			t.Fatalf("redacted message leaks %q: %s", part, msg)
		}
	}
	if !strings.Contains(msg, "/token") || !strings.Contains(msg, "/n") {
		t.Fatalf("redacted message lost the paths: %s", msg)
	}
}

func asValidation(err error, ve **ValidationError) bool {
	v, ok := err.(*ValidationError)
	*ve = v
	return ok
}
