package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// route is one way through the gate: which calls take it, and what the
// gate does with a call on it when it meets the call. Whatever happens
// after that follows from the passage, not from its route: a call the
// gate answered never runs, a call that asked runs as its person decided,
// and any other runs; a call with a ledger row gets its outcome there.
type route struct {
	// name says the route in tests and docs.
	name string
	// takes reports whether a call takes this route. A call takes the
	// first route of routes that takes it; takes reads only its input.
	takes func(routeInput) bool
	// grantable is true of a route that a remembered decision may take
	// the call off: the gate looks for a grant that answers it (useGrant,
	// which counts the use, so it is asked only here), and routes the
	// call again with it.
	grantable bool
	// pass is what the gate does with the call as it meets it, in the
	// order of the batch: it answers it (passage.answer: the call never
	// runs), lets it through, or asks a person. Nil lets it through
	// without a word. It may issue commands: routing a batch issues them
	// call after call.
	pass func(t *turn, ctx workflow.Context, b *batch, p *passage)
}

// routeInput is what decides a call's route.
type routeInput struct {
	// call is the call as vetBatch gives it; vetting what was known of
	// it before the gate.
	call    protocol.ToolCall
	vetting vetting
	// interrupted is true once the turn was stopped; bypass when its
	// sender asked to bypass approval.
	interrupted, bypass bool
	// offered is true when the loop offers a tool of the call's name;
	// clientTool when the client runs it.
	offered, clientTool bool
	// grant is the remembered decision that answers the call, looked up
	// only for a call on a grantable route.
	grant *contract.Grant
	// contained is true when the call ran in the sandbox, touched no file
	// the policy protects, and Bash's rule lets such calls go on unasked
	// (turn.containedRuns).
	contained bool
}

// The routes, in the order they are tried: a call takes the first that
// takes it. A new way through the gate is a new entry here, with a case
// in TestEveryRouteTakesItsCalls.
var routes = []*route{
	routeInterrupted, routeUnknownTool, routeRefused, routeNotObject,
	routeBypassed, routeNoRule, routeGranted, routeContained, routeAsk,
}

var (
	// routeInterrupted: the turn was stopped (a new message, an
	// interrupt) before the gate met the call.
	routeInterrupted = &route{
		name:  "interrupted",
		takes: func(in routeInput) bool { return in.interrupted },
		pass: func(t *turn, ctx workflow.Context, _ *batch, p *passage) {
			p.answer(t.notRun(ctx, notRunInterrupted, t.interruptReason), protocol.StatusDeclined)
		},
	}
	// routeUnknownTool: the loop offers no tool of the call's name.
	routeUnknownTool = &route{
		name:  "unknown tool",
		takes: func(in routeInput) bool { return !in.offered },
		pass: func(_ *turn, _ workflow.Context, _ *batch, p *passage) {
			p.answer(fmt.Sprintf("Error: there is no tool named %q.", p.call.Name), protocol.StatusError)
		},
	}
	// routeRefused: vetting refused the call's arguments
	// (patchNormalizedCalls).
	routeRefused = &route{
		name:  "refused",
		takes: func(in routeInput) bool { return in.vetting.Refused != "" },
		pass: func(_ *turn, _ workflow.Context, _ *batch, p *passage) {
			p.answer(fmt.Sprintf("Error: %s was not run: %s.", p.call.Name, p.vetting.Refused), protocol.StatusError)
		},
	}
	// routeNotObject: the call's arguments are not a JSON object.
	routeNotObject = &route{
		name:  "not a JSON object",
		takes: func(in routeInput) bool { return !protocol.IsJSONObject(in.call.Arguments) },
		pass: func(_ *turn, _ workflow.Context, _ *batch, p *passage) {
			p.answer(fmt.Sprintf("Error: the arguments of %s are not a JSON object: %s", p.call.Name, p.call.Arguments), protocol.StatusError)
		},
	}
	// routeBypassed: the turn bypasses approval, no rule requires the
	// tool always (only such a rule still asks), and the gate is not
	// frozen.
	routeBypassed = &route{
		name:  "bypassed",
		takes: func(in routeInput) bool { return in.bypass && !in.vetting.Check.Always && !in.vetting.Frozen },
		pass: func(t *turn, ctx workflow.Context, _ *batch, p *passage) {
			t.gate.traceAnswer(ctx, p.call, DecidedByBypass, nil)
		},
	}
	// routeNoRule: the policy requires no approval of the call.
	routeNoRule = &route{
		name:  "no rule",
		takes: func(in routeInput) bool { return !in.vetting.Check.Required },
		pass: func(t *turn, ctx workflow.Context, _ *batch, p *passage) {
			t.gate.traceAnswer(ctx, p.call, DecidedByPolicy, nil)
		},
	}
	// routeGranted: a remembered decision answers the call that would
	// ask; one that declines it answers the model at once. While the gate
	// is frozen none does (the gate does not look for one either).
	routeGranted = &route{
		name:  "granted",
		takes: func(in routeInput) bool { return in.grant != nil && !in.vetting.Frozen },
		pass:  passGranted,
	}
	// routeContained: the call ran in the sandbox first and touched no
	// file the policy protects, and Bash's rule says sandbox: auto: its
	// changes apply without a person, unless the gate is frozen. A grant
	// still answers it first (a remembered decline holds).
	routeContained = &route{
		name:      "contained",
		takes:     func(in routeInput) bool { return in.contained && !in.vetting.Frozen },
		grantable: true,
		pass:      passContained,
	}
	// routeAsk: a person decides (the approval request, its timer).
	routeAsk = &route{
		name:      "ask",
		takes:     func(routeInput) bool { return true },
		grantable: true,
		pass:      passAsk,
	}
)

