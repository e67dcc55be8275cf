package workflows

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
)

func TestBypassedTurnStillAsksWhereARuleRequiresAToolAlways(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{{Tool: activities.ToolBash, Require: RequireAlways}}
	h := newHarness(t, settings, calls(
		call("w", "Write", `{"file_path":"a","content":"b"}`),
		call("b", "Bash", `{"command":"rm -rf build"}`),
	))
	h.env.RegisterDelayedCallback(func() {
		h.decide(ApprovalDecision{RequestID: h.requestID("Bash"), Decision: DecisionDecline, Reason: "not even with bypass"})
	}, time.Minute)
	in := userTurn("clean up")
	in.BypassApproval = true

	out := h.runTurn(in)

	require.True(t, findEvent(t, out.Events, EventTurnStart).Bypass, "turn_start says the turn is bypassed")
	requests := ofType(out.Events, EventApprovalRequest)
	require.Len(t, requests, 1, "only the always-rule asks")
	require.Equal(t, "b", requests[0].ToolCallID)
	require.Equal(t, []string{"Write"}, h.ranTools(), "Write ran without asking; Bash was declined")
}

func TestClientToolThatThePolicyProtectsAsksBeforeItsCallIsPublished(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{{Tool: pickColor.Name, Require: RequireWhen, When: `args.color != "grey"`}}
	h := newHarness(t, settings,
		calls(call("c1", "PickColor", `{"color":"red"}`), call("c2", "PickColor", `{"color":"grey"}`)),
		activities.ModelOutput{Content: "only grey"},
	)
	var published []Event
	h.env.RegisterDelayedCallback(func() {
		// Asked about red, nothing published for either call yet.
		require.Empty(t, ofType(h.events(), EventClientToolCall))
		h.decide(ApprovalDecision{RequestID: h.requestID("PickColor"), Decision: DecisionDecline})
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		published = ofType(h.events(), EventClientToolCall)
		var rejected error
		h.answer(ClientToolResult{ToolCallID: "c2", Result: "grey it is"}, &rejected)
		require.NoError(t, rejected)
	}, 2*time.Minute)

	out := h.runTurn(clientTurn())

	requests := ofType(out.Events, EventApprovalRequest)
	require.Len(t, requests, 1)
	require.Equal(t, "c1", requests[0].ToolCallID, "the rule protects red, not grey")
	require.Len(t, published, 1, "the declined call is never handed to the client")
	require.Equal(t, "c2", published[0].ToolCallID)
	results := findEvent(t, out.Events, EventToolResult).ToolResults
	require.Equal(t, activities.StatusDeclined, results[0].Status)
	require.Equal(t, "grey it is", results[1].Result)
}

func TestDecisionRecordsTheRoleOfTheTokenItCameWith(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("w", "Write", `{"file_path":"a","content":"b"}`)))
	h.env.RegisterDelayedCallback(func() {
		h.decide(ApprovalDecision{RequestID: h.requestID("Write"), Decision: DecisionApprove, Principal: "root", Role: "admin"})
	}, time.Minute)

	out := h.runTurn(userTurn("write"))

	d := findEvent(t, out.Events, EventApprovalDecision)
	require.Equal(t, "root", d.By)
	require.Equal(t, "admin", d.Role)
	require.False(t, findEvent(t, out.Events, EventTurnStart).Bypass)
}

func TestThePendingApprovalsAttributeStaysUnderItsBudgetAndSaysWhenItListsFewer(t *testing.T) {
	var ids []string
	for i := range 100 {
		ids = append(ids, fmt.Sprintf("tollgate-conv-a-long-conversation-id-turn-1/apr-%032d", i))
	}
	got := boundedKeywords(append([]string{ClientToolSearchValue("call_pay")}, ids...), pendingAttributeBudget)
	b, err := json.Marshal(got)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), pendingAttributeBudget)
	require.Equal(t, ClientToolSearchValue("call_pay"), got[0], "the client tool call is always listed")
	require.Equal(t, PendingMoreValue, got[len(got)-1])
	require.Equal(t, ids[:3], boundedKeywords(ids[:3], pendingAttributeBudget), "what fits is listed whole")
}
