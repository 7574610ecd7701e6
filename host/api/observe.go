package api

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// RequestObserver counts requests by route template (host/metrics).
type RequestObserver interface {
	Request(route string, code int, took time.Duration)
}

// Tracing traces each request, continuing the caller's trace when the
// request carries a traceparent header.
type Tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
}

// unmatched is the route label of a request no route takes.
const unmatched = "unmatched"

// observe names each request by its route template, never its path (no
// series or span name per pid): it counts the request and names its span.
func observe(mux *chi.Mux, obs RequestObserver, traced bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			route := chi.RouteContext(r.Context()).RoutePattern()
			if route == "" {
				// Refused before routing (authentication): the route it
				// would have taken, if any.
				if route = mux.Find(chi.NewRouteContext(), r.Method, r.URL.Path); route == "" {
					route = unmatched
				}
			}
			code := ww.Status()
			if code == 0 {
				code = http.StatusOK
			}
			if obs != nil {
				obs.Request(route, code, time.Since(start))
			}
			if traced {
				span := trace.SpanFromContext(r.Context())
				span.SetName(r.Method + " " + route)
				span.SetAttributes(attribute.String("http.route", route))
			}
		})
	}
}

// traceRequests wraps h in a server span per request.
func traceRequests(h http.Handler, t Tracing) http.Handler {
	return otelhttp.NewHandler(h, "http.request",
		otelhttp.WithTracerProvider(t.Provider), otelhttp.WithPropagators(t.Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}
