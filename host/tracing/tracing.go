// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables (DESIGN §13): off unless OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_TRACES_EXPORTER is set; then the
// exporter is the one the contrib autoexport package picks (OTLP over HTTP
// by default, gRPC with OTEL_EXPORTER_OTLP_PROTOCOL=grpc, "console").
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Provider is the host's tracer provider and the propagator of W3C trace
// context it reads from requests and writes to upstream calls.
type Provider struct {
	trace.TracerProvider
	Propagator propagation.TextMapPropagator
	// Enabled: spans are recorded and exported.
	Enabled  bool
	shutdown func(context.Context) error
}

// Off is a provider that records nothing.
func Off() *Provider {
	return &Provider{TracerProvider: noop.NewTracerProvider(), Propagator: propagation.TraceContext{}, shutdown: func(context.Context) error { return nil }}
}

// Wanted reports whether the environment asks for tracing.
func Wanted(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if e := getenv("OTEL_TRACES_EXPORTER"); e != "" {
		return e != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv returns the provider the OTEL_* variables configure, or Off when
// they ask for none. The service is named cyrnel unless OTEL_SERVICE_NAME
// (or OTEL_RESOURCE_ATTRIBUTES) says otherwise.
func FromEnv(ctx context.Context, version string) (*Provider, error) {
	if !Wanted(os.Getenv) {
		return Off(), nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTEL_* exporter settings: %w", err)
	}
	// Default first: the environment's attributes win over it.
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName("cyrnel"), semconv.ServiceVersion(version)),
		resource.Environment(),
	)
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// Sampler and batch limits come from OTEL_TRACES_SAMPLER and OTEL_BSP_*,
	// which the SDK reads itself.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{
		TracerProvider: tp,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		Enabled:        true,
		shutdown:       tp.Shutdown,
	}, nil
}

// Shutdown exports what is buffered and stops the exporter, no longer than
// ctx allows.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shut down: %w", err)
	}
	return nil
}
