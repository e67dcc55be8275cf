package workflows

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/workflowtrace"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TracerScope names the tracer of the spans workflow code makes itself.
const TracerScope = "github.com/tollgate/tollgate/workflows"

// ApprovalSpanPrefix starts the name of an approval span; the tool's name
// follows ("approval Bash").
const ApprovalSpanPrefix = "approval "

// Attributes of an approval span. The tool and its call follow
// OpenTelemetry's conventions for generative AI; the rest are tollgate's.
const (
	AttrToolName       = "gen_ai.tool.name"
	AttrToolCallID     = "gen_ai.tool.call.id"
	AttrConversationID = "tollgate.conversation.id"
	AttrRequestID      = "tollgate.approval.request_id"
	// AttrDecision is approve, decline or timeout.
	AttrDecision = "tollgate.approval.decision"
	// AttrDecidedBy says what answered the call: one of the DecidedBy
	// values.
	AttrDecidedBy = "tollgate.approval.decided_by"
	// AttrPrincipal and AttrRole name who decided: the API token's
	// principal and role, a signal's principal, or the person whose
	// decision a grant remembers.
	AttrPrincipal = "tollgate.approval.principal"
	AttrRole      = "tollgate.approval.role"
	// AttrGrantID names the grant that answered, or that the decision made
	// (with AttrRemember).
	AttrGrantID  = "tollgate.approval.grant_id"
	AttrRemember = "tollgate.approval.remember"
	// AttrEdited is true when the call was approved with edited arguments.
	AttrEdited = "tollgate.approval.edited"
)

// What answered a call, the values of AttrDecidedBy.
const (
	// DecidedByPerson: a decision by Update or signal.
	DecidedByPerson = "person"
	// DecidedByTimer: no decision came before the call's timer fired.
	DecidedByTimer = "timer"
	// DecidedByTurn: the turn declined the call itself, cancelled or
	// interrupted by a new message.
	DecidedByTurn = "turn"
	// DecidedByGrant: a decision remembered earlier in the conversation.
	DecidedByGrant = "grant"
	// DecidedByPolicy: the policy requires no approval of the call.
	DecidedByPolicy = audit.DecidedByPolicy
	// DecidedByBypass: the turn was sent with bypassApproval.
	DecidedByBypass = "bypass"
)

// Approval spans are made in workflow code, which runs again on every
// replay and must issue the same commands each time. A span is no command:
// making one changes nothing in history, so it needs no patch. Two rules
// keep them honest:
//
//   - A span is made once, when the answer is taken live, never on replay
//     (workflow.IsReplaying): a replayed turn answers its calls again and
//     would report them twice.
//   - The whole span is made at that moment, with the request's workflow
//     time as its start and the decision's as its end, rather than started
//     at the request and ended at the decision: a turn may wait days, and
//     the worker that published the request may have evicted the turn from
//     its cache (or died) since, losing a span it had started. Workflow
//     times come from history, so the span measures the wait as the turn
//     saw it, on whichever worker decides.
//
// Its parent is the span of the workflow's run (the gate's); a decision
// that came with a span of its own (the approval Update's handler, whose
// parent is the API's decision request) is linked.

// traceDecision makes the span of a's wait for a decision, which decide
// has just recorded, made by decidedBy.
func (g *gate) traceDecision(ctx workflow.Context, a *approval, decidedBy string) {
	parent := g.span.OTel()
	if parent == nil || workflow.IsReplaying(ctx) {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String(AttrToolName, a.Call.Name),
		attribute.String(AttrToolCallID, a.Call.ID),
		attribute.String(AttrConversationID, g.conversationID),
		attribute.String(AttrRequestID, a.RequestID),
		attribute.String(AttrDecision, a.decision),
		attribute.String(AttrDecidedBy, decidedBy),
	}
	if decidedBy == DecidedByPerson {
		attrs = append(attrs, attribute.String(AttrPrincipal, a.by), attribute.String(AttrRole, a.role))
	}
	if a.remember {
		attrs = append(attrs, attribute.Bool(AttrRemember, true), attribute.String(AttrGrantID, grantID(a.RequestID)))
	}
	if a.arguments != "" {
		attrs = append(attrs, attribute.Bool(AttrEdited, true))
	}
	opts := []trace.SpanStartOption{trace.WithTimestamp(a.RequestedAt), trace.WithAttributes(attrs...)}
	if by := workflowtrace.SpanOf(ctx).OTel(); by != nil && !by.SpanContext().Equal(parent.SpanContext()) {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: by.SpanContext()}))
	}
	startSpan(parent, a.Call.Name, opts).End(trace.WithTimestamp(a.decidedAt))
}

// traceAnswer makes the span of a call that the gate answered without
// waiting: by a grant, the policy or the turn's bypass. It lasts no time.
func (g *gate) traceAnswer(ctx workflow.Context, call protocol.ToolCall, decidedBy string, grant *contract.Grant) {
	parent := g.span.OTel()
	if parent == nil || workflow.IsReplaying(ctx) {
		return
	}
	decision := protocol.DecisionApprove
	attrs := []attribute.KeyValue{
		attribute.String(AttrToolName, call.Name),
		attribute.String(AttrToolCallID, call.ID),
		attribute.String(AttrConversationID, g.conversationID),
		attribute.String(AttrDecidedBy, decidedBy),
	}
	if grant != nil {
		decision = grant.Decision
		attrs = append(attrs, attribute.String(AttrGrantID, grant.ID), attribute.String(AttrPrincipal, grant.By))
	}
	attrs = append(attrs, attribute.String(AttrDecision, decision))
	now := workflow.Now(ctx)
	startSpan(parent, call.Name, []trace.SpanStartOption{trace.WithTimestamp(now), trace.WithAttributes(attrs...)}).
		End(trace.WithTimestamp(now))
}

// startSpan starts the approval span of tool under parent, with the
// parent's tracer provider: the one the worker traces with.
func startSpan(parent trace.Span, tool string, opts []trace.SpanStartOption) trace.Span {
	ctx := trace.ContextWithSpan(context.Background(), parent)
	_, span := parent.TracerProvider().Tracer(TracerScope).Start(ctx, ApprovalSpanPrefix+tool, opts...)
	return span
}
