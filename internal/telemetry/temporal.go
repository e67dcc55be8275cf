package telemetry

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/internal/workflowtrace"
)

// TemporalScope names the tracer of the Temporal SDK's spans.
const TemporalScope = "go.temporal.io/sdk"

// Interceptors are the Temporal client interceptors of t: the SDK's
// OpenTelemetry tracing interceptor, or none when t is off. Set on the
// client, it traces the client's calls (StartWorkflow, UpdateWorkflow,
// SignalWorkflow: their span travels in the request's header) and, on a
// worker made from the client, every workflow, activity, child workflow,
// signal and update, each as a child of the span that started it.
//
// Queries are not traced: the API's stream poller queries each turn after
// every change of its history, and each query would make a trace of its
// own.
func (t Tracing) Interceptors() []interceptor.ClientInterceptor {
	if !t.On() {
		return nil
	}
	return []interceptor.ClientInterceptor{NewTracingInterceptor(t.Provider)}
}

// NewTracingInterceptor is the Temporal tracing interceptor that makes its
// spans with tp. Export its spans through LiveOnly.
func NewTracingInterceptor(tp trace.TracerProvider) interceptor.Interceptor {
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:              tp.Tracer(TemporalScope),
		SpanContextKey:      workflowtrace.ContextKey,
		DisableQueryTracing: true,
	})
	if err != nil {
		// NewTracingInterceptor fails only for options it never sees here.
		panic(err)
	}
	return tracingInterceptor{Interceptor: i}
}

// ReplayedAttribute marks a span that a worker made while it only replayed
// a workflow's history, and that LiveOnly leaves out.
//
// The SDK's interceptor starts a workflow's run span, and an Update
// handler's, every time a worker runs the workflow's code, replays
// included: it needs a parent for what the workflow does next. A worker
// replays a closed turn for every query (the API's stream asks a turn for
// its last events once it has closed), so each turn would show its run
// twice. A span that ends before the replay has caught up with history
// parents nothing new: it is marked and dropped. One that goes on live (a
// turn resumed on another worker) is kept, with what it parents.
const ReplayedAttribute = "tollgate.replayed"

// tracingInterceptor is the SDK's tracing interceptor with replayMarker
// inside it, where the run's and the Update's spans are on the context.
type tracingInterceptor struct {
	interceptor.Interceptor
}

func (t tracingInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return t.Interceptor.InterceptWorkflow(ctx, &replayMarker{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}})
}

// replayMarker marks the span of a run or an Update handler that ends
// while the workflow is still replaying.
type replayMarker struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (m *replayMarker) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	defer markReplayed(ctx)
	return m.Next.ExecuteWorkflow(ctx, in)
}

func (m *replayMarker) ExecuteUpdate(ctx workflow.Context, in *interceptor.UpdateInput) (any, error) {
	defer markReplayed(ctx)
	return m.Next.ExecuteUpdate(ctx, in)
}

func markReplayed(ctx workflow.Context) {
	if span := workflowtrace.SpanOf(ctx).OTel(); span != nil && workflow.IsReplaying(ctx) {
		span.SetAttributes(attribute.Bool(ReplayedAttribute, true))
	}
}

// LiveOnly is exporter without the spans marked ReplayedAttribute.
func LiveOnly(exporter sdktrace.SpanExporter) sdktrace.SpanExporter {
	return liveOnly{SpanExporter: exporter}
}

type liveOnly struct {
	sdktrace.SpanExporter
}

func (l liveOnly) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	live := make([]sdktrace.ReadOnlySpan, 0, len(spans))
	for _, s := range spans {
		if !slices.Contains(s.Attributes(), attribute.Bool(ReplayedAttribute, true)) {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return l.SpanExporter.ExportSpans(ctx, live)
}
