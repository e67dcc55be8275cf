// Package telemetry sets up OpenTelemetry tracing for tollgate's processes:
// the tracer provider and its exporter, and the Temporal SDK's tracing
// interceptor (internal/workflowtrace reads its spans in workflow code).
//
// Tracing is on when the standard OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variable is set: spans are then
// batched and exported over OTLP/HTTP, configured by the standard OTEL_*
// variables, which the OpenTelemetry SDK reads itself (headers, timeout,
// compression, TLS, sampler, batch sizes, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES). Otherwise nothing is installed and nothing is
// recorded.
//
// The package is a leaf: it knows the Temporal SDK and OpenTelemetry, and
// of tollgate's own packages only internal/workflowtrace.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The standard variables that decide whether tracing is on and how it is
// exported.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvServiceName    = "OTEL_SERVICE_NAME"
)

// The service names the processes report unless OTEL_SERVICE_NAME (or
// service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const (
	WorkerService = "tollgate-worker"
	APIService    = "tollgate-api"
)

// Tracing is a process's tracing, as Setup made it.
type Tracing struct {
	// Provider makes the process's spans; nil when tracing is off.
	Provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider
}

// Enabled reports whether the variables getenv reads ask for tracing: an
// OTLP endpoint is set and the SDK is not disabled.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true") {
		return false
	}
	return strings.TrimSpace(getenv(EnvEndpoint)) != "" || strings.TrimSpace(getenv(EnvTracesEndpoint)) != ""
}

// Setup turns tracing on for the process when Enabled(os.Getenv): it builds
// a tracer provider that exports over OTLP/HTTP, for service unless the
// environment names another, installs it and the W3C trace-context and
// baggage propagators as OpenTelemetry's globals, and sends the SDK's
// errors (a collector that cannot be reached) to log. Otherwise it returns
// a Tracing that is off and touches nothing.
func Setup(ctx context.Context, service string, log *slog.Logger) (Tracing, error) {
	if !Enabled(os.Getenv) {
		return Tracing{}, nil
	}
	for _, v := range []string{EnvProtocol, EnvTracesProtocol} {
		// The exporter would fall back to http/protobuf and send it to a
		// gRPC port, failing every export.
		if p := strings.TrimSpace(os.Getenv(v)); p != "" && p != "http/protobuf" && p != "http/json" {
			return Tracing{}, fmt.Errorf("%s=%s: tollgate exports traces over OTLP/HTTP only: use http/protobuf (the default) or http/json, and the collector's HTTP port (4318)", v, p)
		}
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return Tracing{}, fmt.Errorf("OTLP trace exporter (%s, %s): %w", EnvEndpoint, EnvTracesEndpoint, err)
	}
	// Later sources win: the environment's service name over the default.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return Tracing{}, fmt.Errorf("trace resource (OTEL_RESOURCE_ATTRIBUTES, %s): %w", EnvServiceName, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(LiveOnly(exporter)), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if log != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("tracing", "error", err)
		}))
	}
	return Tracing{Provider: tp, sdk: tp}, nil
}

// On reports whether t records spans.
func (t Tracing) On() bool { return t.Provider != nil }

// Shutdown exports the spans still buffered and stops the provider; a
// Tracing that is off has nothing to do.
func (t Tracing) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}
