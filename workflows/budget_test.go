package workflows

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

func reads(n int) []activities.ModelOutput {
	out := make([]activities.ModelOutput, n)
	for i := range out {
		out[i] = calls(call("r"+string(rune('0'+i)), "Read", `{"file_path":"a.txt"}`))
	}
	return out
}

// budgetRequest waits for the turn's budget request and returns it and its
// arguments.
func (h *harness) budgetRequest() (protocol.Event, BudgetRequest) {
	h.t.Helper()
	for _, e := range h.events() {
		if e.Type == protocol.EventApprovalRequest && e.Kind == protocol.KindBudget {
			var req BudgetRequest
			require.NoError(h.t, json.Unmarshal([]byte(e.Arguments), &req))
			return e, req
		}
	}
	h.t.Fatal("no budget request")
	return protocol.Event{}, BudgetRequest{}
}

func TestAToolCallBudgetAsksBeforeGoingOnAndApprovingRaisesIt(t *testing.T) {
	settings := testSettings()
	settings.Budgets = contract.Budgets{TurnToolCalls: 2}
	h := newHarness(t, settings, reads(3)...)
	var asked BudgetRequest
	var request protocol.Event
	h.env.RegisterDelayedCallback(func() {
		request, asked = h.budgetRequest()
		h.decide(protocol.ApprovalDecision{RequestID: request.RequestID, Decision: protocol.DecisionApprove, Principal: "bob"})
	}, time.Minute)

	out := h.runTurn(userTurn("read it thrice"))

	require.Equal(t, BudgetRequest{Budget: "turn tool calls", Limit: 2, Spent: 2, RaiseTo: 4, Unit: "tool calls"}, asked)
	require.Equal(t, protocol.BudgetTool, request.ToolName)
	require.Contains(t, request.Reason, "the turn tool calls budget is spent: 2 of 2 tool calls")
	require.Equal(t, protocol.FinishStop, out.FinishReason, "approved, the turn went on")
	require.Equal(t, []string{"Read", "Read", "Read"}, h.ranTools())
	require.Len(t, ofType(out.Events, protocol.EventApprovalRequest), 1, "raised to 4, three calls ask no more")
	require.Equal(t, 3, out.Usage.ToolCalls)
	d := findEvent(t, out.Events, protocol.EventApprovalDecision)
	require.Equal(t, "bob", d.By)
}

func TestADeclinedBudgetEndsTheTurnSayingWhy(t *testing.T) {
	settings := testSettings()
	settings.Budgets = contract.Budgets{TurnToolCalls: 1}
	h := newHarness(t, settings, reads(3)...)
	h.env.RegisterDelayedCallback(func() {
		request, _ := h.budgetRequest()
		h.decide(protocol.ApprovalDecision{RequestID: request.RequestID, Decision: protocol.DecisionDecline, Reason: "enough reading"})
	}, time.Minute)

	out := h.runTurn(userTurn("read"))

	require.Equal(t, protocol.FinishBudget, out.FinishReason)
	finish := out.Events[len(out.Events)-1]
	require.Equal(t, protocol.FinishBudget, finish.Reason)
	require.Contains(t, finish.Message, "the turn tool calls budget is spent (1 of 1 tool calls) and a person declined to raise it (enough reading)")
	require.Equal(t, []string{"Read"}, h.ranTools())
	require.Len(t, h.modelInputs, 1, "no model call after the budget ran out")
}

func TestATokenBudgetCountsWhatTheModelReportsAndNoDecisionEndsTheTurn(t *testing.T) {
	settings := testSettings()
	settings.Budgets = contract.Budgets{TurnTokens: 1000}
	replies := reads(3)
	for i := range replies {
		replies[i].Tokens = 600
	}
	h := newHarness(t, settings, replies...)

	out := h.runTurn(userTurn("read"))

	require.True(t, h.modelInputs[0].WantUsage, "a token budget asks the server for usage")
	require.Equal(t, protocol.FinishBudget, out.FinishReason)
	require.Contains(t, out.Events[len(out.Events)-1].Message, "the turn tokens budget is spent (1200 of 1000 tokens) and nobody decided in time")
	require.Equal(t, 1200, out.Usage.Tokens)
	require.Len(t, h.modelInputs, 2)
}

func TestAPersonMayRaiseABudgetByAnotherAmount(t *testing.T) {
	settings := testSettings()
	settings.Budgets = contract.Budgets{TurnToolCalls: 1}
	h := newHarness(t, settings, reads(4)...)
	asks := 0
	var lower *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		request, _ := h.budgetRequest()
		asks++
		lower = h.decide(protocol.ApprovalDecision{RequestID: request.RequestID, Decision: protocol.DecisionApprove, Arguments: `{"raiseTo":1}`})
		h.decide(protocol.ApprovalDecision{RequestID: request.RequestID, Decision: protocol.DecisionApprove, Arguments: `{"raiseTo":10}`})
	}, time.Minute)

	out := h.runTurn(userTurn("read"))

	require.Equal(t, protocol.RejectInvalid, contract.RejectionReason(lower.rejected), "a raise that raises nothing is refused")
	require.ErrorContains(t, lower.rejected, "raiseTo must be a whole number above 1")

	require.Equal(t, protocol.FinishStop, out.FinishReason)
	require.Equal(t, 1, asks)
	require.Len(t, ofType(out.Events, protocol.EventApprovalRequest), 1, "raised to 10: four calls ask no more")
	require.Len(t, h.ranTools(), 4)
}

