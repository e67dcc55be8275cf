package telemetry_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/tollgate/tollgate/internal/spantest"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// clearOTelEnv unsets the variables a developer's shell may hold, for
// the test.
func clearOTelEnv(t *testing.T) {
	for _, v := range []string{
		telemetry.EnvEndpoint, telemetry.EnvTracesEndpoint, telemetry.EnvProtocol, telemetry.EnvTracesProtocol,
		telemetry.EnvSDKDisabled, telemetry.EnvServiceName, "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER",
	} {
		t.Setenv(v, "")
	}
}

// restoreGlobals puts OpenTelemetry's globals back after a test that let
// Setup install its own.
func restoreGlobals(t *testing.T) {
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		if otel.GetTracerProvider() != tp {
			otel.SetTracerProvider(tp)
		}
		if otel.GetTextMapPropagator() != prop {
			otel.SetTextMapPropagator(prop)
		}
	})
}

func TestTracingIsOnlyOnWithAnOTLPEndpointAndTheSDKNotDisabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"an endpoint", map[string]string{telemetry.EnvEndpoint: "http://127.0.0.1:4318"}, true},
		{"a traces endpoint", map[string]string{telemetry.EnvTracesEndpoint: "http://127.0.0.1:4318/v1/traces"}, true},
		{"blank", map[string]string{telemetry.EnvEndpoint: "  "}, false},
		{"disabled", map[string]string{telemetry.EnvEndpoint: "http://127.0.0.1:4318", telemetry.EnvSDKDisabled: "TRUE"}, false},
		{"not disabled", map[string]string{telemetry.EnvEndpoint: "http://127.0.0.1:4318", telemetry.EnvSDKDisabled: "false"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, telemetry.Enabled(func(k string) string { return tc.env[k] }))
		})
	}
}

func TestWithoutAnEndpointSetupInstallsNothing(t *testing.T) {
	clearOTelEnv(t)
	restoreGlobals(t)
	before := otel.GetTracerProvider()

	tr, err := telemetry.Setup(context.Background(), telemetry.WorkerService, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.False(t, tr.On())
	require.Nil(t, tr.Provider)
	require.Empty(t, tr.Interceptors(), "no interceptor: workflows and activities run as without tracing")
	require.Equal(t, before, otel.GetTracerProvider(), "the global provider is left as it was")
	require.NoError(t, tr.Shutdown(context.Background()))
}

func TestAGRPCProtocolIsRefusedNamingTheVariable(t *testing.T) {
	clearOTelEnv(t)
	restoreGlobals(t)
	t.Setenv(telemetry.EnvEndpoint, "http://127.0.0.1:4317")
	t.Setenv(telemetry.EnvTracesProtocol, "grpc")

	_, err := telemetry.Setup(context.Background(), telemetry.WorkerService, nil)
	require.ErrorContains(t, err, telemetry.EnvTracesProtocol+"=grpc")
	require.ErrorContains(t, err, "http/protobuf")
}

func TestSetupExportsSpansOverOTLPHTTPToTheEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name, service string
		env           map[string]string
	}{
		{"the default service name", telemetry.APIService, nil},
		{"OTEL_SERVICE_NAME", "api-eu-1", map[string]string{telemetry.EnvServiceName: "api-eu-1"}},
		{"gzip", telemetry.APIService, map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTelEnv(t)
			restoreGlobals(t)
			receiver := spantest.NewReceiver(t)
			t.Setenv(telemetry.EnvEndpoint, receiver.URL)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}

			tr, err := telemetry.Setup(context.Background(), telemetry.APIService, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			require.True(t, tr.On())
			require.Len(t, tr.Interceptors(), 1)
			require.Equal(t, tr.Provider, otel.GetTracerProvider(), "the provider is the global one, for libraries that use it")

			_, span := tr.Provider.Tracer("test").Start(context.Background(), "hello")
			traceID := span.SpanContext().TraceID().String()
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, tr.Shutdown(ctx), "shutdown flushes the batch")

			got := receiver.Spans().Named("hello")
			require.Len(t, got, 1)
			require.Equal(t, tc.service, got[0].Service)
			require.Equal(t, traceID, got[0].TraceID)
		})
	}
}

func TestSetupPropagatesW3CTraceContextAndBaggage(t *testing.T) {
	clearOTelEnv(t)
	restoreGlobals(t)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	t.Setenv(telemetry.EnvEndpoint, spantest.NewReceiver(t).URL)
	tr, err := telemetry.Setup(context.Background(), telemetry.WorkerService, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })

	require.ElementsMatch(t, []string{"traceparent", "tracestate", "baggage"}, otel.GetTextMapPropagator().Fields())
	ctx, span := tr.Provider.Tracer("test").Start(context.Background(), "outgoing")
	defer span.End()
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	require.Contains(t, carrier["traceparent"], span.SpanContext().TraceID().String())
}
