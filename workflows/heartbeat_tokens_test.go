package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// tokenEvents returns the data and reset flags of the token events.
func tokenEvents(events []protocol.Event) []protocol.TokenPiece {
	var out []protocol.TokenPiece
	for _, e := range events {
		if e.Type == protocol.EventToken {
			out = append(out, protocol.TokenPiece{Data: e.Data, Reset: e.Reset})
		}
	}
	return out
}

func TestATurnLogsTheTokenEventsItsModelCallStreamedByHeartbeat(t *testing.T) {
	pieces := []protocol.TokenPiece{{Data: "I will "}, {Data: "I shall say it", Reset: true}, {Data: " plainly."}}
	h := newHarness(t, testSettings())
	var started []string
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == activities.ModelActivity {
			started = append(started, info.ActivityID)
		}
	})
	var during contract.EventsResponse
	h.env.OnActivity(activities.ModelActivity, mock.Anything, mock.Anything).After(time.Minute).
		Return(activities.ModelOutput{Content: "I shall say it plainly.", Pieces: pieces}, nil)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(contract.EventsQuery, contract.EventsRequest{})
		require.NoError(t, err)
		require.NoError(t, v.Get(&during))
	}, 30*time.Second)

	out := h.runTurn(userTurn("say it"))
	require.Equal(t, []string{"model-1"}, started)
	require.Equal(t, &contract.LiveTokens{ActivityID: "model-1", After: 1}, during.Live,
		"while the call runs, the query names it and where its events go")
	require.Equal(t, []string{protocol.EventTurnStart}, eventTypes(during.Events))
	require.Equal(t, pieces, tokenEvents(out.Events), "the call's pieces, as they were, under the numbers after Live.After")
	require.Equal(t, []string{protocol.EventTurnStart, protocol.EventToken, protocol.EventToken, protocol.EventToken, protocol.EventFinish}, eventTypes(out.Events))
}

func TestAModelCallWithoutPiecesStillLogsItsAnswer(t *testing.T) {
	// An activity worker older than the patch answers without pieces.
	h := newHarness(t, testSettings(), activities.ModelOutput{Content: "whole answer"})
	out := h.runTurn(userTurn("say it"))
	require.Equal(t, []protocol.TokenPiece{{Data: "whole answer"}}, tokenEvents(out.Events))
	require.True(t, h.modelInputs[0].Tokens.Heartbeat)
}

func TestAFailedModelCallLogsThePiecesItStreamedBeforeItsError(t *testing.T) {
	h := newHarness(t, testSettings())
	progress := protocol.TokenProgress{Step: 1, Pieces: []protocol.TokenPiece{{Data: "Let me "}, {Data: "look"}}}
	h.modelErr = temporal.NewApplicationErrorWithOptions("model m: server rejected the request with 400", activities.ModelRequestRejectedError,
		temporal.ApplicationErrorOptions{NonRetryable: true, Details: []any{progress}})
	out := h.runTurn(userTurn("say it"))
	require.Equal(t, progress.Pieces, tokenEvents(out.Events))
	require.Equal(t, []string{protocol.EventTurnStart, protocol.EventToken, protocol.EventToken, protocol.EventError, protocol.EventFinish}, eventTypes(out.Events))
}

func TestASubagentKeepsTheTokensSignal(t *testing.T) {
	h := newHarness(t, testSettings())
	h.env.ExecuteWorkflow(contract.SubagentWorkflow, SubagentInput{Agent: AgentDef{Name: "scout"}, Prompt: "look", Settings: testSettings(), Depth: 1})
	require.NoError(t, h.env.GetWorkflowError())
	require.NotEmpty(t, h.modelInputs)
	require.False(t, h.modelInputs[0].Tokens.Heartbeat, "a subagent's events reach the parent only through its log")
}
