package server

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/cyrnel/cyrnel/host/api"
	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/cluster"
	"github.com/cyrnel/cyrnel/host/metrics"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/tracing"
)

// gauges are what the metrics read at each scrape.
func gauges(procs *process.Manager, reg *modules.Registry, sessions *session.Manager, approvals *approval.Manager, cl *cluster.Cluster) metrics.Gauges {
	g := metrics.Gauges{
		Executions: procs.Live,
		Workers: func() []metrics.Workers {
			envs := reg.Workers()
			out := make([]metrics.Workers, len(envs))
			for i, e := range envs {
				out[i] = metrics.Workers{Environment: e.Module, Ready: e.Ready, Starting: e.Starting, Busy: e.Busy, TemplateRestarts: e.TemplateRestarts}
			}
			return out
		},
		Sessions: func() map[string]int {
			counts := map[string]int{}
			for s, n := range sessions.Counts() {
				counts[string(s)] = n
			}
			return counts
		},
		ApprovalsPending: approvals.Pending,
	}
	if cl != nil {
		g.HostsAlive = cl.HostsAlive
	}
	return g
}

// requestTracing traces the API's requests when tracing is on.
func requestTracing(p *tracing.Provider) api.Tracing {
	if !p.Enabled {
		return api.Tracing{}
	}
	return api.Tracing{Provider: p, Propagator: p.Propagator}
}

// upstreamTracing wraps the tool calls' transport in a client span that
// sends traceparent upstream, when tracing is on.
func upstreamTracing(p *tracing.Provider) func(http.RoundTripper) http.RoundTripper {
	if !p.Enabled {
		return nil
	}
	return func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(p), otelhttp.WithPropagators(p.Propagator))
	}
}

// metricsServer serves GET /metrics without authentication on a listener
// of its own (Config.MetricsAddr).
type metricsServer struct {
	ln  net.Listener
	srv *http.Server
}

// serveMetrics listens on MetricsAddr (nil without one); tool calls never
// reach it.
func (s *Server) serveMetrics() (*metricsServer, error) {
	if s.cfg.MetricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", s.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	if err := s.egress.AddOwn(ln.Addr()); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.registry.Handler())
	return &metricsServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

func (m *metricsServer) serve() error { return m.srv.Serve(m.ln) }

// close stops the listener; a nil server has none.
func (m *metricsServer) close() {
	if m != nil {
		m.srv.Close()
	}
}
