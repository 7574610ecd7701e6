package session

import (
	"errors"
	"fmt"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Errors the API maps to statuses.
var (
	ErrNotFound = errors.New("session not found")
	ErrEnded    = errors.New("session ended")         // 409
	ErrTooMany  = errors.New("too many sessions")     // 429
	ErrBusy     = errors.New("session queue full")    // 429
	ErrStopping = errors.New("host is shutting down") // 503
	// ErrNotOwner: the session is another key's, and only its owner runs
	// code in it (403; a runner's key is told ErrNotFound instead).
	ErrNotOwner = errors.New("only the key that started a session runs code in it")
)

// notFoundError is ErrNotFound naming the session.
type notFoundError struct{ id string }

func (e notFoundError) Error() string  { return "no session " + e.id }
func (e notFoundError) Unwrap() error  { return ErrNotFound }
func (e notFoundError) NotFound() bool { return true }

// endedError is why an execution could not run in its session: the
// process manager reports it with reason session_ended.
type endedError struct{ msg string }

func (e *endedError) Error() string         { return e.msg }
func (e *endedError) Unwrap() error         { return ErrEnded }
func (e *endedError) Reason() module.Reason { return module.ReasonSessionEnded }

func sessionEnded(id, reason string) error {
	return &endedError{fmt.Sprintf("session %s ended (%s) before this execution could run; start a new session", id, reason)}
}
