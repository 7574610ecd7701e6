package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/uptrace/bun"
)

// Notify sends payload on channel to every listening host (PostgreSQL's
// pg_notify). It goes through the pool, whose connections are checked
// before use, so a database that restarted takes the notice on a new
// connection instead of losing it on the old one.
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	if _, err := s.DB.ExecContext(ctx, "SELECT pg_notify(?, ?)", channel, payload); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// killRequest is one kill asked of another host.
type killRequest struct {
	bun.BaseModel `bun:"table:kill_requests"`
	HostID        string    `bun:"host_id,pk"`
	PID           int64     `bun:"pid,pk"`
	RequestedAt   time.Time `bun:"requested_at,notnull"`
}

// killRequestTTL bounds how long a kill request waits for its runner: one
// for a host that died is dropped (the lease finishes its processes).
const killRequestTTL = 10 * time.Minute

// RequestKill records that hostID should kill pid.
func (s *Store) RequestKill(ctx context.Context, hostID string, pid int64) error {
	_, err := s.DB.NewInsert().Model(&killRequest{HostID: hostID, PID: pid, RequestedAt: s.now().UTC()}).On("CONFLICT (host_id, pid) DO NOTHING").Exec(ctx)
	if err != nil {
		return fmt.Errorf("request kill of %d on %s: %w", pid, hostID, err)
	}
	return nil
}

// TakeKills removes and returns the pids hostID was asked to kill, and drops
// requests too old to matter.
func (s *Store) TakeKills(ctx context.Context, hostID string) ([]int64, error) {
	var pids []int64
	err := s.DB.NewRaw("DELETE FROM kill_requests WHERE host_id = ? RETURNING pid", hostID).Scan(ctx, &pids)
	if err != nil {
		return nil, fmt.Errorf("take kill requests: %w", err)
	}
	if _, err := s.DB.NewDelete().Model((*killRequest)(nil)).
		Where("requested_at < ?", s.now().UTC().Add(-killRequestTTL)).Exec(ctx); err != nil {
		return nil, fmt.Errorf("drop old kill requests: %w", err)
	}
	return pids, nil
}

// ConfigVersions names a version of each piece of stored configuration:
// "setting/KEY" (a digest of its value), "module/ID" and "service/ID" (their
// update time, with a service's enabled flag and its disabled tools). Two
// reads that differ at a key mean that piece changed in between; a key that
// vanished was deleted.
func (s *Store) ConfigVersions(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	var settings []setting
	if err := s.DB.NewSelect().Model(&settings).Scan(ctx); err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	for _, st := range settings {
		sum := sha256.Sum256([]byte(st.Value))
		out["setting/"+st.Key] = hex.EncodeToString(sum[:8])
	}
	var mods []Module
	if err := s.DB.NewSelect().Model(&mods).Column("id", "updated_at").Scan(ctx); err != nil {
		return nil, fmt.Errorf("read module versions: %w", err)
	}
	for _, m := range mods {
		out["module/"+m.ID] = strconv.FormatInt(m.UpdatedAt.UnixNano(), 10)
	}
	var svcs []Service
	if err := s.DB.NewSelect().Model(&svcs).Column("id", "enabled", "updated_at").Scan(ctx); err != nil {
		return nil, fmt.Errorf("read service versions: %w", err)
	}
	for _, v := range svcs {
		out["service/"+v.ID] = strconv.FormatInt(v.UpdatedAt.UnixNano(), 10) + "/" + strconv.FormatBool(v.Enabled)
	}
	var off []Tool
	if err := s.DB.NewSelect().Model(&off).Column("service_id", "id").Where("NOT enabled").Order("service_id", "id").Scan(ctx); err != nil {
		return nil, fmt.Errorf("read disabled tools: %w", err)
	}
	for _, t := range off {
		if k := "service/" + t.ServiceID; out[k] != "" {
			out[k] += "/-" + t.ID
		}
	}
	return out, nil
}
