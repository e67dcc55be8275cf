package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// End-to-end proofs of the HTTP contract: a real Temporal dev server, real
// HTTP, the real tool activities, and a scripted model.

// declinedPrefix starts the tool response of every declined call, as
// docs/protocol.md quotes it.
const declinedPrefix = "Not executed: a person declined this call. Do not call it again unless the user asks you to."

func TestReadWriteBashBatchStreamsFullSequenceOverHTTP(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	resp, msgs := st.chat(t, `{"query": "take a note", "conversationId": "e2e-seq"}`)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "no", resp.Header.Get("X-Accel-Buffering"))
	turnID := resp.Header.Get(protocol.HeaderTurnID)
	require.Equal(t, contract.TurnWorkflowID("e2e-seq", 1), turnID)

	seq := 0
	first := untilEvent(t, msgs, &seq, protocol.EventHeartbeat, 1)
	require.Equal(t, []string{
		protocol.EventTurnStart, protocol.EventToken, protocol.EventToolCall,
		protocol.EventApprovalRequest, protocol.EventApprovalRequest, protocol.EventHeartbeat,
	}, shape(first))

	start := first[0]
	require.Equal(t, "e2e-seq", start.ConversationID)
	require.Equal(t, turnID, start.TurnID)
	require.Equal(t, turnID, start.WorkflowID)
	require.NotEmpty(t, start.RunID)
	require.Equal(t, scripted.DemoIntro, tokenText(first))

	calls := ofType(first, protocol.EventToolCall)[0].ToolCalls
	require.Equal(t, []string{"Read call_0_0", "Write call_0_1", "Bash call_0_2"}, callNames(calls))
	require.JSONEq(t, `{"file_path":"README.md"}`, calls[0].Arguments)
	require.JSONEq(t, `{"command":"ls -la"}`, calls[2].Arguments)

	requests := ofType(first, protocol.EventApprovalRequest)
	write, bash := requests[0], requests[1]
	for i, r := range requests {
		call := calls[i+1]
		require.Equal(t, call.Name, r.ToolName)
		require.Equal(t, call.ID, r.ToolCallID)
		require.Equal(t, call.Arguments, r.Arguments)
		require.Equal(t, turnID, r.WorkflowID)
		require.True(t, strings.HasPrefix(r.RequestID, turnID+"/apr-"), r.RequestID)
		require.NotNil(t, r.ExpiresAt)
		require.True(t, r.ExpiresAt.After(time.Now()), "expires in the future: %s", r.ExpiresAt)
	}
	require.NotEqual(t, write.RequestID, bash.RequestID)

	// Decided in the opposite order to the calls: the results still come
	// in the calls' order.
	const reason = "no notes today"
	postDecision(t, st.api, bash.RequestID, protocol.DecisionApprove, "", true)
	postDecision(t, st.api, write.RequestID, protocol.DecisionDecline, reason, true)

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, []string{
		protocol.EventApprovalDecision, protocol.EventApprovalDecision,
		protocol.EventToolResult, protocol.EventToken, protocol.EventFinish,
	}, shape(rest))
	decisions := ofType(rest, protocol.EventApprovalDecision)
	require.Equal(t, bash.RequestID, decisions[0].RequestID)
	require.Equal(t, "call_0_2", decisions[0].ToolCallID)
	require.Equal(t, protocol.DecisionApprove, decisions[0].Decision)
	require.Equal(t, write.RequestID, decisions[1].RequestID)
	require.Equal(t, "call_0_1", decisions[1].ToolCallID)
	require.Equal(t, protocol.DecisionDecline, decisions[1].Decision)
	require.Equal(t, reason, decisions[1].Reason)

	results := ofType(rest, protocol.EventToolResult)[0].ToolResults
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write declined", "call_0_2 Bash ok"}, resultStatuses(results))
	require.Contains(t, results[0].Result, "# demo", "Read returned the workspace's README")
	require.True(t, strings.HasPrefix(results[1].Result, declinedPrefix), results[1].Result)
	require.Contains(t, results[1].Result, reason)
	require.Contains(t, results[2].Result, "README.md", "ls -la ran in the workspace")

	finish := rest[len(rest)-1]
	require.Equal(t, protocol.FinishStop, finish.Reason)
	require.Equal(t, finish.Text, tokenText(rest), "the final answer streamed as tokens")
	require.Contains(t, finish.Text, reason, "the model read the decline's reason")

	_, ok := nextMessage(t, msgs)
	require.False(t, ok, "the stream closes after finish")
	require.NoFileExists(t, filepath.Join(st.workspace, scripted.DemoNotePath), "the declined Write did not run")
}

