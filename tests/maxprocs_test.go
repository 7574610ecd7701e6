package tests

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

var gomaxprocs = regexp.MustCompile(`(?m)^go_sched_gomaxprocs_threads (\d+)$`)

// procsOf reads the host's GOMAXPROCS from its metrics.
func procsOf(t *testing.T, h *host) string {
	t.Helper()
	st, body := scrape(t, h.base+"/metrics", h.key)
	m := gomaxprocs.FindStringSubmatch(body)
	if st != 200 || m == nil {
		t.Fatalf("GET /metrics: %d, no go_sched_gomaxprocs_threads", st)
	}
	return m[1]
}

// TestIdleHostRunsOnOneP: cyrnel serve sets its own GOMAXPROCS from its
// load (host/maxprocs): an idle host's Go code runs on one P; an
// operator's GOMAXPROCS is left as it is.
func TestIdleHostRunsOnOneP(t *testing.T) {
	t.Parallel()
	t.Run("adapted", func(t *testing.T) {
		t.Parallel()
		h := start(t, "")
		// A second of quiet after start-up, which may itself keep it busy.
		eventuallyWithin(t, 30*time.Second, "GOMAXPROCS 1 on an idle host", func() bool { return procsOf(t, h) == "1" })
	})
	t.Run("operator's", func(t *testing.T) {
		t.Parallel()
		h := start(t, "", "GOMAXPROCS=3")
		if !strings.Contains(h.logs.String(), `msg="GOMAXPROCS left as it is" component=maxprocs procs=3`) {
			t.Fatalf("no word of the operator's GOMAXPROCS in the log:\n%s", h.logs)
		}
		if p := procsOf(t, h); p != "3" {
			t.Errorf("GOMAXPROCS %s, want the operator's 3", p)
		}
	})
}
