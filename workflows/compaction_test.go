package workflows

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/activities"
)

// longConversation is a conversation whose earlier turn read a large file,
// and the new user message.
func longConversation(output string) TurnInput {
	in := userTurn("read the notes")
	in.Messages = []activities.Message{
		{Role: activities.RoleUser, Content: "read the log"},
		{Role: activities.RoleAssistant, ToolCalls: []activities.ToolCall{{ID: "r1", Name: "Read", Arguments: `{"file_path":"log.txt"}`}}},
		{Role: activities.RoleTool, ToolCallID: "r1", Name: "Read", Content: output},
		{Role: activities.RoleAssistant, Content: "The log says it went fine."},
		{Role: activities.RoleUser, Content: "read the notes"},
	}
	return in
}

func TestOldToolOutputsAreLeftOutOfTheModelsViewFirst(t *testing.T) {
	settings := testSettings()
	settings.ContextBudget = 2000
	log := strings.Repeat("a log line\n", 400)
	h := newHarness(t, settings, activities.ModelOutput{Content: "The notes are empty."})

	out := h.runTurn(longConversation(log))

	view := h.modelInputs[0].Messages
	require.Equal(t, ElidedToolOutput, view[3].Content, "the old Read's output is left out")
	require.Equal(t, "read the notes", view[len(view)-1].Content)
	e := findEvent(t, out.Events, EventContextCompacted)
	require.Equal(t, 1, e.Elided)
	require.Zero(t, e.Summarized)
	require.Greater(t, e.BytesBefore, 4000)
	require.Less(t, e.BytesAfter, 2000)
	require.Len(t, h.modelInputs, 1, "no summary was needed")
}

func TestEarlierTurnsAreSummarizedWhenLeavingOutToolOutputsIsNotEnough(t *testing.T) {
	settings := testSettings()
	settings.ContextBudget = 1500
	in := longConversation("short output")
	in.Messages[3].Content = strings.Repeat("A long answer about the log. ", 200)
	h := newHarness(t, settings,
		activities.ModelOutput{Content: "The user had the log read; it went fine."},
		activities.ModelOutput{Content: "The notes are empty."},
	)

	out := h.runTurn(in)

	require.Len(t, h.modelInputs, 2, "a summary, then the turn's call")
	summaryCall := h.modelInputs[0].Messages
	require.Equal(t, summarySystemPrompt, summaryCall[0].Content)
	require.Contains(t, summaryCall[1].Content, "A long answer about the log.")
	view := h.modelInputs[1].Messages
	require.Len(t, view, 3, "system, summary, the new message")
	require.Equal(t, SummaryPrefix+"The user had the log read; it went fine.", view[1].Content)
	require.Equal(t, "read the notes", view[2].Content)
	e := findEvent(t, out.Events, EventContextCompacted)
	require.Equal(t, 4, e.Summarized)
	require.Less(t, e.BytesAfter, e.BytesBefore)
	require.Equal(t, "The notes are empty.", out.Text)
	require.Len(t, out.Messages, 1, "the turn adds its own messages; the conversation keeps everything")
}

func TestAModelThatSaysTheViewIsTooLongGetsOneCompactedRetry(t *testing.T) {
	tooLong := temporal.NewNonRetryableApplicationError("model: server rejected the request with 400: maximum context length is 1000 tokens", activities.ModelContextTooLongError, nil)
	log := strings.Repeat("a log line\n", 400)

	h := newHarness(t, testSettings(), activities.ModelOutput{Content: "The notes are empty."})
	h.modelErrs = []error{tooLong}
	out := h.runTurn(longConversation(log))
	require.Equal(t, FinishStop, out.FinishReason)
	require.Len(t, h.modelInputs, 2)
	require.Equal(t, log, h.modelInputs[0].Messages[3].Content, "the first call had it all")
	require.Equal(t, ElidedToolOutput, h.modelInputs[1].Messages[3].Content, "the retry left the old output out")
	require.Equal(t, 1, findEvent(t, out.Events, EventContextCompacted).Elided)

	h = newHarness(t, testSettings())
	h.modelErrs = []error{tooLong, tooLong}
	out = h.runTurn(longConversation(log))
	require.Equal(t, FinishError, out.FinishReason)
	require.Contains(t, findEvent(t, out.Events, EventError).Message, "no longer fits the model's context, even compacted")
	require.Len(t, h.modelInputs, 2, "one retry, no more")
}
