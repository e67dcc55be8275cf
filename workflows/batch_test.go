package workflows

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// decideAll sends b as the approvals Update; the outcome fills in as the
// workflow handles it.
func (h *harness) decideAll(b protocol.ApprovalBatch) *batchOutcome {
	o := &batchOutcome{}
	h.env.UpdateWorkflow(contract.ApprovalsUpdate, "", &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { o.rejected = err },
		OnComplete: func(v any, err error) {
			if r, ok := v.(protocol.ApprovalBatchResult); ok {
				o.result = r
			}
			if err != nil {
				o.rejected = err
			}
		},
	}, b)
	return o
}

// batchOutcome records how the approvals Update ended.
type batchOutcome struct {
	rejected error
	result   protocol.ApprovalBatchResult
}

// requestIDs are the ids of the turn's approval requests, in order.
func (h *harness) requestIDs() []string {
	var ids []string
	for _, e := range h.events() {
		if e.Type == protocol.EventApprovalRequest {
			ids = append(ids, e.RequestID)
		}
	}
	return ids
}

func TestOneUpdateDecidesTenCallsAndTheyRunInOrder(t *testing.T) {
	var batch []protocol.ToolCall
	var want []string
	for i := range 10 {
		batch = append(batch, call(fmt.Sprintf("w%d", i), "Write", fmt.Sprintf(`{"file_path":"f%d","content":"x"}`, i)))
		want = append(want, fmt.Sprintf(`{"file_path":"f%d","content":"x"}`, i))
	}
	h := newHarness(t, testSettings(), calls(batch...))
	var o *batchOutcome
	h.env.RegisterDelayedCallback(func() {
		var ds []protocol.ApprovalDecision
		for _, id := range h.requestIDs() {
			ds = append(ds, protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Principal: "ops", Role: "approve"})
		}
		require.Len(t, ds, 10)
		o = h.decideAll(protocol.ApprovalBatch{Decisions: ds})
	}, time.Minute)

	out := h.runTurn(userTurn("write ten files"))

	require.NoError(t, o.rejected)
	require.Equal(t, protocol.ApprovalBatchResult{Accepted: true, Decided: 10}, o.result)
	var ran []string
	for _, c := range h.toolCalls {
		ran = append(ran, c.Arguments)
	}
	require.Equal(t, want, ran, "every call ran, in the model's order")
	decisions := ofType(out.Events, protocol.EventApprovalDecision)
	require.Len(t, decisions, 10)
	for i, e := range decisions {
		require.Equal(t, fmt.Sprintf("w%d", i), e.ToolCallID)
		require.Equal(t, "ops", e.By)
	}
}

func TestABatchWithOneRefusedDecisionTakesNoneAndNamesIt(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{{Tool: protocol.ToolBash, Require: RequireAlways, SecondPerson: true}}
	h := newHarness(t, settings, calls(
		call("w1", "Write", `{"file_path":"a","content":"1"}`),
		call("w2", "Write", `{"file_path":"b","content":"2"}`),
		call("b", "Bash", `{"command":"make"}`),
	))
	approve := func(id, by string) protocol.ApprovalDecision {
		return protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Principal: by, Role: "approve"}
	}
	refused := map[string]*batchOutcome{}
	var pendingAfter []protocol.PendingApproval
	var accepted *batchOutcome
	var single *updateOutcome
	var w1, w2, bash string
	h.env.RegisterDelayedCallback(func() {
		w1, w2, bash = h.requestID("Write"), h.requestIDs()[1], h.requestID("Bash")
		// w2 is decided alone first, so a batch naming it names a decided request.
		single = h.decide(approve(w2, "ops"))
	}, 30*time.Second)
	h.env.RegisterDelayedCallback(func() {
		refused["unknown"] = h.decideAll(protocol.ApprovalBatch{Decisions: []protocol.ApprovalDecision{approve(w1, "ops"), approve(contract.NewRequestID(workflowOf(w1), "0123"), "ops")}})
		refused["decided"] = h.decideAll(protocol.ApprovalBatch{Decisions: []protocol.ApprovalDecision{approve(w1, "ops"), approve(w2, "ops")}})
		refused["forbidden"] = h.decideAll(protocol.ApprovalBatch{Decisions: []protocol.ApprovalDecision{approve(w1, "dev"), approve(bash, "dev")}})
		refused["twice"] = h.decideAll(protocol.ApprovalBatch{Decisions: []protocol.ApprovalDecision{approve(w1, "ops"), approve(w1, "ops")}})
		refused["empty"] = h.decideAll(protocol.ApprovalBatch{})
		refused["too many"] = h.decideAll(protocol.ApprovalBatch{Decisions: make([]protocol.ApprovalDecision, 101)})
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(contract.PendingQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&pendingAfter))
		accepted = h.decideAll(protocol.ApprovalBatch{Decisions: []protocol.ApprovalDecision{approve(w1, "dev"), approve(bash, "ops")}})
	}, 90*time.Second)
	in := userTurn("write and build")
	in.Sender = "dev"

	out := h.runTurn(in)

	require.NoError(t, single.rejected)
	require.Len(t, pendingAfter, 2, "no refused batch took any of its decisions")
	for name, want := range map[string]struct{ reason, request, message string }{
		"unknown":   {protocol.RejectUnknown, "/apr-0123", "unknown request"},
		"decided":   {protocol.RejectDecided, w2, "already decided"},
		"forbidden": {protocol.RejectForbidden, bash, `Bash calls need a second person: "dev" sent the message`},
		"twice":     {protocol.RejectInvalid, w1, "decided twice in the batch"},
		"empty":     {protocol.RejectInvalid, "", "the batch holds no decisions"},
		"too many":  {protocol.RejectInvalid, "", "101 decisions, more than the limit of 100"},
	} {
		o := refused[name]
		require.Error(t, o.rejected, name)
		require.Equal(t, want.reason, contract.RejectionReason(o.rejected), "%s: %v", name, o.rejected)
		require.Contains(t, contract.RejectedRequest(o.rejected), want.request, name)
		if want.request == "" {
			require.Empty(t, contract.RejectedRequest(o.rejected), name)
		}
		require.ErrorContains(t, o.rejected, want.message, name)
	}
	require.NoError(t, accepted.rejected)
	require.Equal(t, []string{"Write", "Write", "Bash"}, h.ranTools())
	by := map[string]string{}
	for _, e := range ofType(out.Events, protocol.EventApprovalDecision) {
		by[e.ToolCallID] = e.By
	}
	require.Equal(t, map[string]string{"w1": "dev", "w2": "ops", "b": "ops"}, by)
}

func workflowOf(requestID string) string {
	wid, _ := contract.RequestWorkflowID(requestID)
	return wid
}
