package main

import (
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestAQueuedTurnsStreamSaysSoAndWaitsPastTheNotFoundLimit: the stream of
// a turn whose message waits behind the conversation's running turn says
// it is queued, then only keeps alive, for longer than a turn that does
// not exist may take (notFoundTimeout), and streams the turn once it
// starts.
func TestAQueuedTurnsStreamSaysSoAndWaitsPastTheNotFoundLimit(t *testing.T) {
	src := newFakeSource()
	running, queued := contract.TurnWorkflowID("q", 1), contract.TurnWorkflowID("q", 2)
	src.publish(running, protocol.EventTurnStart, protocol.EventApprovalRequest)
	src.setMissing(queued, true)
	src.setConversation("q", contract.ConversationState{ConversationID: "q", Turns: 2, Running: running, Queued: 1})
	_, ts := newTestServer(t, src, 10*time.Millisecond)

	opened := time.Now()
	_, msgs, _ := openStream(t, eventsURL(ts, queued), nil)
	m, ok := nextMessage(t, msgs)
	require.True(t, ok)
	requireQueued(t, m, "q", queued)
	// Keep-alives only, past the limit of a turn that does not exist.
	for time.Since(opened) < 3*fastSettings.notFoundTimeout {
		m, ok := nextMessage(t, msgs)
		require.True(t, ok, "the stream goes on")
		require.JSONEq(t, `{"type":"heartbeat"}`, m.Data)
	}

	// The running turn ends, and the queued one starts.
	src.setConversation("q", contract.ConversationState{ConversationID: "q", Turns: 2, Running: queued})
	src.publish(queued, protocol.EventTurnStart, protocol.EventFinish)
	src.setMissing(queued, false)
	src.close(running)
	var events []protocol.Event
	for _, m := range drain(t, msgs) {
		if m.HasID {
			events = append(events, decodeEvent(t, m))
		}
	}
	require.Equal(t, []string{protocol.EventTurnStart, protocol.EventFinish}, shape(events))
}

// TestAQueuedTurnsStreamStartsWithItsNoticeWhenTheConversationIsSlow: the
// hub learns that a turn is queued from its conversation, which a busy
// worker answers; a keep-alive that falls due meanwhile waits for the
// answer, so that the stream still starts with the queued notice.
func TestAQueuedTurnsStreamStartsWithItsNoticeWhenTheConversationIsSlow(t *testing.T) {
	src := newFakeSource()
	running, queued := contract.TurnWorkflowID("slow", 1), contract.TurnWorkflowID("slow", 2)
	src.publish(running, protocol.EventTurnStart)
	src.setMissing(queued, true)
	src.setConversation("slow", contract.ConversationState{ConversationID: "slow", Turns: 2, Running: running, Queued: 1})
	answer := src.holdConversations()
	_, ts := newTestServer(t, src, time.Millisecond)

	_, msgs, _ := openStream(t, eventsURL(ts, queued), nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Positive(c, metric(c, ts, "tollgate_api_keepalives_held_total"), "a keep-alive fell due before the conversation answered")
	}, waitFor, time.Millisecond)
	close(answer)
	m, ok := nextMessage(t, msgs)
	require.True(t, ok)
	requireQueued(t, m, "slow", queued)
	m, ok = nextMessage(t, msgs)
	require.True(t, ok, "the stream goes on")
	require.JSONEq(t, `{"type":"heartbeat"}`, m.Data, "the keep-alive held back follows the notice")
}

// TestAStreamResumedWhileItsTurnIsQueuedSaysSoAgain: a client that
// resumes the stream of a queued turn by its id hears that it is queued.
func TestAStreamResumedWhileItsTurnIsQueuedSaysSoAgain(t *testing.T) {
	src := newFakeSource()
	running, queued := contract.TurnWorkflowID("r", 4), contract.TurnWorkflowID("r", 6)
	src.publish(running, protocol.EventTurnStart)
	src.setMissing(queued, true)
	src.setConversation("r", contract.ConversationState{ConversationID: "r", Turns: 6, Running: running, Queued: 2})
	_, ts := newTestServer(t, src, time.Hour)

	for range 2 {
		_, msgs, cancel := openStream(t, eventsURL(ts, queued)+"?after=0", nil)
		m, ok := nextMessage(t, msgs)
		require.True(t, ok)
		requireQueued(t, m, "r", queued)
		cancel()
	}
}

