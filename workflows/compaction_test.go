package workflows

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// longConversation is a conversation whose earlier turn read a large file,
// and the new user message.
func longConversation(output string) TurnInput {
	in := userTurn("read the notes")
	in.Messages = []protocol.Message{
		{Role: protocol.RoleUser, Content: "read the log"},
		{Role: protocol.RoleAssistant, ToolCalls: []protocol.ToolCall{{ID: "r1", Name: "Read", Arguments: `{"file_path":"log.txt"}`}}},
		{Role: protocol.RoleTool, ToolCallID: "r1", Name: "Read", Content: output},
		{Role: protocol.RoleAssistant, Content: "The log says it went fine."},
		{Role: protocol.RoleUser, Content: "read the notes"},
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
	e := findEvent(t, out.Events, protocol.EventContextCompacted)
	require.Equal(t, 1, e.Elided)
	require.Zero(t, e.Summarized)
	require.Greater(t, e.BytesBefore, 4000)
	require.Less(t, e.BytesAfter, 2000)
	require.Len(t, h.modelInputs, 1, "no summary was needed")
}

// turns is a conversation of n earlier turns, each a user message of size
// bytes and a short answer, then the new user message.
func turns(n, size int, query string) TurnInput {
	in := userTurn(query)
	in.Messages = nil
	for i := range n {
		in.Messages = append(in.Messages,
			protocol.Message{Role: protocol.RoleUser, Content: fmt.Sprintf("message %d: %s", i, strings.Repeat("x", size))},
			protocol.Message{Role: protocol.RoleAssistant, Content: fmt.Sprintf("answer %d", i)})
	}
	in.Messages = append(in.Messages, protocol.Message{Role: protocol.RoleUser, Content: query})
	return in
}

func TestEarlierTurnsAreSummarizedAndThePreviousTurnIsKeptWhole(t *testing.T) {
	settings := testSettings()
	settings.ContextBudget = 6000
	in := turns(4, 1500, "and now?")
	h := newHarness(t, settings,
		activities.ModelOutput{Content: "Turns 0 to 2 were long messages."},
		activities.ModelOutput{Content: "Now this."},
	)

	out := h.runTurn(in)

	require.Len(t, h.modelInputs, 2, "a summary, then the turn's call")
	summaryCall := h.modelInputs[0].Messages
	require.Equal(t, foldPrompt, summaryCall[0].Content)
	require.True(t, strings.HasPrefix(summaryCall[1].Content, foldFirst), "there was no summary before")
	require.Contains(t, summaryCall[1].Content, "message 0:")
	require.NotContains(t, summaryCall[1].Content, "message 3:", "the previous turn is not summarized")
	view := h.modelInputs[1].Messages
	require.Equal(t, SummaryPrefix+"Turns 0 to 2 were long messages.", view[1].Content)
	require.Equal(t, in.Messages[6:], view[2:], "the previous turn whole, then the new message")
	e := findEvent(t, out.Events, protocol.EventContextCompacted)
	require.Equal(t, 6, e.Summarized)
	require.Equal(t, 3, e.Kept)
	require.Less(t, e.BytesAfter, e.BytesBefore)
	require.Equal(t, &contract.Compaction{Summary: "Turns 0 to 2 were long messages.", Covers: 6}, out.Compaction, "the conversation keeps the summary")
	require.Len(t, out.Messages, 1, "the turn adds its own messages; the conversation keeps everything")
}

func TestATurnReadsTheConversationsSummaryAndSummarizesNoMoreWhileTheRestFits(t *testing.T) {
	settings := testSettings()
	settings.ContextBudget = 5000
	whole := turns(4, 1000, "and now?")
	in := whole
	in.Offset, in.Messages = 6, whole.Messages[6:]
	in.Compaction = contract.Compaction{Summary: "Turns 0 to 2 were long messages.", Covers: 6}
	h := newHarness(t, settings, activities.ModelOutput{Content: "Now this."})

	out := h.runTurn(in)

	require.Len(t, h.modelInputs, 1, "no summary request")
	view := h.modelInputs[0].Messages
	require.Equal(t, SummaryPrefix+"Turns 0 to 2 were long messages.", view[1].Content)
	require.Equal(t, whole.Messages[6:], view[2:])
	e := findEvent(t, out.Events, protocol.EventContextCompacted)
	require.Equal(t, 6, e.Summarized, "the event says what the summary stands for")
	require.Nil(t, out.Compaction, "nothing changed for the conversation to keep")
}

func TestTheSummaryIsBroughtUpToDateWithTheMessagesSinceOnly(t *testing.T) {
	settings := testSettings()
	settings.ContextBudget = 5000
	whole := turns(8, 1000, "and now?")
	in := whole
	in.Offset, in.Messages = 6, whole.Messages[6:]
	in.Compaction = contract.Compaction{Summary: "Turns 0 to 2 were long messages.", Covers: 6}
	h := newHarness(t, settings,
		activities.ModelOutput{Content: "Turns 0 to 6 were long messages."},
		activities.ModelOutput{Content: "Now this."},
	)

	out := h.runTurn(in)

	require.Len(t, h.modelInputs, 2)
	request := h.modelInputs[0].Messages[1].Content
	require.True(t, strings.HasPrefix(request, foldSummarySoFar+"Turns 0 to 2 were long messages."+foldSince), "the summary so far, then the messages since")
	require.NotContains(t, request, "message 2:", "what the summary holds is not sent again")
	require.Contains(t, request, "message 3:")
	require.NotContains(t, request, "message 7:")
	view := h.modelInputs[1].Messages
	require.Equal(t, whole.Messages[14:], view[2:])
	require.Equal(t, &contract.Compaction{Summary: "Turns 0 to 6 were long messages.", Covers: 14}, out.Compaction)
}

func TestMessagesTooLongForOneSummaryRequestAreSummarizedInPiecesThatFit(t *testing.T) {
	settings := testSettings()
	settings.ContextWindow = 4000 // 9,000 bytes of view
	in := turns(12, 2500, "and now?")
	in.Messages[2].Content = strings.Repeat("a pasted log line\n", 2000) // 36 KB in one message
	h := newHarness(t, settings)
	h.replies = []activities.ModelOutput{{Content: "summary 1"}, {Content: "summary 2"}, {Content: "summary 3"}, {Content: "summary 4"},
		{Content: "summary 5"}, {Content: "summary 6"}, {Content: "summary 7"}, {Content: "summary 8"}, {Content: "summary 9"}}

	out := h.runTurn(in)

	require.Equal(t, protocol.FinishStop, out.FinishReason)
	budget := viewBudget(settings.withDefaults(), 4000)
	var summaries int
	for i, mi := range h.modelInputs {
		require.LessOrEqual(t, viewSize(mi.Messages), budget, "request %d fits the window", i)
		if mi.Messages[0].Content == foldPrompt {
			summaries++
			if summaries > 1 {
				require.Contains(t, mi.Messages[1].Content, fmt.Sprintf(foldSummarySoFar+"summary %d", summaries-1), "each piece builds on the last")
			}
		}
	}
	require.Greater(t, summaries, 2, "in pieces")
	require.Contains(t, h.modelInputs[1].Messages[1].Content, "bytes left out here to fit the summary request. The whole message is kept in the conversation's transcript: GET /conversations/c1/messages?offset=2&limit=1",
		"the paste alone is more than a request holds: its middle is left out, and where to read it said")
	last := h.modelInputs[len(h.modelInputs)-1].Messages
	require.Equal(t, in.Messages[22:], last[2:], "the previous turn and the new message, whole")
}

func TestAModelThatSaysTheViewIsTooLongGetsSmallerRequestsUntilOneFits(t *testing.T) {
	tooLong := func(window, used int) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("model m: server rejected the request with 400 Bad Request: This model's maximum context length is %d tokens. "+
			"However, your messages resulted in %d tokens. Please reduce the length of the messages.", window, used), activities.ModelContextTooLongError, nil)
	}
	in := turns(10, 3000, "and now?")

	h := newHarness(t, testSettings(), activities.ModelOutput{Content: "The summary."}, activities.ModelOutput{Content: "Now this."})
	h.modelErrs = []error{tooLong(5000, 9000)}
	out := h.runTurn(in)
	require.Equal(t, protocol.FinishStop, out.FinishReason)
	require.Equal(t, in.Messages, h.modelInputs[0].Messages[1:], "the first call had it all")
	require.NotNil(t, out.Compaction)
	window := out.Compaction.Window
	sent := viewSize(h.modelInputs[0].Messages) / protocol.BytesPerToken
	require.Equal(t, 5000*sent/9000, window, "the window the server stated, in the workflows' count, is kept for later turns")
	last := h.modelInputs[len(h.modelInputs)-1].Messages
	require.Equal(t, in.Messages[18:], last[2:], "then the summary, the previous turn and the new message")
	for _, mi := range h.modelInputs[1:] {
		require.LessOrEqual(t, viewSize(mi.Messages), viewBudget(testSettings().withDefaults(), window), "every later request fits")
	}
	require.Equal(t, 3, findEvent(t, out.Events, protocol.EventContextCompacted).Kept)

	// A server that refuses whatever it gets: each request is smaller (the
	// message cut in the middle), and then the turn says why it ends.
	h = newHarness(t, testSettings())
	h.modelErr = tooLong(100000, 100001)
	out = h.runTurn(userTurn(strings.Repeat("a pasted line\n", 3000)))
	for i := 1; i < len(h.modelInputs); i++ {
		require.Less(t, viewSize(h.modelInputs[i].Messages), viewSize(h.modelInputs[i-1].Messages)*4/5, "request %d is smaller", i)
	}
	require.Equal(t, protocol.FinishError, out.FinishReason)
	require.Contains(t, findEvent(t, out.Events, protocol.EventError).Message, "could not be made to fit the model's context: 4 smaller requests were refused too")
	require.Len(t, h.modelInputs, 1+maxRefits)
}

