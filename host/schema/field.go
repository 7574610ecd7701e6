package schema

import (
	"errors"
	"strings"
)

// FieldError is a bad input. Field names it in the domain's own terms, in
// the API's location syntax but without a request location ("code",
// "config.timeoutMs", "preload[1]"): the API maps it to where it sits in a
// request (body.code, body.timeoutMs), the MCP endpoint to a tool's
// argument. Problems, when set, name each failing path inside it.
type FieldError struct {
	Field    string
	Message  string
	Problems []Problem
}

func (e *FieldError) Error() string {
	msg := e.Field + ": " + e.Message
	for _, p := range e.Problems {
		path := p.Path
		if path == "" {
			path = "(root)"
		}
		msg += "; " + path + ": " + p.Message
	}
	return msg
}

// Redact makes a FieldError safe to show about secrets: a message that
// quotes anything (validation messages may quote the offending value,
// escapes and all) is replaced by one that names only the failure.
func Redact(err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	out := *fe
	out.Message = safe(fe.Message)
	out.Problems = make([]Problem, len(fe.Problems))
	for i, p := range fe.Problems {
		out.Problems[i] = Problem{Path: p.Path, Message: safe(p.Message)}
	}
	return &out
}

func safe(msg string) string {
	if strings.ContainsAny(msg, `'"`+"`") {
		return "invalid value (not shown: secrets are never echoed)"
	}
	return msg
}
