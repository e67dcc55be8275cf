package telemetry

import (
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
)

// TemporalScope names the tracer of the Temporal SDK's spans.
const TemporalScope = "go.temporal.io/sdk"

// spanKey is the key under which the tracing interceptor keeps the current
// span on a workflow context. It is the package's own, not the contrib's
// unexported default, so that workflow code can read the span (SpanOf) and
// choose the parent of the next command's span (WithSpan).
type spanKey struct{}

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
// spans with tp.
func NewTracingInterceptor(tp trace.TracerProvider) interceptor.Interceptor {
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:              tp.Tracer(TemporalScope),
		SpanContextKey:      spanKey{},
		DisableQueryTracing: true,
	})
	if err != nil {
		// NewTracingInterceptor fails only for options it never sees here.
		panic(err)
	}
	return i
}

// Span is the span the tracing interceptor keeps on a workflow context:
// the workflow's run, or the signal or update being handled. The zero Span
// is no span (a worker without tracing, or a replayer).
type Span struct {
	ref interceptor.TracerSpan
}

// SpanOf is the span on ctx.
func SpanOf(ctx workflow.Context) Span {
	ref, _ := ctx.Value(spanKey{}).(interceptor.TracerSpan)
	return Span{ref: ref}
}

// WithSpan makes s the span that the interceptor parents the spans of
// commands issued with the returned context to (a child workflow's start,
// an activity's). The zero Span leaves ctx as it is.
func WithSpan(ctx workflow.Context, s Span) workflow.Context {
	if s.ref == nil {
		return ctx
	}
	return workflow.WithValue(ctx, spanKey{}, s.ref)
}

// OTel is s as an OpenTelemetry span, or nil for the zero Span. The contrib
// interceptor's spans embed the OpenTelemetry span they wrap.
func (s Span) OTel() trace.Span {
	span, _ := s.ref.(trace.Span)
	return span
}
