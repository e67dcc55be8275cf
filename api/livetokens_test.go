package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

const liveAnswer = "I will read the file and then say what it holds, one word at a time, as a model writes."

// heldAnswer answers every request with liveAnswer, letting out its first
// six chunks and holding the rest until release is called.
func heldAnswer(t *testing.T) (script scripted.Script, release func()) {
	hold := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	return func(openai.ChatCompletionRequest) scripted.Reply {
		return scripted.Reply{Content: liveAnswer, Hold: hold, HoldAfter: 6}
	}, release
}

func TestAnAnswerStreamsWhileTheModelWritesAndItsTurnHasNoTokenSignal(t *testing.T) {
	t.Parallel()
	script, release := heldAnswer(t)
	st := newStack(t, withScript(script))
	turn := st.startTurn(t, `{"query": "talk", "conversationId": "live-tokens"}`)
	turn.until(protocol.EventToken, faultWait)

	// The model is still writing: the token came from its call's heartbeat
	// details, not from the turn's log.
	ctx := context.Background()
	d, err := st.client.DescribeWorkflow(ctx, turn.turnID, "")
	require.NoError(t, err)
	pending := d.RawResponse.GetPendingActivities()
	require.Len(t, pending, 1)
	require.Equal(t, "model-1", pending[0].GetActivityId())
	shown := tokenText(turn.events)
	require.NotEmpty(t, shown)
	require.True(t, strings.HasPrefix(liveAnswer, shown), "%q begins the answer", shown)
	require.Less(t, len(shown), len(liveAnswer))

	release()
	finish := turn.until(protocol.EventFinish, faultWait)
	require.Equal(t, protocol.FinishStop, finish.Reason)
	require.Equal(t, liveAnswer, tokenText(turn.events))
	turn.requireWholeLog(st) // a fresh stream gives the same events under the same ids

	signals, versions := 0, 0
	it := st.client.GetWorkflowHistory(ctx, turn.turnID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			signals++
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			if ev.GetMarkerRecordedEventAttributes().GetMarkerName() == "Version" {
				versions++
			}
		}
	}
	require.Zero(t, signals, "the answer cost the turn's history no signal")
	require.Zero(t, versions, "the turn took the patch with its level, asking no GetVersion")
	require.Positive(t, liveReads(t, st), "the API read the call's details")
}

func TestATurnCancelledWhileTheModelWritesKeepsTheTokensItShowed(t *testing.T) {
	t.Parallel()
	script, _ := heldAnswer(t) // never released: the call ends by its heartbeat timeout
	st := newStack(t, withScript(script), withSettings(func(s *workflows.Settings) { s.ModelHeartbeatTimeout = fastHeartbeat }))
	turn := st.startTurn(t, `{"query": "talk", "conversationId": "live-cancel"}`)
	turn.until(protocol.EventToken, faultWait)
	shownAt := len(turn.events)

	require.NoError(t, st.client.CancelWorkflow(context.Background(), turn.turnID, ""))
	finish := turn.until(protocol.EventFinish, faultWait)
	require.Equal(t, protocol.FinishCancelled, finish.Reason)
	require.True(t, strings.HasPrefix(liveAnswer, tokenText(turn.events)))
	turn.requireWholeLog(st) // the tokens shown before the cancel are in the log under their ids
	require.GreaterOrEqual(t, len(ofType(turn.events, protocol.EventToken)), shownAt-1)
}

// liveReads is the API's tollgate_api_live_reads_total.
func liveReads(t *testing.T, st *stack) int {
	t.Helper()
	resp, err := http.Get(st.api.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^tollgate_api_live_reads_total (\d+)`).FindSubmatch(body)
	require.NotNil(t, m, "the API exposes tollgate_api_live_reads_total")
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return n
}
