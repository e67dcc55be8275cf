package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
)

func TestATurnThatLostItsPayloadsEndsNamingOneAndItsConversationGoesOn(t *testing.T) {
	t.Parallel()
	// A Write far past the store's threshold: the model's answer that asks
	// for it is kept in the payload store, and the turn's history holds a
	// claim to it.
	content := strings.Repeat("a line of the big file\n", 4000)
	args, err := json.Marshal(map[string]string{"file_path": "big.txt", "content": content})
	require.NoError(t, err)
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == openai.ChatMessageRoleUser && last.Content == "and now?":
			return scripted.Reply{Content: "Here for the next one."}
		case countRole(req.Messages, openai.ChatMessageRoleTool) > 0:
			return scripted.Reply{Content: "Wrote it."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: "call_big", Name: protocol.ToolWrite, Arguments: string(args)}}}
	}
	st := newStack(t, withScript(script), withPayloadStore(), withoutWorker())
	settings := st.workerSettings(nil)
	first := st.startTestWorker(t, "worker-1", settings)
	turn := st.startTurn(t, `{"query": "write it", "conversationId": "lost-payload"}`)
	request := turn.until(protocol.EventApprovalRequest, faultWait)

	// The paused turn's payloads go (a folder wiped, a lifecycle rule), and
	// the worker that held the turn in its cache is redeployed: the next
	// one must read the turn's history from the start.
	first.Stop(t)
	var keys []string
	manifests, err := filepath.Glob(filepath.Join(st.payloadDir, "payloads", "*", "*"))
	require.NoError(t, err)
	for _, m := range manifests {
		keys = append(keys, filepath.Base(m))
	}
	require.NotEmpty(t, keys, "the turn's large payloads are in the store")
	require.NoError(t, os.RemoveAll(filepath.Join(st.payloadDir, "payloads")))
	require.NoError(t, os.RemoveAll(filepath.Join(st.payloadDir, "chunks")))
	second := st.startTestWorker(t, "worker-2", settings)

	// Approving answers at once: the turn has ended, so nothing took it.
	began := time.Now()
	body := fmt.Sprintf(`{"requestId":%q,"decision":"approve"}`, request.RequestID)
	resp, err := http.Post(st.api.URL+"/chat/approval", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	took := time.Since(began)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", answer)
	var out struct {
		Accepted bool   `json:"accepted"`
		Reason   string `json:"reason"`
		Message  string `json:"message"`
	}
	require.NoError(t, json.Unmarshal(answer, &out))
	require.False(t, out.Accepted, "%s", answer)
	require.Equal(t, protocol.RejectUnknown, out.Reason, "%s", answer)
	require.Contains(t, out.Message, "is not in the payload store", "%s", answer)
	require.Less(t, took, 10*time.Second, "answered quickly, not at the API's update timeout")

	// The stream ends with an error that names the missing payload.
	message := untilStreamError(t, turn)
	key := keyIn(message, keys)
	require.NotEmpty(t, key, "the error names a payload that was lost: %s", message)
	require.Contains(t, message, "is not in the payload store")
	require.NotContains(t, message, st.payloadDir, "the key, not where the store is")
	require.Contains(t, out.Message, key, "the decision's answer names the same payload")
	// And a stream opened now says the same at once.
	_, again, _ := openStream(t, eventsURL(st.api, turn.turnID), http.Header{"Last-Event-ID": {fmt.Sprint(len(turn.events))}})
	require.Equal(t, message, untilStreamError(t, &turnStream{t: t, api: st.api, turnID: turn.turnID, msgs: again, events: turn.events}))
	require.Contains(t, second.Log(), "ended a turn whose history names a payload")
	_, err = os.Stat(filepath.Join(st.workspace, "big.txt"))
	require.ErrorIs(t, err, os.ErrNotExist, "the approval came to no turn: nothing was written")

	// The conversation takes its next message.
	next := st.startTurn(t, `{"query": "and now?", "conversationId": "lost-payload"}`)
	finish := next.until(protocol.EventFinish, faultWait)
	require.Equal(t, protocol.FinishStop, finish.Reason, finish.Message)
	require.Equal(t, "Here for the next one.", finish.Text)
	t.Logf("lost %d payloads; approve answered in %s", len(keys), took.Round(time.Millisecond))
}

// untilStreamError reads the turn's stream until its unnumbered error
// event, which must be its last, and returns the error's message. Numbered
// events before it continue the turn's log.
func untilStreamError(t *testing.T, s *turnStream) string {
	t.Helper()
	deadline := time.NewTimer(faultWait)
	defer deadline.Stop()
	for {
		select {
		case m, ok := <-s.msgs:
			require.True(t, ok, "the stream ended without an error event")
			if m.HasID {
				e := decodeEvent(t, m)
				require.Equal(t, len(s.events)+1, e.Seq)
				s.events = append(s.events, e)
				continue
			}
			var e protocol.Event
			require.NoError(t, json.Unmarshal([]byte(m.Data), &e))
			if e.Type == protocol.EventHeartbeat {
				continue
			}
			require.Equal(t, protocol.EventError, e.Type, m.Data)
			_, more := <-s.msgs
			require.False(t, more, "the stream ends after its error")
			return e.Message
		case <-deadline.C:
			t.Fatalf("turn %s: no error within %s; events so far: %v", s.turnID, faultWait, shape(s.events))
		}
	}
}

// keyIn returns the key of keys that message names, or "".
func keyIn(message string, keys []string) string {
	i := slices.IndexFunc(keys, func(k string) bool { return strings.Contains(message, k) })
	if i < 0 {
		return ""
	}
	return keys[i]
}
