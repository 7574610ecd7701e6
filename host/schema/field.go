package schema

import (
	"errors"
	"regexp"
)

// FieldError is a bad input: Field is where it sits in the request (the
// API's location syntax, e.g. body.config), Problems, when set, name each
// failing path inside it.
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

var quoted = regexp.MustCompile(`'[^']*'|"[^"]*"`)

// Redact drops quoted values from a FieldError's messages, for errors about
// secrets: validation messages may quote the offending value.
func Redact(err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	out := *fe
	out.Message = quoted.ReplaceAllString(fe.Message, "'…'")
	out.Problems = make([]Problem, len(fe.Problems))
	for i, p := range fe.Problems {
		out.Problems[i] = Problem{Path: p.Path, Message: quoted.ReplaceAllString(p.Message, "'…'")}
	}
	return &out
}
