package modules

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cyrnel/cyrnel/envs/module"
)

// ErrUnsandboxed: a config weakens the sandbox and the operator did not
// allow that when starting the server.
var ErrUnsandboxed = errors.New("weakening the sandbox needs the server started with --allow-unsandboxed (or CYRNEL_ALLOW_UNSANDBOXED=1)")

// UnsandboxedError names the config fields that weaken the sandbox.
type UnsandboxedError struct {
	Fields []string // e.g. sandbox.enabled
	// Stored names the module whose stored config it is (activating it),
	// empty for a config being set.
	Stored string
}

func (e *UnsandboxedError) Error() string {
	if e.Stored != "" {
		return fmt.Sprintf("the stored config of %s weakens the sandbox (%s): %v; or PUT /modules/%s/config without that, then PUT /environment",
			e.Stored, strings.Join(e.Fields, ", "), ErrUnsandboxed, e.Stored)
	}
	return fmt.Sprintf("the config weakens the sandbox (%s): %v", strings.Join(e.Fields, ", "), ErrUnsandboxed)
}

func (e *UnsandboxedError) Unwrap() error { return ErrUnsandboxed }

// CheckSandbox refuses a module config whose "sandbox" weakens any layer
// the default keeps, unless allow (the operator's start-up decision). An API
// call alone must never turn the sandbox off: it is what a local user or a
// program reaching the API would try first.
func CheckSandbox(cfg map[string]any, allow bool) error {
	raw, ok := cfg["sandbox"]
	if !ok || allow {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return fmt.Errorf("sandbox config: %w", err)
	}
	sc := module.DefaultSandbox
	if err := json.Unmarshal(b, &sc); err != nil {
		return fmt.Errorf("sandbox config: %w", err)
	}
	weak := sc.Weakened()
	if len(weak) == 0 {
		return nil
	}
	fields := make([]string, len(weak))
	for i, w := range weak {
		fields[i] = "sandbox." + w
	}
	return &UnsandboxedError{Fields: fields}
}

// UndeclaredError is a config naming what only the operator may declare,
// at start-up (an interpreter): Field is its path (config.interpreter).
type UndeclaredError struct {
	Field  string
	Module string
	Err    error
}

func (e *UndeclaredError) Error() string { return e.Module + ": " + e.Field + ": " + e.Err.Error() }
func (e *UndeclaredError) Unwrap() error { return e.Err }

// HostSandbox is what this machine gives every sandbox, decided once at
// start-up (by the server, which probes the sandbox): GET /environment
// reports it.
type HostSandbox struct {
	// AllowUnsandboxed: the operator started the server with
	// --allow-unsandboxed.
	AllowUnsandboxed bool
	// Cgroups: memory and pids cgroups are usable, so every sandbox's
	// memory and processes are bounded as a whole.
	Cgroups bool
	// Missing names the layers this machine lacks, and why.
	Missing []string
}
