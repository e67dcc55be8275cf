package workflows

import (
	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
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
	call    activities.ToolCall
	vetting vetting
	// preview says what the call will do, as the worker read it, for a
	// call that may ask (turn.previews).
	preview string
	// route is the way the gate takes the call (routes).
	route *route
	// grant is the remembered decision that answered the call
	// (routeGranted); approval the request a person, its timer or the
	// turn decided (routeAsk). Each says who decided, and how.
	grant    *Grant
	approval *approval
	// ran are the arguments the call ran with when a person edited them,
	// normalized as the tool ran them.
	ran string
	// result is what the model reads of the call: set when the gate
	// answers it (it never runs then), or when it ran.
	result ToolResult
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
	calls    []activities.ToolCall
	passages []*passage
	// strict is true when the batch follows patchStrictGate
	// (turn.strictGate); normalized when its arguments were normalized
	// (patchNormalizedCalls), and so is what a person edits.
	strict, normalized bool
}
