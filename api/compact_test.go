package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// summaryScript answers a summary request with a summary that names the
// person's instructions, if any, and any other request with "noted".
func summaryScript(req openai.ChatCompletionRequest) scripted.Reply {
	if system := req.Messages[0].Content; strings.HasPrefix(system, "You keep the running summary") {
		_, instructions, _ := strings.Cut(system, "says what it must keep: ")
		return scripted.Reply{Content: "The user pasted logs. " + instructions}
	}
	return scripted.Reply{Content: "noted"}
}

func lastUserMessage(msgs []openai.ChatCompletionMessage) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == openai.ChatMessageRoleUser {
			return msgs[i].Content
		}
	}
	return ""
}

// TestALongConversationOfPastedLogsRunsOnAModelWithAWindow sends 64
// messages of 40 KB to a model with a 150,000-token window (which refuses
// anything longer, as OpenAI does) through the API, then asks the
// conversation to compact with instructions.
func TestALongConversationOfPastedLogsRunsOnAModelWithAWindow(t *testing.T) {
	t.Parallel()
	st := newStack(t, withScript(summaryScript), withModelWindow(150000), withPayloadStore(),
		withSettings(func(s *workflows.Settings) { s.ContextWindow = 150000 }))
	const n = 64
	queries := make([]string, n)
	took := make([]time.Duration, n)
	start := time.Now()
	for i := range queries {
		began := time.Now()
		line := fmt.Sprintf("message %d: a pasted log line with numbers 12345 67890\\n", i)
		queries[i] = strings.Repeat(line, 40<<10/len(line))
		body, err := json.Marshal(protocol.ChatRequest{Query: queries[i], ConversationID: "logs"})
		require.NoError(t, err)
		_, msgs := st.chat(t, string(body))
		seq := 0
		events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
		require.Equal(t, protocol.FinishStop, events[len(events)-1].Reason, "turn %d: %s", i+1, events[len(events)-1].Message)
		took[i] = time.Since(began)
	}
	elapsed := time.Since(start)

	requests := st.replies.Requests()
	summaries := 0
	for _, req := range requests {
		body, err := json.Marshal(req)
		require.NoError(t, err)
		require.LessOrEqual(t, scripted.RequestTokens(len(body)), 150000, "no request passed the window")
		if lastUser := lastUserMessage(req.Messages); !strings.HasPrefix(lastUser, "message ") {
			summaries++
			continue
		} else if i := slices.Index(queries, lastUser); i > 0 {
			require.True(t, slices.ContainsFunc(req.Messages, func(m openai.ChatCompletionMessage) bool { return m.Content == queries[i-1] }),
				"turn %d's request holds the previous message whole", i+1)
		}
	}
	perTurn := float64(len(requests)) / n
	require.LessOrEqual(t, perTurn, 1.25, "model requests a turn, summaries included")
	early, late := slices.Clone(took[10:30]), slices.Clone(took[n-20:])
	slices.Sort(early)
	slices.Sort(late)
	t.Logf("%d turns in %s: %d requests, %d of them summaries (%.2f a turn); median time a turn %s (turns 11-30) and %s (45-64)",
		n, elapsed.Round(time.Millisecond), len(requests), summaries, perTurn, early[10].Round(time.Millisecond), late[10].Round(time.Millisecond))
	page := messagesPage(t, st.api.URL+"/conversations/logs/messages?offset=0&limit=1")
	require.Equal(t, 2*n, page.Total, "the transcript keeps every message")
	require.Equal(t, queries[0], page.Messages[0].Content, "whole")

	// A person compacts it, with instructions; the next turn reads the
	// summary and says so.
	resp, err := http.Post(st.api.URL+"/conversations/logs/compact", "application/json",
		strings.NewReader(`{"instructions": "keep the numbers"}`))
	require.NoError(t, err)
	var res protocol.CompactResult
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&res))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, res.Compacted)
	require.Equal(t, 2*n-2, res.Summarized)
	require.Equal(t, 2, res.Kept)
	require.Less(t, res.BytesAfter, res.BytesBefore)
	_, msgs := st.chat(t, `{"query": "what were the numbers?", "conversationId": "logs"}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	compacted := ofType(events, protocol.EventContextCompacted)
	require.Len(t, compacted, 1)
	require.Equal(t, 2*n-2, compacted[0].Summarized)
	require.Equal(t, 3, compacted[0].Kept, "the last turn and the new message, whole")
	last := st.replies.Requests()[len(st.replies.Requests())-1].Messages
	require.Equal(t, workflows.SummaryPrefix+"The user pasted logs. keep the numbers", last[1].Content)
	require.Equal(t, []string{queries[n-1], "noted", "what were the numbers?"}, []string{last[2].Content, last[3].Content, last[4].Content})
}

func TestCompactSaysWhatIsWrongWithTheRequest(t *testing.T) {
	t.Parallel()
	st := newStack(t, withScript(summaryScript))
	for _, tc := range []struct {
		path, body string
		status     int
		error      string
	}{
		{"/conversations/nobody/compact", `{}`, http.StatusNotFound, "compact conversation nobody"},
		{"/conversations/x/compact", `{"instructions": 3}`, http.StatusBadRequest, "instructions"},
		{"/conversations/bad%20id/compact", `{}`, http.StatusBadRequest, "conversationId \"bad id\" is not valid"},
	} {
		status, out := st.postJSON(t, tc.path, tc.body)
		require.Equal(t, tc.status, status, tc.path+" "+tc.body)
		require.Contains(t, out["error"], tc.error)
	}

	_, msgs := st.chat(t, `{"query": "hello", "conversationId": "short"}`)
	seq := 0
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	status, out := st.postJSON(t, "/conversations/short/compact", fmt.Sprintf(`{"instructions": %q}`, strings.Repeat("x", protocol.MaxCompactInstructions+1)))
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, out["error"], "the instructions are 4001 bytes, more than the 4000 a compaction takes")
	status, out = st.postJSON(t, "/conversations/short/compact", `{}`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, false, out["compacted"])
	require.Contains(t, out["reason"], "nothing to summarize")
}
