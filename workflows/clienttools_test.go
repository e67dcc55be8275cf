package workflows

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

var pickColor = protocol.ToolSpec{Name: "PickColor", Description: "asks the user for a color", Parameters: json.RawMessage(`{"type":"object"}`)}

func clientTurn() TurnInput {
	in := userTurn("paint it")
	in.ClientTools = []protocol.ToolSpec{pickColor}
	return in
}

// answer sends the toolResult Update and records its rejection, if any.
func (h *harness) answer(r contract.ClientToolResult, rejected *error) {
	h.env.UpdateWorkflow(contract.ClientToolResultUpdate, "", &testsuite.TestUpdateCallback{
		OnAccept: func() {}, OnReject: func(err error) { *rejected = err }, OnComplete: func(any, error) {},
	}, r)
}

func TestClientToolAnsweredInTimeAnswersTheModel(t *testing.T) {
	h := newHarness(t, testSettings(),
		calls(call("c1", "PickColor", `{}`), call("r", "Read", `{"file_path":"a"}`)),
		activities.ModelOutput{Content: "blue it is"},
	)
	var unknown, early, late error
	h.env.RegisterDelayedCallback(func() {
		e := findEvent(t, h.events(), protocol.EventClientToolCall)
		require.Equal(t, "c1", e.ToolCallID)
		require.Equal(t, "PickColor", e.ToolName)
		h.answer(contract.ClientToolResult{ToolCallID: "nope", Result: "x"}, &unknown)
		// By tool call id alone, within the turn.
		h.answer(contract.ClientToolResult{ToolCallID: "c1", Result: "blue"}, &early)
		h.answer(contract.ClientToolResult{RequestID: e.RequestID, Result: "red"}, &late)
	}, time.Second)

	out := h.runTurn(clientTurn())

	require.NoError(t, early)
	require.ErrorContains(t, unknown, "unknown request")
	require.ErrorContains(t, late, "already decided", "a second answer is not taken")
	tools := toolMessages(h.modelInputs[1].Messages)
	require.Equal(t, "blue", tools[0].Content)
	require.Equal(t, []string{"Read"}, h.ranTools(), "the worker never runs a client tool")
	require.Contains(t, toolNames(h.modelInputs[0].Tools), "PickColor")
	require.NotContains(t, eventTypes(out.Events), protocol.EventApprovalRequest)
}

func TestClientToolWithoutAnswerTimesOutAsDecline(t *testing.T) {
	settings := testSettings()
	settings.ApprovalTimeout = time.Hour
	// The next step's Write waits another hour: the turn still runs when
	// the late answer comes.
	h := newHarness(t, settings, calls(call("c1", "PickColor", `{}`)), calls(call("w", "Write", `{"file_path":"a","content":"b"}`)))
	var late error
	h.env.RegisterDelayedCallback(func() {
		h.answer(contract.ClientToolResult{RequestID: findEvent(t, h.events(), protocol.EventClientToolCall).RequestID, Result: "blue"}, &late)
	}, 90*time.Minute)

	out := h.runTurn(clientTurn())

	result := findEvent(t, out.Events, protocol.EventToolResult).ToolResults[0]
	require.Equal(t, protocol.StatusTimeout, result.Status)
	require.Equal(t, clientTimeoutResponse, result.Result)
	require.Equal(t, protocol.RejectExpired, contract.RejectionReason(late), "an answer after the call's time ran out is expired, not decided: %v", late)
}

func TestClientToolNamedLikeAWorkerToolIsRejected(t *testing.T) {
	require.ErrorContains(t, validateClientTools([]protocol.ToolSpec{{Name: "Bash"}}, testSettings()), "tool the worker runs")
	require.ErrorContains(t, validateClientTools([]protocol.ToolSpec{pickColor, pickColor}, testSettings()), "twice")
	require.ErrorContains(t, validateClientTools([]protocol.ToolSpec{{Name: "mcp__files__write"}}, testSettings()), "tool the worker runs")
	withPaths := pickColor
	withPaths.WorkspacePaths = []string{"file_path"}
	require.ErrorContains(t, validateClientTools([]protocol.ToolSpec{withPaths}, testSettings()), "workspacePaths")
	require.NoError(t, validateClientTools([]protocol.ToolSpec{pickColor}, testSettings()))
}

func TestNewMessageDeclinesAClientToolCallThatWaits(t *testing.T) {
	settings := testSettings()
	settings.ApprovalTimeout = time.Hour
	h := newHarness(t, settings, calls(call("c1", "PickColor", `{}`)))
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(contract.InterruptSignal, Interrupt{Reason: reasonNewMessage})
	}, time.Minute)

	out := h.runTurn(clientTurn())

	require.Equal(t, protocol.FinishCancelled, out.FinishReason)
	result := findEvent(t, out.Events, protocol.EventToolResult).ToolResults[0]
	require.Equal(t, protocol.StatusDeclined, result.Status, "declined at once, not left to time out")
	require.Equal(t, declined(reasonNewMessage), result.Result)
	require.Equal(t, declined(reasonNewMessage), toolMessages(out.Messages)[0].Content)
}
