package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestABatchOfAHundredProtectedCallsWaitsAndRuns goes past Temporal's 2 KB
// limit on a search attribute value: every pending request id of a batch no
// longer fits in TollgatePendingApprovals (22 did not, with ids this long).
func TestABatchOfAHundredProtectedCallsWaitsAndRuns(t *testing.T) {
	t.Parallel()
	const n = 100
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "All ran."}
		}
		var calls []protocol.ToolCall
		for i := range n {
			calls = append(calls, protocol.ToolCall{ID: fmt.Sprintf("call_%03d", i), Name: protocol.ToolBash, Arguments: fmt.Sprintf(`{"command":"echo %d"}`, i)})
		}
		return scripted.Reply{ToolCalls: calls}
	}
	st := newStack(t, withScript(script))
	const conv = "a-wide-batch-of-protected-calls-in-a-conversation-with-a-long-id"
	_, msgs := st.chat(t, `{"query": "run them all", "conversationId": "`+conv+`"}`)
	seq := 0
	requests := ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, n), protocol.EventApprovalRequest)
	require.Len(t, requests, n)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, approvalsAt(c, st.api.URL, "?conversationId="+conv), n, "the inbox lists every one")
	}, waitFor, 50*time.Millisecond)
	for _, r := range requests {
		postDecision(t, st.api, r.RequestID, protocol.DecisionApprove, "", true)
	}
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	finish := events[len(events)-1]
	require.Equal(t, protocol.FinishStop, finish.Reason, finish.Message)
	results := ofType(events, protocol.EventToolResult)[0].ToolResults
	require.Len(t, results, n)
	for i, r := range results {
		require.Equal(t, protocol.StatusOK, r.Status, r.Result)
		require.Contains(t, r.Result, fmt.Sprint(i))
	}
}