// routeOf is the route a call takes: the first of routes that takes it.
func routeOf(in routeInput) *route {
	for _, r := range routes {
		if r.takes(in) {
			return r
		}
	}
	panic("no route takes the call") // cannot happen: routeAsk takes every call
}

// passGranted publishes the decision of the grant that answers p, and
// its ledger row.
func passGranted(t *turn, ctx workflow.Context, _ *batch, p *passage) {
	g := p.grant
	t.gate.traceAnswer(ctx, p.call, DecidedByGrant, g)
	if t.auditing(ctx) {
		r := t.auditGranted(ctx, p.index, p.call, p.vetting.Check, g)
		p.row = &r
	}
	t.log.append(protocol.Event{Type: protocol.EventApprovalDecision, ToolCallID: p.call.ID, Decision: g.Decision, Reason: reasonRemembered, Grant: g.ID, By: g.By,
		GrantUsesLeft: grantUsesLeft(g), GrantExpiresAt: g.ExpiresAt})
	if g.Decision != protocol.DecisionApprove {
		p.answer(t.notRun(ctx, notRunRemembered, ""), protocol.StatusDeclined)
	}
}

// reasonFrozen is the note of a request made while the gate is frozen
// (vetting.Frozen): a grant, sandbox: auto or a bypass might have
// answered it otherwise.
const reasonFrozen = "the gate is frozen: every protected call asks"

// passAsk publishes the approval request of p, and its ledger row. Its
// id is made with the batch's (levelBatchIDs), or alone before that level.
func passAsk(t *turn, ctx workflow.Context, b *batch, p *passage) {
	c := p.vetting.Check
	if c.Problem != "" {
		workflow.GetLogger(ctx).Warn("policy fails closed", "toolCallId", p.call.ID, "problem", c.Problem)
	}
	note := c.Problem
	if note == "" && p.vetting.Frozen {
		note = reasonFrozen
	}
	if t.settings.PatchLevel >= levelBatchIDs {
		p.approval = t.gate.requestAs(ctx, t.gate.batchRequestID(ctx, b.calls, p.index), p.call, c.Timeout, note, p.preview, p.sandbox)
	} else {
		p.approval = t.gate.request(ctx, p.call, c.Timeout, note, p.preview)
	}
	if t.auditing(ctx) {
		r := t.auditAsked(ctx, p.approval, c)
		if p.approval.sandboxed {
			r.Sandbox = audit.SandboxPreview
		}
		p.row = &r
	}
}
