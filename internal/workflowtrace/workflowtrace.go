// Package workflowtrace reads and sets the span that the Temporal SDK's
// tracing interceptor keeps on a workflow context, for workflow code that
// makes spans of its own or chooses the parent of a command's span.
//
// It is a leaf apart from internal/telemetry, which sets tracing up, so
// that what imports the workflows links no exporter.
package workflowtrace

import (
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
)

// ContextKey is the key under which the tracing interceptor keeps the
// current span on a workflow context (its TracerOptions.SpanContextKey):
// tollgate's own rather than the contrib's unexported default, so that
// workflow code can read the span and set it.
var ContextKey any = key{}

type key struct{}

// Span is the span the tracing interceptor keeps on a workflow context:
// the workflow's run, or the signal or Update being handled. The zero Span
// is no span (a worker without tracing, or a replayer).
type Span struct {
	ref interceptor.TracerSpan
}

// SpanOf is the span on ctx.
func SpanOf(ctx workflow.Context) Span {
	ref, _ := ctx.Value(ContextKey).(interceptor.TracerSpan)
	return Span{ref: ref}
}

// WithSpan makes s the span that the interceptor parents the spans of
// commands issued with the returned context to (a child workflow's start,
// an activity's). The zero Span leaves ctx as it is.
func WithSpan(ctx workflow.Context, s Span) workflow.Context {
	if s.ref == nil {
		return ctx
	}
	return workflow.WithValue(ctx, ContextKey, s.ref)
}

// OTel is s as an OpenTelemetry span, or nil for the zero Span. The contrib
// interceptor's spans embed the OpenTelemetry span they wrap.
func (s Span) OTel() trace.Span {
	span, _ := s.ref.(trace.Span)
	return span
}