func TestAConversationThatEndedIsNeverReplacedByAnEmptyOneUnderItsID(t *testing.T) {
	t.Parallel()
	st := newStack(t, withScript(scripted.Always(scripted.Reply{Content: "Hello."})))
	_, msgs := st.chat(t, `{"query": "hi", "conversationId": "ended"}`)
	seq := 0
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	id := contract.ConversationWorkflowID("ended")
	require.NoError(t, st.client.TerminateWorkflow(ctx, id, "", "an operator ended it"))

	status, msg := post(t, st.api.URL+"/chat/stream", "application/json", "", `{"query": "again", "conversationId": "ended"}`)
	require.Equal(t, http.StatusConflict, status, msg)
	require.Contains(t, msg, "conversation ended has ended")
	desc, err := st.client.DescribeWorkflow(ctx, id, "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, desc.RawResponse.GetWorkflowExecutionInfo().GetStatus(), "no new run under its id")
	_, err = st.client.DescribeWorkflow(ctx, contract.TurnWorkflowID("ended", 1), "")
	require.NoError(t, err, "turn 1 is still the first conversation's")
}

// TestAWriteOfTwoAndAHalfMebibytesPassesThroughThePayloadStore goes past
// Temporal's 2 MB payload limit in one turn: the model asks to write 2.5 MB
// (its answer, the approval request, the tool's input, the next model
// call's input and the turn's result all carry it). With the payload store,
// history holds claims, not content, and the content is stored once.
func TestAWriteOfTwoAndAHalfMebibytesPassesThroughThePayloadStore(t *testing.T) {
	t.Parallel()
	var generated strings.Builder
	for line := 0; generated.Len() < 5<<19; line++ { // 2.5 MB
		sum := sha256.Sum256(fmt.Appendf(nil, "%d", line))
		fmt.Fprintf(&generated, "%7d  %x\n", line, sum[:24])
	}
	content := generated.String()
	args, err := json.Marshal(map[string]string{"file_path": "big.txt", "content": content})
	require.NoError(t, err)
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Wrote it."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: "call_big", Name: protocol.ToolWrite, Arguments: string(args)}}}
	}
	st := newStack(t, withScript(script), withPayloadStore())
	_, msgs := st.chat(t, `{"query": "write it", "conversationId": "big-write"}`)
	seq := 0
	request := ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1), protocol.EventApprovalRequest)[0]
	require.Len(t, request.Arguments, len(args), "the person sees the whole call")
	postDecision(t, st.api, request.RequestID, protocol.DecisionApprove, "", true)
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	finish := events[len(events)-1]
	require.Equal(t, protocol.FinishStop, finish.Reason, finish.Message)
	require.Equal(t, "Wrote it.", finish.Text)
	require.Equal(t, content, fileText(filepath.Join(st.workspace, "big.txt")))

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	size := 0
	iter := st.client.GetWorkflowHistory(ctx, contract.TurnWorkflowID("big-write", 1), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		size += proto.Size(e)
	}
	require.Less(t, size, 256<<10, "the turn's history holds claims, not megabytes")
	stored := 0
	require.NoError(t, filepath.WalkDir(st.payloadDir, func(_ string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			info, _ := e.Info()
			stored += int(info.Size())
		}
		return err
	}))
	require.Greater(t, stored, len(content), "the content is in the store")
	require.Less(t, stored, 2*len(content), "once, though six payloads carry it")
	t.Logf("turn history %d KiB; payload store %d KiB for %d KiB of content", size>>10, stored>>10, len(content)>>10)

	// What the Web UI does with the history: it asks the API's codec
	// endpoint, from its own origin, to resolve the references.
	var result *commonpb.Payloads
	iter = st.client.GetWorkflowHistory(ctx, contract.TurnWorkflowID("big-write", 1), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		result = e.GetWorkflowExecutionCompletedEventAttributes().GetResult()
	}
	require.NotNil(t, result)
	require.Less(t, proto.Size(result), 4<<10, "history holds a reference to the turn's result")
	body, err := protojson.Marshal(result)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodOptions, st.api.URL+"/codec/decode", nil)
	require.NoError(t, err)
	req.Header.Set("Origin", testWebUIOrigin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "the preflight passes")
	require.Equal(t, testWebUIOrigin, resp.Header.Get("Access-Control-Allow-Origin"))
	req, err = http.NewRequest(http.MethodPost, st.api.URL+"/codec/decode", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", testWebUIOrigin)
	req.Header.Set("X-Namespace", st.temporal.Namespace)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, testWebUIOrigin, resp.Header.Get("Access-Control-Allow-Origin"))
	decoded, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var payloadsOut commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(decoded, &payloadsOut))
	var out contract.TurnOutput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(payloadsOut.GetPayloads()[0], &out))
	require.Equal(t, "Wrote it.", out.Text, "the Web UI shows the turn's result, not a storage key")

	// What the Temporal CLI does with --codec-endpoint.
	temporal, err := devserver.Binary()
	require.NoError(t, err)
	cliCtx, cancelCLI := context.WithTimeout(context.Background(), time.Minute)
	defer cancelCLI()
	cli, err := exec.CommandContext(cliCtx, temporal, "workflow", "result", "--address", st.temporal.HostPort, "--namespace", st.temporal.Namespace,
		"--workflow-id", contract.TurnWorkflowID("big-write", 1), "--codec-endpoint", st.api.URL+"/codec", "--output", "json").CombinedOutput()
	require.NoError(t, err, "%.500s", cli)
	require.True(t, strings.Contains(string(cli), `"text": "Wrote it."`), "the CLI shows the turn's result: %.500s", cli)

	// Another site may not read it.
	req, err = http.NewRequest(http.MethodPost, st.api.URL+"/codec/decode", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://evil.example")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	// A body past codecBodyBytes is refused, not buffered.
	req, err = http.NewRequest(http.MethodPost, st.api.URL+"/codec/decode", bytes.NewReader(bytes.Repeat([]byte(" "), codecBodyBytes+1)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	tooBig, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Contains(t, string(tooBig), "a codec request is at most 4 MiB")
}

// TestALongConversationIsCompactedForTheModelAndKeptWholeForPeople runs two
// turns over HTTP: the first reads a file larger than the context budget
// and the model reads its beginning and end (its middle cut, with where to
// read it whole), the second sees it left out (context_compacted in each
// stream), and the conversation's transcript still holds all of it.
func TestALongConversationIsCompactedForTheModelAndKeptWholeForPeople(t *testing.T) {
	t.Parallel()
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == openai.ChatMessageRoleTool:
			return scripted.Reply{Content: "Read it."}
		case last.Content == "read the big file":
			return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: "call_big", Name: protocol.ToolRead, Arguments: `{"file_path":"big.txt"}`}}}
		default:
			for _, m := range req.Messages {
				if m.Role == openai.ChatMessageRoleTool && m.Content == workflows.ElidedToolOutput {
					return scripted.Reply{Content: "I no longer see the file; I would read it again."}
				}
			}
			return scripted.Reply{Content: "I still see the file."}
		}
	}
	st := newStack(t, withScript(script), withSettings(func(s *workflows.Settings) { s.ContextBudget = 20 << 10 }))
	big := strings.Repeat("a line of the big file\n", 30<<10/23)
	require.NoError(t, os.WriteFile(filepath.Join(st.workspace, "big.txt"), []byte(big), 0o644))

	_, msgs := st.chat(t, `{"query": "read the big file", "conversationId": "compacted"}`)
	seq := 0
	first := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	cut := ofType(first, protocol.EventContextCompacted)
	require.Len(t, cut, 1, "the first turn's view fits until it reads the file")
	require.Equal(t, 1, cut[0].Cut, "the output the model has not read yet is cut, not left out")
	require.Zero(t, cut[0].Elided)
	require.LessOrEqual(t, cut[0].BytesAfter, 20<<10)

	_, msgs = st.chat(t, `{"query": "what did it say?", "conversationId": "compacted"}`)
	seq = 0
	second := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	compacted := ofType(second, protocol.EventContextCompacted)
	require.Len(t, compacted, 1)
	require.Equal(t, 1, compacted[0].Elided)
	require.Greater(t, compacted[0].BytesBefore, 20<<10)
	require.LessOrEqual(t, compacted[0].BytesAfter, 20<<10)
	require.Equal(t, "I no longer see the file; I would read it again.", second[len(second)-1].Text)

	var page contract.MessagesPage
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		page = messagesPage(c, st.api.URL+"/conversations/compacted/messages?offset=0&limit=3")
		require.Equal(c, 6, page.Total, "two turns: user, call, output, answer; user, answer")
	}, waitFor, 50*time.Millisecond)
	require.Len(t, page.Messages, 3)
	require.Contains(t, page.Messages[2].Content, "a line of the big file", "the transcript keeps the whole output")
	_, msgs = st.chat(t, `{"query": "and now?", "conversationId": "compacted"}`)
	seq = 0
	third := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, protocol.FinishStop, third[len(third)-1].Reason, "the conversation takes its next message")
}

