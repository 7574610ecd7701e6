package cli

import (
	"testing"
	"time"
)

// TestKeyInput: --name and --role are needed, --expires takes a duration
// from now or an RFC 3339 time, and anything else is refused here.
func TestKeyInput(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	in, err := keyInput("agent", []string{"runner", "approver"}, "720h", now)
	if err != nil || in.Name != "agent" || len(in.Roles) != 2 || in.Roles[1] != "approver" || !in.ExpiresAt.Equal(now.Add(720*time.Hour)) {
		t.Fatalf("%+v %v", in, err)
	}
	in, err = keyInput("agent", []string{"runner"}, "2027-01-02T03:04:05Z", now)
	if err != nil || in.ExpiresAt.Year() != 2027 {
		t.Fatalf("%+v %v", in, err)
	}
	if in, _ := keyInput("agent", []string{"runner"}, "", now); in.ExpiresAt != nil {
		t.Fatalf("no --expires: %+v", in)
	}
	for _, bad := range [][3]string{{"", "runner", ""}, {"agent", "", ""}, {"agent", "runner", "soon"}} {
		var roles []string
		if bad[1] != "" {
			roles = []string{bad[1]}
		}
		if _, err := keyInput(bad[0], roles, bad[2], now); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}
