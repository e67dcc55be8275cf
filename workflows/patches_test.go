package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestAConversationTakesTodaysLevelWhenItContinuesAsNew proves what
// retiring a conversation's patches waits for (docs/versioning.md,
// Retiring a patch): a conversation that an earlier build began records
// that build's patch level, and its next run, after continue-as-new,
// records the level of the build that runs it, not the old one. The
// continue-as-new input carries no settings; each run records its own.
//
// Run 1 is a conversation of a level-2 build: a message sent again with
// its idempotency key asks for patchIdempotentMessages, which came after
// level 2. Run 2, on today's build, answers the same resend from the key
// it carried over, and asks for nothing.
func TestAConversationTakesTodaysLevelWhenItContinuesAsNew(t *testing.T) {
	settings := testSettings()
	settings.TurnsPerRun = 1
	old := settings
	old.beginAt = 2
	message := contract.UserMessage{Query: "write a", Sender: "alice", IdempotencyKey: contract.MessageKey("alice", "k1")}

	h := newHarness(t, old,
		calls(call("w", "Write", `{"file_path":"a","content":"b"}`)),
		activities.ModelOutput{Content: "no answer came"},
	)
	asked := 0
	h.env.OnGetVersion(patchIdempotentMessages, workflow.DefaultVersion, 1).
		Run(func(mock.Arguments) { asked++ }).Return(workflow.Version(1))
	var first, resent contract.TurnRef
	h.env.RegisterDelayedCallback(func() { h.sendMessage(message, &first, new(error)) }, time.Second)
	// Sent again while its turn waits for the Write's approval, which
	// times out; then the run continues as new.
	h.env.RegisterDelayedCallback(func() { h.sendMessage(message, &resent, new(error)) }, time.Minute)
	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "c-level"})
	next := continuedAs(t, h.env)
	require.Equal(t, 1, first.Turn)
	require.Equal(t, first, resent)
	require.Equal(t, 1, asked, "a run of level 2 asks for the patch that came after its level")

	today := newHarness(t, settings)
	today.env.OnGetVersion(patchIdempotentMessages, workflow.DefaultVersion, 1).
		Panic("the continued run asked for a patch of today's level: it kept the level of the run before")
	var again contract.TurnRef
	var refused error
	today.env.RegisterDelayedCallback(func() { today.sendMessage(message, &again, &refused) }, time.Second)
	today.env.RegisterDelayedCallback(func() { today.env.CancelWorkflow() }, time.Hour)
	today.env.ExecuteWorkflow(contract.ConversationWorkflow, next)

	require.NoError(t, refused)
	require.Equal(t, first, again, "the continued run answers from the key it carried, without asking")
	require.Empty(t, today.modelInputs, "and queues no turn")
}