func TestASummaryRequestTheModelRefusesAsTooLongIsMadeSmaller(t *testing.T) {
	settings := testSettings()
	settings.ContextWindow = 8000 // 18,000 bytes of view
	in := turns(8, 3000, "and now?")
	h := newHarness(t, settings)
	h.modelErrs = []error{temporal.NewNonRetryableApplicationError("model m: server rejected the request with 400 Bad Request: "+
		"This model's maximum context length is 3000 tokens. However, your messages resulted in 4500 tokens.", activities.ModelContextTooLongError, nil)}

	out := h.runTurn(in)

	require.Equal(t, protocol.FinishStop, out.FinishReason)
	first, second := h.modelInputs[0].Messages, h.modelInputs[1].Messages
	require.Equal(t, foldPrompt, first[0].Content, "the refused request was a summary's")
	require.Equal(t, foldPrompt, second[0].Content, "asked again, smaller")
	require.Less(t, viewSize(second), viewSize(first)*3/4)
	require.NotNil(t, out.Compaction)
	require.Equal(t, 3000*(viewSize(first)/protocol.BytesPerToken)/4500, out.Compaction.Window, "the stated window, in tollgate's count, is kept")
	for _, mi := range h.modelInputs[1:] {
		require.LessOrEqual(t, viewSize(mi.Messages), viewBudget(settings.withDefaults(), out.Compaction.Window))
	}
}
