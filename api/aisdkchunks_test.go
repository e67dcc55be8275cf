package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

// chunkOf returns the first of chunks of type typ.
func chunkOf(t *testing.T, chunks []uiChunk, typ string) uiChunk {
	t.Helper()
	for _, ch := range chunks {
		if ch.Type == typ {
			return ch
		}
	}
	t.Fatalf("no %s chunk in %+v", typ, chunks)
	return uiChunk{}
}

func TestUIStreamPutsACompactionInADataPartAndABudgetsDecisionIsItsOutcome(t *testing.T) {
	const req = "tollgate-conv-c-turn-1/apr-budget"
	asked := []protocol.Event{
		{Seq: 1, Type: protocol.EventTurnStart, RunID: "run"},
		{Seq: 2, Type: protocol.EventContextCompacted, Elided: 2, Kept: 3, BytesBefore: 1000, BytesAfter: 400},
		{Seq: 3, Type: protocol.EventApprovalRequest, RequestID: req, ToolCallID: "budget-steps", ToolName: protocol.BudgetTool,
			Arguments: `{"budget":"steps","limit":8,"spent":8}`, Kind: protocol.KindBudget},
		{Seq: 4, Type: protocol.EventHeartbeat},
	}
	for decision, outcome := range map[string]string{
		protocol.DecisionApprove: "tool-output-available",
		protocol.DecisionDecline: "tool-output-denied",
		protocol.DecisionTimeout: "tool-output-error",
	} {
		t.Run(decision, func(t *testing.T) {
			x := newUITranslator(0)
			chunks := x.events(asked)
			compacted := chunkOf(t, chunks, "data-tollgate-context-compacted").Data.(uiCompactedData)
			require.Equal(t, uiCompactedData{Elided: 2, Kept: 3, BytesBefore: 1000, BytesAfter: 400}, compacted)
			input := chunkOf(t, chunks, "tool-input-available")
			require.Equal(t, protocol.BudgetTool, input.ToolName, "a tool part tool-budget")
			require.Equal(t, "budget-steps", input.ToolCallID)
			require.Equal(t, req, chunkOf(t, chunks, "tool-approval-request").ApprovalID)
			require.True(t, x.waitsForClient(), "the response ends: the budget asks the client")

			rest := x.events([]protocol.Event{
				{Seq: 5, Type: protocol.EventApprovalDecision, RequestID: req, ToolCallID: "budget-steps", Decision: decision},
				{Seq: 6, Type: protocol.EventFinish, Reason: protocol.FinishStop},
			})
			require.Equal(t, decision == protocol.DecisionApprove, *chunkOf(t, rest, "tool-approval-response").Approved)
			require.Equal(t, "budget-steps", chunkOf(t, rest, outcome).ToolCallID, "a budget has no tool_result: its decision is its outcome")
			require.Equal(t, "stop", chunkOf(t, rest, "finish").FinishReason)
		})
	}
}

func TestUIStreamStillWaitsForTheClientAfterOneOfTwoCallsIsDecided(t *testing.T) {
	x := newUITranslator(0)
	x.events([]protocol.Event{
		{Seq: 1, Type: protocol.EventToolCall, ToolCalls: []protocol.ToolCall{{ID: "a", Name: "Write"}, {ID: "b", Name: "Bash"}}},
		{Seq: 2, Type: protocol.EventApprovalRequest, RequestID: "r/a", ToolCallID: "a", ToolName: "Write"},
		{Seq: 3, Type: protocol.EventApprovalRequest, RequestID: "r/b", ToolCallID: "b", ToolName: "Bash"},
		{Seq: 4, Type: protocol.EventHeartbeat},
		{Seq: 5, Type: protocol.EventApprovalDecision, RequestID: "r/b", ToolCallID: "b", Decision: protocol.DecisionApprove},
	})
	require.True(t, x.waitsForClient(), "the Write still asks")
	x.events([]protocol.Event{{Seq: 6, Type: protocol.EventApprovalDecision, RequestID: "r/a", ToolCallID: "a", Decision: protocol.DecisionApprove}})
	require.False(t, x.waitsForClient(), "nothing asks: the turn runs the batch")
}
