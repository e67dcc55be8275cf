package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// send delivers a user message to the running conversation and records the
// turn it was given.
func (h *harness) send(query string, ref *contract.TurnRef) {
	h.env.UpdateWorkflow(contract.SendMessageUpdate, "", &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { h.t.Errorf("message %q rejected: %v", query, err) },
		OnComplete: func(v any, err error) {
			require.NoError(h.t, err)
			*ref = v.(contract.TurnRef)
		},
	}, contract.UserMessage{Query: query})
}

func TestNewUserMessageDeclinesPendingApprovalsOfRunningTurn(t *testing.T) {
	h := newHarness(t, testSettings(),
		calls(call("b", "Bash", `{"command":"make deploy"}`)),
		activities.ModelOutput{Content: "OK, not deploying."},
	)
	var first, second contract.TurnRef
	h.env.RegisterDelayedCallback(func() { h.send("deploy it", &first) }, time.Second)
	h.env.RegisterDelayedCallback(func() { h.send("wait, don't", &second) }, time.Minute)
	var state contract.ConversationState
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(contract.StateQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&state))
		h.env.CancelWorkflow()
	}, time.Hour)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "c1"})

	require.Equal(t, contract.TurnRef{ConversationID: "c1", Turn: 1, TurnID: "tollgate-conv-c1-turn-1"}, first)
	require.Equal(t, contract.TurnRef{ConversationID: "c1", Turn: 2, TurnID: "tollgate-conv-c1-turn-2"}, second)
	require.Empty(t, h.ranTools(), "the interrupted call never runs")
	require.Len(t, h.modelInputs, 2)
	// Turn 2's model call sees turn 1 with its declined call answered, then
	// the new message.
	msgs := h.modelInputs[1].Messages
	require.Equal(t, []string{protocol.RoleSystem, protocol.RoleUser, protocol.RoleAssistant, protocol.RoleTool, protocol.RoleUser},
		roles(msgs))
	require.Equal(t, "Not executed: the user sent a new message before this call was decided; answer that instead. Do not call it again unless the user asks you to.", msgs[3].Content)
	require.Equal(t, "wait, don't", msgs[4].Content)
	require.Equal(t, contract.ConversationState{ConversationID: "c1", Turns: 2, Messages: 5}, state)
}

func TestConversationRunsTurnsOneAtATimeAndKeepsHistory(t *testing.T) {
	h := newHarness(t, testSettings(),
		activities.ModelOutput{Content: "first answer"},
		activities.ModelOutput{Content: "second answer"},
	)
	var r1, r2 contract.TurnRef
	h.env.RegisterDelayedCallback(func() {
		h.send("one", &r1)
		h.send("two", &r2)
	}, time.Second)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Hour)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "c2"})

	require.Equal(t, 2, r2.Turn)
	require.Len(t, h.modelInputs, 2)
	msgs := h.modelInputs[1].Messages
	require.Equal(t, []string{"one", "first answer", "two"}, contents(msgs)[1:])
}

func TestConversationContinuesAsNewCarryingFullMessageLog(t *testing.T) {
	settings := testSettings()
	settings.TurnsPerRun = 2
	h := newHarness(t, settings,
		activities.ModelOutput{Content: "a1"},
		activities.ModelOutput{Content: "a2"},
		activities.ModelOutput{Content: "a3"},
	)
	var r1, r2, r3 contract.TurnRef
	h.env.RegisterDelayedCallback(func() {
		h.send("q1", &r1)
		h.send("q2", &r2)
		h.send("q3", &r3)
	}, time.Second)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "c3"})

	next := continuedAs(t, h.env)
	require.Equal(t, "c3", next.ConversationID)
	require.Equal(t, 3, next.Turns)
	require.Equal(t, []string{"q1", "a1", "q2", "a2"}, contents(next.Messages))
	require.Equal(t, []contract.QueuedMessage{{Turn: 3, Message: contract.UserMessage{Query: "q3"}}}, next.Queue)
}

func TestEmptyUserMessageIsRejected(t *testing.T) {
	h := newHarness(t, testSettings())
	var rejected error
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(contract.SendMessageUpdate, "", &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { rejected = err },
			OnComplete: func(any, error) {},
		}, contract.UserMessage{Query: "  "})
	}, time.Second)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "c4"})

	require.ErrorContains(t, rejected, "empty")
	require.Empty(t, h.modelInputs)
}

func roles(msgs []protocol.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Role)
	}
	return out
}

func contents(msgs []protocol.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Content)
	}
	return out
}