func TestAConversationBudgetCountsEveryTurnAndKeepsItsRaise(t *testing.T) {
	settings := testSettings()
	settings.Budgets = contract.Budgets{ConversationToolCalls: 1}
	read := calls(call("r", "Read", `{"file_path":"a.txt"}`))
	done := activities.ModelOutput{Content: "done"}
	h := newHarness(t, settings, read, done, read, done, read, done)
	var r1, r2, r3 contract.TurnRef
	var second BudgetRequest
	h.env.RegisterDelayedCallback(func() { h.send("one", &r1) }, time.Second)
	h.env.RegisterDelayedCallback(func() { h.send("two", &r2) }, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		// Turn 2 asks at once: turn 1 spent the conversation's one call.
		v, err := h.env.QueryWorkflowByID(r2.TurnID, contract.PendingQuery)
		require.NoError(t, err)
		var pending []protocol.PendingApproval
		require.NoError(t, v.Get(&pending))
		require.Len(t, pending, 1)
		require.Equal(t, protocol.BudgetTool, pending[0].ToolName)
		require.NoError(t, json.Unmarshal([]byte(pending[0].Arguments), &second))
		require.NoError(t, h.env.UpdateWorkflowByID(r2.TurnID, contract.ApprovalUpdate, "raise", noRejection(t),
			protocol.ApprovalDecision{RequestID: pending[0].RequestID, Decision: protocol.DecisionApprove}))
	}, 2*time.Minute)
	h.env.RegisterDelayedCallback(func() { h.send("three", &r3) }, 3*time.Minute)
	var third []protocol.PendingApproval
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflowByID(r3.TurnID, contract.PendingQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&third))
		h.env.CancelWorkflow()
	}, 4*time.Minute)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "c1"})

	require.Equal(t, BudgetRequest{Budget: "conversation tool calls", Limit: 1, Spent: 1, RaiseTo: 2, Unit: "tool calls"}, second)
	require.Len(t, third, 1, "turn 3 finds the raise kept (2) and spent by turn 2, so it asks again")
	var req BudgetRequest
	require.NoError(t, json.Unmarshal([]byte(third[0].Arguments), &req))
	require.Equal(t, int64(2), req.Limit)
	require.Equal(t, []string{"Read", "Read"}, h.ranTools())
}

func TestASubagentsSpendingCountsForItsTurn(t *testing.T) {
	settings := subagentSettings()
	settings.Budgets = contract.Budgets{TurnToolCalls: 2}
	h := newHarness(t, settings,
		task("auditor", "read twice"),
		calls(call("a", "Read", `{"file_path":"a"}`), call("b", "Read", `{"file_path":"b"}`)),
		activities.ModelOutput{Content: "read both"},
		activities.ModelOutput{Content: "never asked for"},
	)

	out := h.runTurn(userTurn("delegate"))

	require.Equal(t, protocol.FinishBudget, out.FinishReason, "the Task and its two Reads are three tool calls")
	require.Contains(t, out.Events[len(out.Events)-1].Message, "3 of 2 tool calls")
	require.Equal(t, 3, out.Usage.ToolCalls)
	require.NotContains(t, eventTypes(out.Events), "subagent_approval_request", "the subagent itself does not ask")
}

func TestTurnsWithoutBudgetsAskForNoUsage(t *testing.T) {
	h := newHarness(t, testSettings(), reads(1)...)
	out := h.runTurn(userTurn("read"))
	require.False(t, h.modelInputs[0].WantUsage)
	require.Equal(t, protocol.FinishStop, out.FinishReason)
	require.Equal(t, 1, out.Usage.ToolCalls)
}

func TestANewMessageWhileABudgetWaitsEndsTheTurnAsCancelled(t *testing.T) {
	settings := testSettings()
	settings.Budgets = contract.Budgets{ConversationToolCalls: 1}
	read := calls(call("r", "Read", `{"file_path":"a.txt"}`))
	h := newHarness(t, settings, read, activities.ModelOutput{Content: "done"}, activities.ModelOutput{Content: "the new message's answer"})
	var r1, r2, r3 contract.TurnRef
	h.env.RegisterDelayedCallback(func() { h.send("one", &r1) }, time.Second)
	h.env.RegisterDelayedCallback(func() { h.send("two", &r2) }, time.Minute)
	// Turn 2 waits for its budget; a third message interrupts it.
	h.env.RegisterDelayedCallback(func() { h.send("three", &r3) }, 2*time.Minute)
	var events []protocol.Event
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflowByID(r2.TurnID, contract.EventsQuery, contract.EventsRequest{})
		require.NoError(t, err)
		var resp contract.EventsResponse
		require.NoError(t, v.Get(&resp))
		events = resp.Events
		h.env.CancelWorkflow()
	}, 3*time.Minute)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "c1"})

	require.NotEmpty(t, events)
	last := events[len(events)-1]
	require.Equal(t, protocol.EventFinish, last.Type)
	require.Equal(t, protocol.FinishCancelled, last.Reason)
	require.Empty(t, ofType(events, protocol.EventError), "no error says the budget was declined")
}