func TestApprovalByTemporalCLISignal(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	bin, err := devserver.Binary()
	require.NoError(t, err)
	_, msgs := st.chat(t, `{"query": "approved from the shell", "conversationId": "e2e-cli"}`)
	seq := 0
	requests := ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2), protocol.EventApprovalRequest)

	for _, r := range requests {
		// The command line docs/protocol.md gives ("Deciding through
		// Temporal"), with the server's address and namespace.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, "workflow", "signal",
			"--address", st.temporal.HostPort, "--namespace", st.temporal.Namespace,
			"--workflow-id", r.WorkflowID, "--name", "approval",
			"--input", `{"requestId":"`+r.RequestID+`","decision":"approve"}`,
		).CombinedOutput()
		cancel()
		require.NoError(t, err, "temporal workflow signal: %s", out)
	}

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	decisions := ofType(rest, protocol.EventApprovalDecision)
	require.Len(t, decisions, 2)
	for i, d := range decisions {
		require.Equal(t, requests[i].RequestID, d.RequestID)
		require.Equal(t, protocol.DecisionApprove, d.Decision)
	}
	results := ofType(rest, protocol.EventToolResult)[0].ToolResults
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write ok", "call_0_2 Bash ok"}, resultStatuses(results))
	require.Equal(t, protocol.FinishStop, rest[len(rest)-1].Reason)
	note, err := os.ReadFile(filepath.Join(st.workspace, scripted.DemoNotePath))
	require.NoError(t, err, "the approved Write ran")
	require.Contains(t, string(note), "You asked: approved from the shell")
}

