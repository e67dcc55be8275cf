package workflows

import (
	"slices"

	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// passage is one tool call's way through a batch, from its vetting to the
// result the model reads: one value per call, which each stage of the
// batch reads and adds to (vet, route, ask, await, verdict, run, record).
type passage struct {
	// index is the call's place in its batch, in the order the model
	// made the calls.
	index int
	// call is the call as the gate, the policy, a grant and the tool see
	// it (vetBatch); vetting what was known of it before the gate: why its
	// arguments were refused, or what the policy says of it.
	call    protocol.ToolCall
	vetting vetting
	// preview says what the call will do, as the worker read it, for a
	// call that may ask (turn.previews).
	preview string
	// sandbox is what the call did in the Bash sandbox before the gate
	// met it (turn.sandboxRuns): an approve applies its changes.
	sandbox *protocol.SandboxRun
	// contained is true when the sandboxed run may go on without a person
	// (turn.containedRuns).
	contained bool
	// route is the way the gate takes the call (routes).
	route *route
	// grant is the remembered decision that answered the call
	// (routeGranted); approval the request a person, its timer or the
	// turn decided (routeAsk). Each says who decided, and how.
	grant    *contract.Grant
	approval *approval
	// ran are the arguments the call ran with when a person edited them,
	// normalized as the tool ran them.
	ran string
	// result is what the model reads of the call: set when the gate
	// answers it (it never runs then), or when it ran.
	result protocol.ToolResult
	// row is the call's row in the audit ledger, for a call the gate
	// asked about or a grant answered.
	row *audit.Record
}

// answer settles what the model reads of the call.
func (p *passage) answer(result, status string) {
	p.result.Result, p.result.Status = result, status
}

// answered reports whether the call's result is settled: the gate
// answered it, or it ran.
func (p *passage) answered() bool { return p.result.Status != "" }

// batch is the passages of one batch of calls, in the order the model
// made them, and what holds for the whole batch.
type batch struct {
	// calls are the calls as vetBatch gives them (the passages' calls),
	// which the batch's request ids are made of (gate.batchRequestID).
	calls    []protocol.ToolCall
	passages []*passage
}

// waiting are the requests of the batch's calls that asked, in order.
func (b *batch) waiting() []*approval {
	var out []*approval
	for _, p := range b.passages {
		if p.approval != nil {
			out = append(out, p.approval)
		}
	}
	return out
}

// askedRows are the ledger's rows of the calls that asked, in order.
func (b *batch) askedRows() []audit.Record {
	var out []audit.Record
	for _, p := range b.passages {
		if p.approval != nil && p.row != nil {
			out = append(out, *p.row)
		}
	}
	return out
}

// askedBy is the passage whose request is a, or nil.
func (b *batch) askedBy(a *approval) *passage {
	for _, p := range b.passages {
		if p.approval == a {
			return p
		}
	}
	return nil
}

// results are what the model reads of the batch's calls, in order.
func (b *batch) results() []protocol.ToolResult {
	out := make([]protocol.ToolResult, len(b.passages))
	for i, p := range b.passages {
		out[i] = p.result
	}
	return out
}

// openBatch makes the passages of a batch: it vets the calls (vetBatch),
// sees whether the batch follows the strict gate, previews the calls that
// may ask, and runs those of Bash in the sandbox when the turn does, in
// that order.
func (t *turn) openBatch(ctx workflow.Context, calls []protocol.ToolCall) *batch {
	t.newBatchForLedger()
	t.gate.newBatch()
	t.cost = policy.NewBudget()
	calls, vetted := t.vetBatch(ctx, calls)
	t.strictGate(ctx, calls)
	b := &batch{calls: calls}
	previews := t.previews(ctx, calls, vetted)
	runs := t.sandboxRuns(ctx, calls, vetted)
	contained := t.containedRuns(ctx, runs)
	b.passages = make([]*passage, len(calls))
	for i, call := range calls {
		b.passages[i] = &passage{index: i, call: call, vetting: vetted[i], preview: previews[i], sandbox: runs[i], contained: contained[i],
			result: protocol.ToolResult{ID: call.ID, Name: call.Name}}
		switch r := runs[i]; {
		case r.Ran():
			b.passages[i].preview = r.Preview
		case r != nil:
			// Not run in the sandbox: the command as it will run, after
			// why (sandboxRuns).
			b.passages[i].preview = r.Preview + "\n" + previews[i]
		}
	}
	return b
}

// route sends p down the first route that takes it (routeOf), or down
// routeGranted when a remembered decision answers a call that would ask,
// and does what that route does as the gate meets the call.
func (t *turn) route(ctx workflow.Context, b *batch, p *passage) {
	in := routeInput{
		call: p.call, vetting: p.vetting,
		interrupted: t.interrupted, bypass: t.bypass,
		offered: offers(t.tools, p.call.Name), clientTool: offers(t.clientTools, p.call.Name),
		contained: p.contained,
	}
	p.route = routeOf(in)
	// While the gate is frozen no grant answers a call: it asks.
	if p.route.grantable && !p.vetting.Frozen {
		if in.grant = t.useGrant(ctx, p.call); in.grant != nil {
			p.grant, p.route = in.grant, routeOf(in)
		}
	}
	if p.route.pass != nil {
		p.route.pass(t, ctx, b, p)
	}
	t.shadowRow(ctx, p)
}

// awaitDecisions waits until every request of the batch is decided,
// writing each decision to the ledger as it is taken, then remembers the
// decisions a person asked to be remembered.
func (t *turn) awaitDecisions(ctx workflow.Context, b *batch) {
	if waiting := b.waiting(); len(waiting) > 0 {
		t.log.append(protocol.Event{Type: protocol.EventHeartbeat})
		asked := b.askedRows()
		t.writeAudit(ctx, asked)
		var onNews func([]*approval, []note)
		if len(asked) > 0 {
			onNews = t.ledgerDecisions(ctx, b, waiting)
		}
		t.gate.await(ctx, waiting, onNews, t.quickBatch(b))
	}
	turnID := workflow.GetInfo(ctx).WorkflowExecution.ID
	for _, p := range b.passages {
		if a := p.approval; a != nil && a.remember && (a.decision == protocol.DecisionApprove || a.decision == protocol.DecisionDecline) {
			t.remember(grantFrom(a, turnID))
		}
	}
}

// quickBatch says whether every call of b is one that the worker runs in
// milliseconds, a file tool of its own (Read, Write, Edit; no client's
// tool or MCP tool may take their names, and the sandbox runs only Bash):
// then the search attributes (TollgatePendingApprovals, TollgateStatus)
// follow the batch's decisions when its results are published, not in the
// workflow task that starts its tools (gate.waitEnded); a file call that
// stalls, on a slow disk say, holds them back at most its ToolTimeout. A
// batch that may run for longer (a command, an MCP tool, a subagent, a
// client's tool, a sandboxed run) is shown running from its decisions on,
// as before, since a list of waiting turns must not show it for minutes
// after. A turn of a level before levelStatusOffPath upserts at the
// decisions.
func (t *turn) quickBatch(b *batch) bool {
	if t.settings.PatchLevel < levelStatusOffPath {
		return false
	}
	return !slices.ContainsFunc(b.passages, func(p *passage) bool { return !fileTool(p.call.Name) })
}

// fileTool says whether name is one of the worker's file tools.
func fileTool(name string) bool {
	return name == protocol.ToolRead || name == protocol.ToolWrite || name == protocol.ToolEdit
}

// ledgerDecisions is what the gate's wait does with the decisions of the
// batch as they are taken: each reaches the ledger when it is taken, not
// when the last call of its batch is, and so does each vote and each
// escalation step, in rows of their own (auditNote). Off the decision
// path (levelLedgerOffPath), the rows of what ends the wait are owed
// instead: the batch's first activity carries them while it runs.
func (t *turn) ledgerDecisions(ctx workflow.Context, b *batch, waiting []*approval) func([]*approval, []note) {
	offPath := t.offPath(ctx)
	return func(decided []*approval, notes []note) {
		var out []audit.Record
		for _, n := range notes {
			if p := b.askedBy(n.a); p != nil && p.row != nil {
				// The call's row says where its votes and deciders stand
				// now: written again while it waits, for the inbox (GET
				// /approvals reads it), and kept by its decision's.
				p.row.Deciders, p.row.Votes = t.gate.standing(n.a)
				out = append(out, auditNote(*p.row, n))
				if !n.a.decided {
					out = append(out, *p.row)
				}
			}
		}
		for _, a := range decided {
			if p := b.askedBy(a); p != nil && p.row != nil {
				out = append(out, auditDecided(*p.row, a))
			}
		}
		if offPath && !slices.ContainsFunc(waiting, func(a *approval) bool { return !a.decided }) {
			t.owe(out)
			return
		}
		t.writeAudit(ctx, out)
	}
}

// verdict says whether p's call runs now, and as what: a call the gate
// answered does not, nor one whose request was declined or timed out, nor
// any once the turn is stopped; the model reads why (passage.answer).
func (t *turn) verdict(ctx workflow.Context, b *batch, p *passage) (protocol.ToolCall, bool) {
	if p.answered() {
		return protocol.ToolCall{}, false
	}
	call, runs := t.decided(ctx, b, p)
	if !runs {
		return call, false
	}
	if ctx.Err() != nil || t.interrupted {
		// A call approved before the turn was stopped does not start now.
		why, reason := notRunCancelled, reasonCancelled
		if t.interrupted {
			why, reason = notRunInterrupted, t.interruptReason
		}
		p.answer(t.notRun(ctx, why, reason), protocol.StatusDeclined)
		return call, false
	}
	return call, true
}

// decided applies the decision on p's request, if it asked: a timeout or
// a decline answers the model, and an approval runs the call with the
// arguments the person approved, normalized as the tool runs them when
// the batch's are (edits the tool would refuse reach it as they are, and
// it refuses them).
func (t *turn) decided(ctx workflow.Context, b *batch, p *passage) (protocol.ToolCall, bool) {
	call, a := p.call, p.approval
	switch {
	case a == nil:
	case a.decision == protocol.DecisionTimeout:
		p.answer(t.notRun(ctx, notRunTimeout, ""), protocol.StatusTimeout)
		return call, false
	case a.decision != protocol.DecisionApprove && a.decidedBy == DecidedByTurn:
		why := notRunInterrupted
		if a.reason == reasonCancelled {
			why = notRunCancelled
		}
		p.answer(t.notRun(ctx, why, a.reason), protocol.StatusDeclined)
		return call, false
	case a.decision != protocol.DecisionApprove:
		p.answer(t.notRun(ctx, notRunDeclined, a.reason), protocol.StatusDeclined)
		return call, false
	case a.arguments != "":
		call.Arguments = a.arguments
		if args, err := t.normalize(call); err == nil {
			call.Arguments = args
		}
		p.ran = call.Arguments
	}
	return call, true
}

// recordOutcomes completes the ledger's row of every call that has one
// with its outcome. Off the decision path (levelLedgerOffPath), the model
// call that reads the results carries them.
func (t *turn) recordOutcomes(ctx workflow.Context, b *batch) {
	var ended []audit.Record
	for _, p := range b.passages {
		if p.row != nil {
			r := auditEnded(ctx, *p.row, p.approval, p.ran, p.result)
			if p.result.Status != protocol.StatusDeclined && p.result.Status != protocol.StatusTimeout {
				r.Sandbox = p.sandboxWord()
			}
			ended = append(ended, r)
		}
	}
	if len(ended) > 0 && t.offPath(ctx) {
		t.owe(ended)
		return
	}
	t.writeAudit(ctx, ended)
}