// TestASecondStreamOfAQueuedTurnIsNotLookedUpAgain: once this process
// streams a turn its conversation said is queued, another client's stream
// of it opens without asking Temporal again whether it exists.
func TestASecondStreamOfAQueuedTurnIsNotLookedUpAgain(t *testing.T) {
	src := newFakeSource()
	running, queued := contract.TurnWorkflowID("s", 1), contract.TurnWorkflowID("s", 2)
	src.publish(running, protocol.EventTurnStart)
	src.setMissing(queued, true)
	src.setConversation("s", contract.ConversationState{ConversationID: "s", Turns: 2, Running: running, Queued: 1})
	_, ts := newTestServer(t, src, time.Hour)

	_, first, _ := openStream(t, eventsURL(ts, queued), nil)
	m, ok := nextMessage(t, first)
	require.True(t, ok)
	requireQueued(t, m, "s", queued)
	require.EqualValues(t, 1, src.exists.Load())

	_, second, _ := openStream(t, eventsURL(ts, queued), nil)
	m, ok = nextMessage(t, second)
	require.True(t, ok)
	requireQueued(t, m, "s", queued)
	require.EqualValues(t, 1, src.exists.Load(), "the second stream is not looked up")
}

// TestAMessageQueuedBehindABusyTurnIsStreamedWhenItsTurnRuns runs on a
// real dev server: the conversation's first turn waits for its model,
// which holds its answer, when a second message comes; that message's
// stream says it is queued and keeps alive past the API's limit for a
// turn that does not exist, then streams the turn when the first ends.
func TestAMessageQueuedBehindABusyTurnIsStreamedWhenItsTurnRuns(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if req.Messages[len(req.Messages)-1].Content == "one" {
			return scripted.Reply{Content: "thinking it over", Hold: release}
		}
		return scripted.Reply{Content: "hello"}
	}
	st := newStack(t, withScript(script))
	settings := defaultHubSettings
	settings.notFoundTimeout, settings.startingFor = 300*time.Millisecond, 100*time.Millisecond
	api := serveAPI(t, newServer(st.apiOptions(), temporalSource{client: st.apiClient, log: st.log}, settings))

	_, first := chatAt(t, api.URL, `{"query":"one","conversationId":"busy-1"}`)
	seq1 := 0
	untilEvent(t, first, &seq1, protocol.EventTurnStart, 1)
	require.Eventually(t, func() bool { return len(st.replies.Requests()) == 1 }, waitFor, 10*time.Millisecond, "turn 1 asks its model")

	sent := time.Now()
	resp, second := chatAt(t, api.URL, `{"query":"two","conversationId":"busy-1"}`)
	turn2 := contract.TurnWorkflowID("busy-1", 2)
	require.Equal(t, turn2, resp.Header.Get(protocol.HeaderTurnID))
	m, ok := nextMessage(t, second)
	require.True(t, ok)
	requireQueued(t, m, "busy-1", turn2)
	for time.Since(sent) < 3*settings.notFoundTimeout {
		m, ok := nextMessage(t, second)
		require.True(t, ok, "the stream goes on")
		require.JSONEq(t, `{"type":"heartbeat"}`, m.Data)
	}

	close(release)
	untilEvent(t, first, &seq1, protocol.EventFinish, 1)
	seq2 := 0
	events := untilEvent(t, second, &seq2, protocol.EventFinish, 1)
	require.Equal(t, protocol.EventTurnStart, events[0].Type)
	require.Equal(t, protocol.FinishStop, lastOf(events).Reason)
}
