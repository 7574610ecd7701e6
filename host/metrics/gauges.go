package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Workers are one environment's warm workers at a scrape.
type Workers struct {
	Environment string
	// By state: ready (warm, idle), starting (being spawned or forked),
	// busy (running an execution).
	Ready, Starting, Busy int
	// TemplateRestarts counts the templates started after the first (one
	// died or stopped answering), for this environment instance.
	TemplateRestarts int64
}

// Gauges are read at each scrape, from the parts that hold the state; a
// nil field is not exported. The composition root registers them once the
// parts exist (Gauges is a prometheus.Collector).
type Gauges struct {
	// Executions: this host's live executions by state (queued, running,
	// suspended, terminating).
	Executions func() map[string]int
	Workers    func() []Workers
	// Sessions: this host's sessions by state.
	Sessions func() map[string]int
	// ApprovalsPending: tool calls on this host waiting on an approval.
	ApprovalsPending func() int
	// HostsAlive (PostgreSQL): hosts whose lease has not run out; ok false
	// when the database could not say.
	HostsAlive func() (n int, ok bool)
}

var (
	execDesc     = prometheus.NewDesc("cyrnel_executions", "Live executions on this host, by state.", []string{"state"}, nil)
	workersDesc  = prometheus.NewDesc("cyrnel_workers", "Warm workers, by environment and state (ready, starting, busy).", []string{"environment", "state"}, nil)
	restartsDesc = prometheus.NewDesc("cyrnel_template_restarts_total", "Interpreter templates started again after one died or stopped answering, by environment.", []string{"environment"}, nil)
	sessionsDesc = prometheus.NewDesc("cyrnel_sessions", "Sessions on this host, by state.", []string{"state"}, nil)
	pendingDesc  = prometheus.NewDesc("cyrnel_approvals_pending", "Tool calls on this host waiting on a human approval.", nil, nil)
	hostsDesc    = prometheus.NewDesc("cyrnel_hosts_alive", "PostgreSQL: hosts holding a lease.", nil, nil)
)

// Describe and Collect make Gauges a prometheus.Collector.
func (g Gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{execDesc, workersDesc, restartsDesc, sessionsDesc, pendingDesc} {
		ch <- d
	}
	if g.HostsAlive != nil {
		ch <- hostsDesc
	}
}

func (g Gauges) Collect(ch chan<- prometheus.Metric) {
	byState := func(d *prometheus.Desc, counts map[string]int) {
		for state, n := range counts {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(n), state)
		}
	}
	if g.Executions != nil {
		byState(execDesc, g.Executions())
	}
	if g.Sessions != nil {
		byState(sessionsDesc, g.Sessions())
	}
	if g.Workers != nil {
		for _, w := range g.Workers() {
			for state, n := range map[string]int{"ready": w.Ready, "starting": w.Starting, "busy": w.Busy} {
				ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(n), w.Environment, state)
			}
			ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(w.TemplateRestarts), w.Environment)
		}
	}
	if g.ApprovalsPending != nil {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(g.ApprovalsPending()))
	}
	if g.HostsAlive != nil {
		if n, ok := g.HostsAlive(); ok {
			ch <- prometheus.MustNewConstMetric(hostsDesc, prometheus.GaugeValue, float64(n))
		}
	}
}
