package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/store"
)

// readyTimeout bounds the database read of a readiness check: a database
// that does not answer in it is not ready.
const readyTimeout = 2 * time.Second

// readiness is GET /health/ready: the database answers and was not found
// corrupt, and the active environment is set up.
type readiness struct {
	store   *store.Store
	modules *modules.Registry
}

func (r readiness) Ready(ctx context.Context) error {
	var errs []string
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := r.store.Healthy(ctx); err != nil {
		errs = append(errs, "database: "+err.Error())
	}
	if active, _, setupErr := r.modules.Status(); active == nil {
		if setupErr == "" {
			setupErr = "none is active"
		}
		errs = append(errs, "environment: "+setupErr)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