// TestATurnEndsWithAnErrorBeforeItsHistoryReachesTemporalsLimit goes past
// Temporal's limit on a history's events, lowered on this dev server (to
// 600 from 51,200, with continue-as-new suggested from 300): the turn reads
// one file a step for ever, and must end with an error event, not be
// terminated; the conversation keeps what it did and takes the next
// message.
func TestATurnEndsWithAnErrorBeforeItsHistoryReachesTemporalsLimit(t *testing.T) {
	t.Parallel()
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if req.Messages[len(req.Messages)-1].Content == "and now?" {
			return scripted.Reply{Content: "Fresh turn."}
		}
		n := countRole(req.Messages, openai.ChatMessageRoleAssistant)
		return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: fmt.Sprintf("call_%d", n), Name: protocol.ToolRead, Arguments: `{"file_path":"README.md"}`}}}
	}
	st := newStack(t, withScript(script),
		withSettings(func(s *workflows.Settings) { s.MaxSteps = 1000 }),
		withDevServer(devserver.Options{DynamicConfig: []string{
			"limit.historyCount.suggestContinueAsNew=300", "limit.historyCount.warn=400", "limit.historyCount.error=600",
		}}))
	_, msgs := st.chat(t, `{"query": "read it again and again", "conversationId": "history-limit"}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	finish := events[len(events)-1]
	require.Equal(t, protocol.FinishError, finish.Reason)
	require.Contains(t, finish.Message, "near Temporal's limits")
	steps := len(ofType(events, protocol.EventToolResult))
	require.Greater(t, steps, 10)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	desc, err := st.client.DescribeWorkflow(ctx, contract.TurnWorkflowID("history-limit", 1), "")
	require.NoError(t, err)
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, info.GetStatus(), "completed, not terminated")
	require.Less(t, info.GetHistoryLength(), int64(600))

	_, msgs = st.chat(t, `{"query": "and now?", "conversationId": "history-limit"}`)
	seq = 0
	next := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, "Fresh turn.", next[len(next)-1].Text)
	// The conversation adds a turn's messages in the task after the turn
	// closes, moments after its finish event.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		page := messagesPage(c, st.api.URL+"/conversations/history-limit/messages?limit=1")
		require.Equal(c, 1+2*steps+2, page.Total, "the first turn's calls and results are kept, then the next turn's")
	}, waitFor, 50*time.Millisecond)
}

// messagesPage reads a page of GET /conversations/:id/messages at url.
func messagesPage(t require.TestingT, url string) contract.MessagesPage {
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var page contract.MessagesPage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	return page
}

// TestAConversationOfSixtyLongMessagesGoesOnPastTwoMegabytes sends sixty
// messages of 40 KB (a pasted log each) to one conversation that continues
// as new every ten turns: its continue-as-new input passes Temporal's 2 MB
// payload limit (which terminated such a conversation, and a fresh one
// took its id), and with the payload store it goes on.
func TestAConversationOfSixtyLongMessagesGoesOnPastTwoMegabytes(t *testing.T) {
	t.Parallel()
	st := newStack(t, withPayloadStore(),
		withScript(scripted.Always(scripted.Reply{Content: "Noted."})),
		withSettings(func(s *workflows.Settings) { s.TurnsPerRun = 10 }))
	const n = 60
	runID := func(t require.TestingT) string {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		d, err := st.client.DescribeWorkflow(ctx, contract.ConversationWorkflowID("long-messages"), "")
		require.NoError(t, err)
		return d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	}
	var lastRun string
	for i := range n {
		if i == n-1 {
			lastRun = runID(t)
		}
		log := fmt.Sprintf("log %d\n", i) + strings.Repeat(fmt.Sprintf("%d a pasted log line\n", i), 40<<10/22)
		body, err := json.Marshal(map[string]string{"query": log, "conversationId": "long-messages"})
		require.NoError(t, err)
		resp, msgs := st.chat(t, string(body))
		require.Equal(t, contract.TurnWorkflowID("long-messages", i+1), resp.Header.Get(protocol.HeaderTurnID))
		seq := 0
		events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
		require.Equal(t, protocol.FinishStop, events[len(events)-1].Reason, "turn %d", i+1)
	}
	// After the sixtieth turn the conversation continues as new with all
	// sixty messages, 2.3 MB: past the limit (after the fiftieth it was
	// still just under).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NotEqual(c, lastRun, runID(c), "the conversation continued as new after turn %d", n)
	}, waitFor, 50*time.Millisecond)
	resp, err := http.Get(st.api.URL + "/conversations/long-messages/messages?offset=118")
	require.NoError(t, err)
	defer resp.Body.Close()
	var page contract.MessagesPage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	require.Equal(t, 2*n, page.Total, "every message kept across six continue-as-new")
	require.True(t, strings.HasPrefix(page.Messages[0].Content, fmt.Sprintf("log %d\n", n-1)))
}

// TestAModelAnswerLargerThanAGRPCMessageIsCarried has the model ask, in
// one answer of 4.2 MB, for 150 commands of 28 KB each: past gRPC's 4 MB
// message limit as well as the 2 MB payload limit. Every command runs once
// and the turn finishes.
func TestAModelAnswerLargerThanAGRPCMessageIsCarried(t *testing.T) {
	t.Parallel()
	const n = 150
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if req.Messages[len(req.Messages)-1].Role == openai.ChatMessageRoleTool {
			return scripted.Reply{Content: "All ran."}
		}
		var calls []protocol.ToolCall
		for i := range n {
			args, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("echo %d >> ran.txt # %s", i, strings.Repeat("x", 28<<10))})
			calls = append(calls, protocol.ToolCall{ID: fmt.Sprintf("call_%03d", i), Name: protocol.ToolBash, Arguments: string(args)})
		}
		return scripted.Reply{ToolCalls: calls}
	}
	st := newStack(t, withPayloadStore(), withScript(script), withBypassAllowed())
	_, msgs := st.chat(t, `{"query": "run them", "conversationId": "grpc-limit", "bypassApproval": true}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	finish := events[len(events)-1]
	require.Equal(t, protocol.FinishStop, finish.Reason, finish.Message)
	require.Len(t, ofType(events, protocol.EventToolResult)[0].ToolResults, n)
	lines := strings.Split(strings.TrimSpace(fileText(filepath.Join(st.workspace, "ran.txt"))), "\n")
	require.Len(t, lines, n, "each command ran once")
}
