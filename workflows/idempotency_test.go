package workflows

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/workflows/contract"
)

// sendMessage delivers m and returns what the conversation answered: the
// turn, or why it refused.
func (h *harness) sendMessage(m contract.UserMessage, ref *contract.TurnRef, refused *error) {
	h.env.UpdateWorkflow(contract.SendMessageUpdate, "", &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { *refused = err },
		OnComplete: func(v any, err error) {
			if err != nil {
				*refused = err
				return
			}
			*ref = v.(contract.TurnRef)
		},
	}, m)
}

func TestAMessageWithATakenKeyGetsItsTurnAndQueuesNone(t *testing.T) {
	h := newHarness(t, testSettings(),
		activities.ModelOutput{Content: "first answer"},
		activities.ModelOutput{Content: "bob's answer"},
	)
	alice := contract.MessageKey("alice", "k1")
	first := contract.UserMessage{Query: "one", Sender: "alice", IdempotencyKey: alice}
	var r1, again, other, bobs contract.TurnRef
	var refusedAgain, refusedOther, refusedBob error
	h.env.RegisterDelayedCallback(func() { h.sendMessage(first, &r1, new(error)) }, time.Second)
	// The retry, once the turn has run: the same turn.
	h.env.RegisterDelayedCallback(func() { h.sendMessage(first, &again, &refusedAgain) }, time.Minute)
	// The key with another message: refused.
	h.env.RegisterDelayedCallback(func() {
		h.sendMessage(contract.UserMessage{Query: "two", Sender: "alice", IdempotencyKey: alice}, &other, &refusedOther)
	}, 2*time.Minute)
	// Bob's key of the same words is his own.
	h.env.RegisterDelayedCallback(func() {
		h.sendMessage(contract.UserMessage{Query: "one", Sender: "bob", IdempotencyKey: contract.MessageKey("bob", "k1")}, &bobs, &refusedBob)
	}, 3*time.Minute)
	var state contract.ConversationState
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(contract.StateQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&state))
		h.env.CancelWorkflow()
	}, time.Hour)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "c1"})

	require.Equal(t, 1, r1.Turn)
	require.NoError(t, refusedAgain)
	require.Equal(t, r1, again)
	require.ErrorContains(t, refusedOther, "Idempotency-Key was sent with another message")
	require.NoError(t, refusedBob)
	require.Equal(t, 2, bobs.Turn)
	require.Equal(t, 2, state.Turns)
	require.Len(t, h.modelInputs, 2)
}

func TestTakenKeysAreForgottenAfterADayOrPastTheCount(t *testing.T) {
	c := &conversation{}
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	message := func(i int) contract.UserMessage {
		return contract.UserMessage{Query: "q", IdempotencyKey: contract.MessageKey("p", strconv.Itoa(i))}
	}
	c.rememberKey(start, message(0), 1)
	c.rememberKey(start.Add(messageKeyWindow-time.Second), message(1), 2)
	_, ok := c.takenKey(message(0).IdempotencyKey)
	require.True(t, ok, "within the window")
	c.rememberKey(start.Add(messageKeyWindow), message(2), 3)
	_, ok = c.takenKey(message(0).IdempotencyKey)
	require.False(t, ok, "a day later")

	for i := 3; i < maxMessageKeys+10; i++ {
		c.rememberKey(start.Add(messageKeyWindow), message(i), i+1)
	}
	require.Len(t, c.keys, maxMessageKeys)
	_, ok = c.takenKey(message(9).IdempotencyKey)
	require.False(t, ok, "the oldest past the count")
	k, ok := c.takenKey(message(maxMessageKeys + 9).IdempotencyKey)
	require.True(t, ok)
	require.Equal(t, maxMessageKeys+10, k.Turn)
}
