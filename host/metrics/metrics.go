// Package metrics is the host's Prometheus instrumentation (DESIGN §13): a
// registry of the host's own (never the global one) with the Go and process
// collectors and the exposition handler, and the cyrnel_* collectors the
// composition root registers on it as the parts they observe exist:
// Metrics (executions, process writes, HTTP requests), ToolCalls (which
// needs the services to tell known tools), NotificationLag (only with a
// cluster) and Gauges (read from the parts at each scrape). Domain packages
// report through the narrow observer interfaces they declare; these types
// implement them.
//
// Every label's values are bounded by the host's configuration, never by
// requests: environments are the configured modules, exit states and
// reasons are the fixed enumerations, routes are the router's templates,
// and a tool call is labelled with its service and tool only while the
// service exists (others count under "other"; a deleted service's series
// are removed at the next scrape).
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Other is the label value of what the configuration does not name.
const Other = "other"

// Buckets of the execution histograms, in seconds: from a warm fork's
// millisecond to a 30 s program and past it.
var (
	durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	// queueBuckets start lower: a warm worker is taken in well under 1 ms.
	queueBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// toolBuckets: an upstream call, from a local mock to a slow API.
	toolBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// httpBuckets: an API request, from a read to a long poll.
	httpBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// Registry is the host's metrics registry: the Go and process collectors,
// and what the composition root registers on it.
type Registry struct{ *prometheus.Registry }

// NewRegistry returns a registry with the Go and process collectors.
func NewRegistry() *Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Registry{reg}
}

// Handler serves the exposition of GET /metrics.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.Registry, promhttp.HandlerOpts{Registry: r.Registry})
}

// Metrics counts what the executions, the process writer and the HTTP API
// report.
type Metrics struct {
	executions    *prometheus.CounterVec
	execDuration  *prometheus.HistogramVec
	execQueue     *prometheus.HistogramVec
	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	writeBatch    prometheus.Histogram
	writeDuration prometheus.Histogram
}

// New returns the metrics, registered on reg.
func New(reg *Registry) *Metrics {
	m := &Metrics{
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cyrnel_executions_total", Help: "Executions ended, by environment, exit state and reason.",
		}, []string{"environment", "exit_state", "reason"}),
		execDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cyrnel_execution_duration_seconds", Help: "How long executions ran, from running to their end.", Buckets: durationBuckets,
		}, []string{"environment"}),
		execQueue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cyrnel_execution_queue_seconds", Help: "How long executions waited from queued to running (a worker taken or forked).", Buckets: queueBuckets,
		}, []string{"environment"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cyrnel_http_requests_total", Help: "HTTP API requests, by route template and status code.",
		}, []string{"route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cyrnel_http_request_duration_seconds", Help: "HTTP API request latency, by route template.", Buckets: httpBuckets,
		}, []string{"route"}),
		writeBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cyrnel_process_write_batch_size", Help: "Process-row writes committed together in one transaction.", Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		writeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cyrnel_process_write_seconds", Help: "How long one commit of process-row writes took.", Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30},
		}),
	}
	reg.MustRegister(m.executions, m.execDuration, m.execQueue, m.httpRequests, m.httpDuration, m.writeBatch, m.writeDuration)
	return m
}

// ExecutionEnded counts an ended execution (host/process). queued is how
// long it waited to run; ran < 0: it never ran.
func (m *Metrics) ExecutionEnded(environment, exitState, reason string, queued, ran time.Duration) {
	if environment == "" {
		environment = "none"
	}
	m.executions.WithLabelValues(environment, exitState, reason).Inc()
	if ran >= 0 {
		m.execQueue.WithLabelValues(environment).Observe(queued.Seconds())
		m.execDuration.WithLabelValues(environment).Observe(ran.Seconds())
	}
}

// RowsWritten records one commit of the process-row writer.
func (m *Metrics) RowsWritten(batch int, took time.Duration) {
	m.writeBatch.Observe(float64(batch))
	m.writeDuration.Observe(took.Seconds())
}

// Request counts an HTTP request by its route template (host/api).
func (m *Metrics) Request(route string, code int, took time.Duration) {
	m.httpRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.httpDuration.WithLabelValues(route).Observe(took.Seconds())
}

// NotificationLag is the histogram of how late cluster notifications
// arrive, registered only on a host of several (PostgreSQL).
type NotificationLag struct{ lag prometheus.Histogram }

// NewNotificationLag returns the histogram, registered on reg.
func NewNotificationLag(reg *Registry) NotificationLag {
	l := NotificationLag{prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "cyrnel_cluster_notification_lag_seconds", Help: "PostgreSQL: from a host's NOTIFY to this host reading it (hosts' clocks included).", Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5},
	})}
	reg.MustRegister(l.lag)
	return l
}

// NotificationLag records how late a cluster notification arrived
// (host/cluster).
func (l NotificationLag) NotificationLag(d time.Duration) {
	l.lag.Observe(max(d, 0).Seconds())
}
