package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ToolCalls counts tool calls by service, tool and outcome. A call is
// labelled with its service and tool only when the configuration knows
// them; the series of a tool that has gone (its service deleted, or
// refreshed without it) are removed at the next scrape, so the series stay
// as many as the tools configured.
type ToolCalls struct {
	known    func(service, tool string) bool
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec

	mu   sync.Mutex
	seen map[[2]string]struct{} // the (service, tool) labels in use
}

// NewToolCalls returns the tool call metrics, registered on reg; known says
// whether a tool exists in the configuration (the services).
func NewToolCalls(reg *Registry, known func(service, tool string) bool) *ToolCalls {
	t := &ToolCalls{
		known: known,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cyrnel_tool_calls_total", Help: `Tool calls, by service, tool and outcome (service and tool "other" for what the configuration does not name).`,
		}, []string{"service", "tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cyrnel_tool_call_duration_seconds", Help: "Tool call latency, approvals included, by service and tool.", Buckets: toolBuckets,
		}, []string{"service", "tool"}),
		seen: map[[2]string]struct{}{},
	}
	reg.MustRegister(t)
	return t
}

// ToolCalled counts a tool call (host/gate).
func (t *ToolCalls) ToolCalled(service, tool, outcome string, took time.Duration) {
	if !t.known(service, tool) {
		service, tool = Other, Other
	}
	// Under the lock: Collect must not remove the series between the
	// check and the count, leaving one it no longer knows of.
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen[[2]string{service, tool}] = struct{}{}
	t.calls.WithLabelValues(service, tool, outcome).Inc()
	t.duration.WithLabelValues(service, tool).Observe(took.Seconds())
}

// Describe and Collect make ToolCalls a prometheus.Collector.
func (t *ToolCalls) Describe(ch chan<- *prometheus.Desc) {
	t.calls.Describe(ch)
	t.duration.Describe(ch)
}

// Collect first drops the series of tools that are gone.
func (t *ToolCalls) Collect(ch chan<- prometheus.Metric) {
	t.mu.Lock()
	for k := range t.seen {
		if k[0] == Other || t.known(k[0], k[1]) {
			continue
		}
		delete(t.seen, k)
		t.calls.DeletePartialMatch(prometheus.Labels{"service": k[0], "tool": k[1]})
		t.duration.DeleteLabelValues(k[0], k[1])
	}
	t.mu.Unlock()
	t.calls.Collect(ch)
	t.duration.Collect(ch)
}