func TestResumeAfterDroppedConnectionHasNoGapNoDuplicate(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	other := st.newAPI(t) // a second API instance: it shares only Temporal

	ctx, drop := context.WithCancel(context.Background())
	defer drop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, st.api.URL+"/chat/stream",
		strings.NewReader(`{"query": "resume me", "conversationId": "e2e-resume"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	turnID := resp.Header.Get(protocol.HeaderTurnID)

	seq := 0
	before := untilEvent(t, readSSE(resp.Body), &seq, protocol.EventApprovalRequest, 2)
	requests := ofType(before, protocol.EventApprovalRequest)
	n := seq
	drop()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Zero(c, metric(c, st.api, "tollgate_api_open_streams"))
		require.Zero(c, metric(c, st.api, "tollgate_api_pollers_running"))
	}, waitFor, 10*time.Millisecond, "the dropped client stops costing anything")

	// Decided while nobody watches: the events after n pile up in Temporal.
	postDecision(t, other, requests[0].RequestID, protocol.DecisionDecline, "not now", true)
	postDecision(t, st.api, requests[1].RequestID, protocol.DecisionApprove, "", true)

	last := strconv.Itoa(n)
	_, byHeader, _ := openStream(t, eventsURL(st.api, turnID), http.Header{"Last-Event-ID": {last}})
	_, byQuery, _ := openStream(t, eventsURL(other, turnID)+"?after="+last, nil)
	resumed := streamToEnd(t, byHeader)
	requireSeqs(t, n+1, resumed)
	require.Equal(t, resumed, streamToEnd(t, byQuery), "another API instance resumes the same")

	all := append(append([]protocol.Event{}, before...), resumed...)
	requireSeqs(t, 1, all)
	require.Equal(t, protocol.FinishStop, all[len(all)-1].Reason)

	// The turn has ended: both instances still resume it, from its result,
	// and a stream from the start is the same log.
	for _, api := range []*httptest.Server{st.api, other} {
		_, again, _ := openStream(t, eventsURL(api, turnID), http.Header{"Last-Event-ID": {last}})
		require.Equal(t, resumed, streamToEnd(t, again))
		_, whole, _ := openStream(t, eventsURL(api, turnID)+"?after=0", nil)
		require.Equal(t, all, streamToEnd(t, whole))
	}
	_, tail, _ := openStream(t, eventsURL(other, turnID), http.Header{"Last-Event-ID": {strconv.Itoa(len(all) - 1)}})
	require.Equal(t, all[len(all)-1:], streamToEnd(t, tail))
}

func TestLateUnknownAndForgedRequestIDsAreNotAccepted(t *testing.T) {
	t.Parallel()
	// The model asks for a Write, which times out; its next answer waits
	// for the test, so the turn is still running when the Write's request
	// is late; then it asks for a Bash call, which is declined. Its last
	// answer waits too, so the turn still runs when the Bash decision is
	// sent again (a turn that has ended answers every request "unknown").
	thinking, answer, last := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var thought, release, finish sync.Once
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		switch countRole(req.Messages, openai.ChatMessageRoleTool) {
		case 0:
			return scripted.Reply{Content: "A note first.", ToolCalls: []protocol.ToolCall{
				{ID: "call_write", Name: protocol.ToolWrite, Arguments: `{"file_path":"late.txt","content":"late"}`},
			}}
		case 1:
			thought.Do(func() { close(thinking) })
			<-answer
			return scripted.Reply{Content: "Then a listing.", ToolCalls: []protocol.ToolCall{
				{ID: "call_bash", Name: protocol.ToolBash, Arguments: `{"command":"ls"}`},
			}}
		default:
			<-last
			return scripted.Reply{Content: "Done."}
		}
	}
	st := newStack(t, withScript(script), withApprovalTimeout(2*time.Second))
	// Registered after newStack's, so they run before the model server's
	// Close, which would otherwise wait for a held answer forever.
	t.Cleanup(func() {
		release.Do(func() { close(answer) })
		finish.Do(func() { close(last) })
	})
	resp, msgs := st.chat(t, `{"query": "be late", "conversationId": "e2e-late"}`)
	turnID := resp.Header.Get(protocol.HeaderTurnID)

	seq := 0
	write := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	upToResult := untilEvent(t, msgs, &seq, protocol.EventToolResult, 1)
	timedOut := ofType(upToResult, protocol.EventApprovalDecision)
	require.Len(t, timedOut, 1)
	require.Equal(t, write.RequestID, timedOut[0].RequestID)
	require.Equal(t, protocol.DecisionTimeout, timedOut[0].Decision)
	require.Equal(t, []string{"call_write Write timeout"}, resultStatuses(lastOf(upToResult).ToolResults))
	select {
	case <-thinking:
	case <-time.After(waitFor):
		t.Fatal("the turn did not call the model again")
	}

	// The turn runs (it waits for the model), and none of these is taken:
	// the timed-out one is told it expired (the timer decided it).
	for id, reason := range map[string]string{
		write.RequestID: protocol.RejectExpired,
		contract.NewRequestID(turnID, "00000000000000000000000000000000"):       protocol.RejectUnknown,
		contract.NewRequestID(contract.TurnWorkflowID("e2e-nobody", 1), "0123"): protocol.RejectUnknown,
	} {
		for _, decision := range []string{protocol.DecisionApprove, protocol.DecisionDecline} {
			require.Equal(t, reason, postDecision(t, st.api, id, decision, "", false), id)
		}
	}
	release.Do(func() { close(answer) })

	// The same turn still takes a fresh request's decision, once.
	bash := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	postDecision(t, st.api, bash.RequestID, protocol.DecisionDecline, "", true)
	require.Equal(t, protocol.RejectDecided, postDecision(t, st.api, bash.RequestID, protocol.DecisionApprove, "", false)) // the other way
	finish.Do(func() { close(last) })

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, []string{"call_bash Bash declined"}, resultStatuses(ofType(rest, protocol.EventToolResult)[0].ToolResults))
	require.Equal(t, protocol.FinishStop, lastOf(rest).Reason)
	require.NoFileExists(t, filepath.Join(st.workspace, "late.txt"))
}

func TestWorkerKilledWhileApprovalPendingResumesAndRunsToolOnce(t *testing.T) {
	t.Parallel()
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Counted."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{
			{ID: "call_count", Name: protocol.ToolBash, Arguments: `{"command":"echo ran >> count.txt"}`},
		}}
	}
	if testing.Short() {
		t.Skip("builds the worker and starts a Temporal dev server")
	}
	waitForBuild := proctest.Build(t, "github.com/tollgate/tollgate/worker") // while the dev server starts
	st := newStack(t, withScript(script), withoutWorker())
	bin := waitForBuild()
	env := st.workerEnv(
		config.EnvApprovalTimeout+"=10m",
		config.EnvLogLevel+"=debug",
		config.EnvMetricsAddr+"=127.0.0.1:0", // no fixed port: two workers overlap, and make dev may run
	)

	first := proctest.Start(t, "worker-1", bin, env)
	_, msgs := st.chat(t, `{"query": "count", "conversationId": "e2e-kill"}`)
	seq := 0
	request := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	require.Equal(t, "call_count", request.ToolCallID)
	first.Crash(t)

	proctest.Start(t, "worker-2", bin, env)
	postDecision(t, st.api, request.RequestID, protocol.DecisionApprove, "", true)

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	results := ofType(rest, protocol.EventToolResult)[0].ToolResults
	require.Equal(t, []string{"call_count Bash ok"}, resultStatuses(results))
	require.Equal(t, protocol.FinishStop, rest[len(rest)-1].Reason)
	count, err := os.ReadFile(filepath.Join(st.workspace, "count.txt"))
	require.NoError(t, err)
	require.Equal(t, "ran\n", string(count), "the approved Bash call ran exactly once")
}

// workerEnv is the environment of a worker binary on the stack's Temporal,
// task queue, workspace and scripted model, and nothing of the developer's,
// with extra variables ("NAME=value") after.
func (st *stack) workerEnv(extra ...string) []string {
	return append(append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_"),
		config.EnvTemporalAddress+"="+st.temporal.HostPort,
		config.EnvTemporalNamespace+"="+st.temporal.Namespace,
		config.EnvTaskQueue+"="+st.queue,
		config.EnvWorkspace+"="+st.workspace,
		config.EnvOpenAIBaseURL+"="+st.model.URL+"/v1",
		config.EnvOpenAIAPIKey+"=test",
		config.EnvOpenAIModel+"="+scripted.ModelName,
		config.EnvAuditDB+"="+st.auditDB,
	), extra...)
}

// postDecision posts a decision to api's POST /chat/approval and requires it
// to be answered 200 with accepted as given.
func postDecision(t *testing.T, api *httptest.Server, requestID, decision, reason string, accepted bool) (refusal string) {
	t.Helper()
	body := fmt.Sprintf(`{"requestId":%q,"decision":%q,"reason":%q}`, requestID, decision, reason)
	resp, err := http.Post(api.URL+"/chat/approval", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s → %s", body, got)
	var out struct {
		Accepted bool   `json:"accepted"`
		Reason   string `json:"reason"`
	}
	require.NoError(t, json.Unmarshal(got, &out))
	require.Equal(t, accepted, out.Accepted, "%s → %s", body, got)
	require.Equal(t, accepted, out.Reason == "", "a refusal, and only a refusal, says why: %s", got)
	return out.Reason
}

// streamToEnd reads numbered events until the stream closes, which it must
// do right after a finish event. Keep-alives are checked and skipped.
func streamToEnd(t *testing.T, msgs <-chan sseMessage) []protocol.Event {
	t.Helper()
	var events []protocol.Event
	for _, m := range drain(t, msgs) {
		if !m.HasID {
			requireNotice(t, m)
			continue
		}
		e := decodeEvent(t, m)
		require.Equal(t, strconv.Itoa(e.Seq), m.ID)
		events = append(events, e)
	}
	require.NotEmpty(t, events)
	require.Equal(t, protocol.EventFinish, events[len(events)-1].Type, "the stream ends after finish")
	return events
}

// requireSeqs requires events to be numbered from, from+1, … with no gap.
func requireSeqs(t *testing.T, from int, events []protocol.Event) {
	t.Helper()
	for i, e := range events {
		require.Equal(t, from+i, e.Seq, "event %d of %d (%s)", i+1, len(events), e.Type)
	}
}

// shape lists the events' types, a run of tokens as one token.
func shape(events []protocol.Event) []string {
	var types []string
	for _, e := range events {
		if e.Type == protocol.EventToken && len(types) > 0 && types[len(types)-1] == protocol.EventToken {
			continue
		}
		types = append(types, e.Type)
	}
	return types
}

func ofType(events []protocol.Event, typ string) []protocol.Event {
	var out []protocol.Event
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func lastOf(events []protocol.Event) protocol.Event { return events[len(events)-1] }

// tokenText is the answer text that the token events spell, as a client
// shows it: applied in order, a reset one starting the text again.
func tokenText(events []protocol.Event) string {
	var b strings.Builder
	for _, e := range ofType(events, protocol.EventToken) {
		if e.Reset {
			b.Reset()
		}
		b.WriteString(e.Data)
	}
	return b.String()
}

// resets counts the reset token events.
func resets(events []protocol.Event) int {
	n := 0
	for _, e := range ofType(events, protocol.EventToken) {
		if e.Reset {
			n++
		}
	}
	return n
}

func callNames(calls []protocol.ToolCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Name+" "+c.ID)
	}
	return out
}

func resultStatuses(results []protocol.ToolResult) []string {
	var out []string
	for _, r := range results {
		out = append(out, r.ID+" "+r.Name+" "+r.Status)
	}
	return out
}

func countRole(msgs []openai.ChatCompletionMessage, role string) int {
	n := 0
	for _, m := range msgs {
		if m.Role == role {
			n++
		}
	}
	return n
}

func TestResumingATurnThatDoesNotExistIsNotFoundAtOnceWhileAQueuedTurnStreams(t *testing.T) {
	t.Parallel()
	// The first turn's model call thinks until the test lets it, so the
	// second message's turn is given its number but queued: it does not
	// exist in Temporal yet when it is asked for.
	think := make(chan struct{})
	st := newStack(t, withScript(func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleUser) == 1 {
			return scripted.Reply{Content: "Thinking it over.", Hold: think}
		}
		return scripted.Reply{Content: "Done."}
	}))
	const conv = "e2e-unknown-turn"
	first, _ := st.chat(t, `{"query": "think", "conversationId": "`+conv+`"}`)
	require.Equal(t, contract.TurnWorkflowID(conv, 1), first.Header.Get(protocol.HeaderTurnID))
	second, _ := chatAt(t, st.api.URL, `{"query": "and then", "conversationId": "`+conv+`"}`)
	queued := second.Header.Get(protocol.HeaderTurnID)
	require.Equal(t, contract.TurnWorkflowID(conv, 2), queued)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err := st.client.DescribeWorkflow(ctx, queued, "")
	require.True(t, isNotFound(err), "the second turn waits behind the first: %v", err)

	// Mistyped ids, a turn the conversation has not given out, and a
	// conversation that does not exist: 404 at once, on any API instance.
	other := st.newAPI(t)
	for _, id := range []string{
		contract.TurnWorkflowID(conv+"x", 1), contract.TurnWorkflowID(conv, 3), contract.TurnWorkflowID("no-such-conversation", 1),
	} {
		began := time.Now()
		req, err := http.NewRequest(http.MethodGet, eventsURL(other, id)+"?after=0", nil)
		require.NoError(t, err)
		status, msg := doJSON(t, req)
		require.Equal(t, http.StatusNotFound, status, id)
		require.Contains(t, msg, "turn not found: no turn "+id)
		require.Less(t, time.Since(began), waitFor/2, "answered at once, not after keep-alives")
	}

	// The conversation lists both turns, the queued one without its
	// message yet; a conversation that does not exist is 404.
	var listed protocol.TurnList
	getJSON(t, other.URL+"/conversations/"+conv+"/turns", http.StatusOK, &listed)
	require.Equal(t, conv, listed.ConversationID)
	require.Equal(t, []protocol.TurnSummary{{TurnID: contract.TurnWorkflowID(conv, 1), Message: "think"}, {TurnID: queued}}, listed.Turns)
	getJSON(t, other.URL+"/conversations/"+conv+"/turns?limit=1", http.StatusOK, &listed)
	require.Equal(t, []protocol.TurnSummary{{TurnID: queued}}, listed.Turns, "the last turn")
	req, err := http.NewRequest(http.MethodGet, other.URL+"/conversations/no-such-conversation/turns", nil)
	require.NoError(t, err)
	status, _ := doJSON(t, req)
	require.Equal(t, http.StatusNotFound, status)
	req, err = http.NewRequest(http.MethodGet, other.URL+"/conversations/"+conv+"/turns?limit=0", nil)
	require.NoError(t, err)
	status, msg := doJSON(t, req)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, msg, `limit "0" is not a whole number from 1 to 50`)

	// The queued turn streams: it says it is queued, and starts once the
	// first one stops.
	resp, msgs, _ := openStream(t, eventsURL(other, queued), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for m := range msgs {
		if m.Data == `{"type":"heartbeat"}` {
			continue
		}
		requireQueued(t, m, conv, queued)
		break
	}
	close(think)
	events := streamToEnd(t, msgs)
	require.Equal(t, protocol.EventTurnStart, events[0].Type)
	require.Equal(t, queued, events[0].TurnID)
	require.Equal(t, protocol.FinishStop, lastOf(events).Reason)
}

// getJSON GETs url, requires status and decodes the body into out.
func getJSON(t *testing.T, url string, status int, out any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, status, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
}
