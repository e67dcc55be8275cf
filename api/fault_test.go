package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// Fault injection on a real dev server: workers killed mid-call, Temporal
// restarted under a waiting turn, a model server that fails in every way we
// know, and tools that panic or overrun. Each turn must finish, with its
// whole event log, and no approved tool may run twice.

const (
	// faultWait bounds a wait through a fault: a heartbeat timeout, a retry
	// and, after a worker is lost, the sticky queue's timeout (5 s) before
	// another worker gets the turn's next workflow task.
	faultWait = 30 * time.Second
	// fastHeartbeat is the heartbeat timeout of the tool and model
	// activities in these tests: how soon a lost worker or a silent model
	// server is noticed (30 s and 60 s by default).
	fastHeartbeat = 2 * time.Second
)

func TestWorkerKilledDuringModelCallRetriesTheCallOnAnotherWorker(t *testing.T) {
	t.Parallel()
	// The first answer is held after its first words, while the worker
	// that asked is killed; the attempt that another worker makes then
	// gets the whole answer at once.
	const intro = "I will count the lines now."
	hold := make(chan struct{})
	var release sync.Once
	var firstAnswers atomic.Int32
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Counted."}
		}
		r := scripted.Reply{Content: intro, ToolCalls: []protocol.ToolCall{
			{ID: "call_count", Name: protocol.ToolBash, Arguments: `{"command":"echo ran >> count.txt"}`},
		}}
		if firstAnswers.Add(1) == 1 {
			r.Hold, r.HoldAfter = hold, 3 // the role, "I " and "will "
		}
		return r
	}
	st := newStack(t, withScript(script), withoutWorker())
	t.Cleanup(func() { release.Do(func() { close(hold) }) })
	settings := st.workerSettings(func(s *workflows.Settings) { s.ModelHeartbeatTimeout = fastHeartbeat })

	first := st.startTestWorker(t, "worker-1", settings)
	turn := st.startTurn(t, `{"query": "count", "conversationId": "fault-model-kill"}`)
	turn.until(protocol.EventToken, faultWait) // the answer has begun and is held
	require.Len(t, st.replies.Requests(), 1)
	killed := first.Crash(t)
	st.startTestWorker(t, "worker-2", settings)

	request := turn.until(protocol.EventApprovalRequest, faultWait)
	postDecision(t, st.api, request.RequestID, protocol.DecisionApprove, "", true)
	finish := turn.until(protocol.EventFinish, faultWait)
	require.Equal(t, protocol.FinishStop, finish.Reason)
	require.Equal(t, "Counted.", finish.Text)
	turn.requireWholeLog(st)
	require.Zero(t, turn.resumes, "the stream did not drop")

	times := st.replies.RequestTimes()
	require.Len(t, times, 3, "the held call, its retry, the answer to the tool's result")
	require.GreaterOrEqual(t, times[1].Sub(times[0]), fastHeartbeat, "retried once the heartbeat timed out")
	require.True(t, times[1].After(killed))
	step1 := turn.events[:indexOf(turn.events, protocol.EventToolCall)]
	require.Equal(t, intro, tokenText(step1), "the retry's text follows the held one's without a repeat")
	require.Zero(t, resets(step1), "the retry said what the held call had begun to say")
	count, err := os.ReadFile(filepath.Join(st.workspace, "count.txt"))
	require.NoError(t, err)
	require.Equal(t, "ran\n", string(count), "the approved call ran once")
	t.Logf("killed → retried model call %s; killed → finish %s", times[1].Sub(killed).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
}

func TestWorkerKilledDuringToolCallAnswersTheModelThatItDidNotComplete(t *testing.T) {
	t.Parallel()
	// The approved command writes "start", waits (in a child process, as
	// most real commands do their work) for a file that never comes, then
	// would write "end".
	const command = `echo $$ > bash.pid; echo start >> tool.log; ` +
		`sh -c 'while [ ! -e go ]; do sleep 0.05; done'; echo end >> tool.log`
	args, err := json.Marshal(map[string]string{"command": command})
	require.NoError(t, err)
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "It did not complete; I will not retry."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: "call_block", Name: protocol.ToolBash, Arguments: string(args)}}}
	}
	st := newStack(t, withScript(script), withoutWorker())
	settings := st.workerSettings(func(s *workflows.Settings) { s.ToolHeartbeatTimeout = fastHeartbeat })
	toolLog := filepath.Join(st.workspace, "tool.log")

	first := st.startTestWorker(t, "worker-1", settings)
	turn := st.startTurn(t, `{"query": "block", "conversationId": "fault-tool-kill"}`)
	request := turn.until(protocol.EventApprovalRequest, faultWait)
	postDecision(t, st.api, request.RequestID, protocol.DecisionApprove, "", true)
	require.Eventually(t, func() bool { return fileText(toolLog) == "start\n" }, waitFor, 10*time.Millisecond, "the command started")
	bashPID := readPID(t, filepath.Join(st.workspace, "bash.pid"))
	// Whatever happens to it, the command's process group ends with the
	// test. (readPID never gives 1 or less: kill(-1) would reach every
	// process the test may signal.)
	t.Cleanup(func() { _ = syscall.Kill(-bashPID, syscall.SIGKILL) })
	killed := first.Crash(t)
	st.startTestWorker(t, "worker-2", settings)

	results := turn.until(protocol.EventToolResult, faultWait).ToolResults
	require.Equal(t, []string{"call_block Bash error"}, resultStatuses(results))
	require.Contains(t, results[0].Result, "Bash did not complete and may have run partly")
	require.Contains(t, results[0].Result, "timed out (Heartbeat)")
	finish := turn.until(protocol.EventFinish, faultWait)
	require.Equal(t, protocol.FinishStop, finish.Reason)
	turn.requireWholeLog(st)
	require.Zero(t, turn.resumes, "the stream did not drop")

	reqs := st.replies.Requests()
	require.Len(t, reqs, 2)
	toolMsg := reqs[1].Messages[len(reqs[1].Messages)-1]
	require.Equal(t, openai.ChatMessageRoleTool, toolMsg.Role)
	require.Equal(t, "call_block", toolMsg.ToolCallID)
	require.Equal(t, results[0].Result, toolMsg.Content, "the model reads that the call did not complete")
	require.Equal(t, "start\n", fileText(toolLog), "the approved call started once and was never run again")
	t.Logf("killed → tool result %s", time.Since(killed).Round(time.Millisecond))

	// The command runs in a process group of its own (so that its time
	// limit kills all of it), which the worker's death does not reach by
	// itself: the command's guard kills the group once the worker is gone.
	require.Eventually(t, func() bool { return len(runningInGroup(bashPID)) == 0 }, waitFor, 10*time.Millisecond,
		"processes of the killed worker's Bash call (process group %d) kept running: %v", bashPID, runningInGroup(bashPID))
}

func TestApprovalWorksAfterTemporalRestartsWhileTheTurnWaits(t *testing.T) {
	t.Parallel()
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Counted."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{
			{ID: "call_count", Name: protocol.ToolBash, Arguments: `{"command":"echo ran >> count.txt"}`},
		}}
	}
	st := newStack(t, withScript(script))
	turn := st.startTurn(t, `{"query": "count", "conversationId": "fault-restart"}`)
	request := turn.until(protocol.EventApprovalRequest, faultWait)

	restarted := time.Now()
	require.NoError(t, st.temporal.Restart())
	t.Logf("Temporal restarted in %s", time.Since(restarted).Round(time.Millisecond))
	decided := time.Now()
	postDecision(t, st.api, request.RequestID, protocol.DecisionApprove, "", true)
	t.Logf("the first decision after the restart took %s", time.Since(decided).Round(time.Millisecond))

	finish := turn.until(protocol.EventFinish, faultWait)
	require.Equal(t, protocol.FinishStop, finish.Reason)
	turn.requireWholeLog(st)
	t.Logf("the stream was resumed %d times", turn.resumes)
	results := ofType(turn.events, protocol.EventToolResult)[0].ToolResults
	require.Equal(t, []string{"call_count Bash ok"}, resultStatuses(results))
	require.Equal(t, "ran\n", fileText(filepath.Join(st.workspace, "count.txt")), "the approved call ran once")
}

func TestModelServerFaultsAreRetriedOrEndTheTurnWithAnError(t *testing.T) {
	t.Parallel()
	never := make(chan struct{}) // holds a hung answer until the test ends
	var stopHanging sync.Once
	badArguments := `{"file_path":"bad.txt","content":"cut off`
	replies := map[string][]scripted.Reply{
		"500": {{Status: http.StatusInternalServerError, Content: "upstream exploded"}, {Content: "Fine after a 500."}},
		// Two seconds, so that a retry after the first interval of the
		// retry policy (one second) could not pass for one that waited.
		"429":       {{Status: http.StatusTooManyRequests, Content: "slow down", Header: map[string]string{"Retry-After": "2"}}, {Content: "Fine after a 429."}},
		"hung":      {{Hold: never}, {Content: "Fine after a hang."}},
		"malformed": {{Content: "Never seen.", Corrupt: "{this is not JSON"}, {Content: "Fine after a bad chunk."}},
		"arguments": {{ToolCalls: []protocol.ToolCall{{ID: "call_bad", Name: protocol.ToolWrite, Arguments: badArguments}}}, {Content: "I will fix my arguments."}},
		"400":       {{Status: http.StatusBadRequest, Content: "unknown parameter: frobnicate"}},
		// An answer that hangs after its first words, and a retry that
		// words it otherwise, as a real model's second try does.
		"reworded": {{Content: "I will count the lines.", Hold: never, HoldAfter: 3}, {Content: "Let me count them instead."}},
	}
	st := newStack(t, withScript(byQuery(replies)), withSettings(func(s *workflows.Settings) {
		s.ModelHeartbeatTimeout = fastHeartbeat
	}))
	t.Cleanup(func() { stopHanging.Do(func() { close(never) }) })

	// run starts a turn with query and follows it to its finish.
	run := func(t *testing.T, query string) (*turnStream, protocol.Event) {
		turn := st.startTurn(t, `{"query": "`+query+`", "conversationId": "fault-model-`+query+`"}`)
		finish := turn.until(protocol.EventFinish, faultWait)
		turn.requireWholeLog(st)
		require.Zero(t, turn.resumes, "the stream did not drop")
		return turn, finish
	}
	recovers := func(t *testing.T, query string) (protocol.Event, []time.Time) {
		turn, finish := run(t, query)
		require.Equal(t, protocol.FinishStop, finish.Reason)
		require.Equal(t, replies[query][1].Content, finish.Text)
		require.Equal(t, finish.Text, tokenText(turn.events), "only the good answer's text streamed")
		require.Empty(t, ofType(turn.events, protocol.EventError))
		times := st.requestTimes(query)
		require.Len(t, times, 2, "one failed attempt, one retry")
		return finish, times
	}

	t.Run("ServerError500IsRetried", func(t *testing.T) {
		t.Parallel()
		recovers(t, "500")
	})
	t.Run("RateLimit429IsRetriedAfterRetryAfter", func(t *testing.T) {
		t.Parallel()
		_, times := recovers(t, "429")
		require.GreaterOrEqual(t, times[1].Sub(times[0]), 2*time.Second)
		t.Logf("retried after %s", times[1].Sub(times[0]).Round(time.Millisecond))
	})
	t.Run("HungConnectionIsGivenUpAtTheHeartbeatTimeoutAndRetried", func(t *testing.T) {
		t.Parallel()
		_, times := recovers(t, "hung")
		require.GreaterOrEqual(t, times[1].Sub(times[0]), fastHeartbeat)
		t.Logf("retried after %s", times[1].Sub(times[0]).Round(time.Millisecond))
	})
	t.Run("MalformedChunkIsRetried", func(t *testing.T) {
		t.Parallel()
		recovers(t, "malformed")
	})
	t.Run("ToolArgumentsThatAreNotJSONAnswerTheModelWithAnError", func(t *testing.T) {
		t.Parallel()
		turn, finish := run(t, "arguments")
		require.Equal(t, protocol.FinishStop, finish.Reason)
		require.Empty(t, ofType(turn.events, protocol.EventApprovalRequest), "nothing to approve")
		results := ofType(turn.events, protocol.EventToolResult)[0].ToolResults
		require.Equal(t, []string{"call_bad Write error"}, resultStatuses(results))
		require.Contains(t, results[0].Result, "arguments are not valid JSON")
		reqs := st.requestsOf("arguments")
		require.Len(t, reqs, 2)
		toolMsg := reqs[1].Messages[len(reqs[1].Messages)-1]
		require.Equal(t, "call_bad", toolMsg.ToolCallID)
		require.Equal(t, results[0].Result, toolMsg.Content, "the model reads the error")
		require.NoFileExists(t, filepath.Join(st.workspace, "bad.txt"))
	})
	t.Run("RetryOfAPartlyStreamedAnswerStreamsOnlyTheAnswerKept", func(t *testing.T) {
		t.Parallel()
		turn, finish := run(t, "reworded")
		require.Equal(t, protocol.FinishStop, finish.Reason)
		require.Equal(t, "Let me count them instead.", finish.Text)
		require.Len(t, st.requestTimes("reworded"), 2)
		require.Equal(t, finish.Text, tokenText(turn.events), "the token events spell the answer kept")
		require.Equal(t, 1, resets(turn.events), "the retry's text starts the answer again")
		streamed := tokenText(turn.events[:slices.IndexFunc(turn.events, func(e protocol.Event) bool { return e.Reset })])
		require.NotEmpty(t, streamed)
		require.True(t, strings.HasPrefix("I will count the lines.", streamed), "the held attempt's first words streamed before the reset: %q", streamed)
	})
	t.Run("BadRequest400EndsTheTurnWithAnErrorEvent", func(t *testing.T) {
		t.Parallel()
		turn, finish := run(t, "400")
		require.Equal(t, protocol.FinishError, finish.Reason)
		errs := ofType(turn.events, protocol.EventError)
		require.Len(t, errs, 1)
		require.Contains(t, errs[0].Message, "400")
		require.Contains(t, errs[0].Message, "unknown parameter: frobnicate")
		require.Equal(t, errs[0].Message, finish.Message)
		require.Len(t, st.requestTimes("400"), 1, "not retried")
	})
}

func TestFailingToolsBecomeErrorResultsTheModelReads(t *testing.T) {
	t.Parallel()
	noArgs := json.RawMessage(`{"type":"object","properties":{}}`)
	replies := map[string][]scripted.Reply{
		"panic": {{ToolCalls: []protocol.ToolCall{{ID: "call_panic", Name: "Explode", Arguments: `{}`}}}, {Content: "It exploded."}},
		"bash-timeout": {{ToolCalls: []protocol.ToolCall{{ID: "call_slow", Name: protocol.ToolBash,
			Arguments: `{"command":"echo begun; sleep 30; echo never","timeout":3000}`}}}, {Content: "It was too slow."}},
		"stall": {{ToolCalls: []protocol.ToolCall{{ID: "call_stall", Name: "Stall", Arguments: `{}`}}}, {Content: "It stalled."}},
	}
	st := newStack(t, withScript(byQuery(replies)),
		withActivity("Explode", func(context.Context, activities.ToolInput) (activities.ToolOutput, error) {
			panic("the tool exploded")
		}),
		withActivity("Stall", func(ctx context.Context, _ activities.ToolInput) (activities.ToolOutput, error) {
			<-ctx.Done() // past the tool's time limit
			return activities.ToolOutput{}, ctx.Err()
		}),
		withSettings(func(s *workflows.Settings) {
			s.Tools = append(s.Tools,
				protocol.ToolSpec{Name: "Explode", Description: "Panics.", Parameters: noArgs},
				protocol.ToolSpec{Name: "Stall", Description: "Never answers.", Parameters: noArgs})
			// Past the Bash call's 3 s with room for killing it and
			// answering on a loaded machine under the race detector, and
			// short for Stall. The Bash limit is 3 s, not less, because a
			// loaded CI machine took more than 300 ms to start the guard
			// and the shell before the command's first echo.
			s.ToolTimeout = 10 * time.Second
		}),
		withBypassAllowed())

	// fails runs a turn whose one tool call fails and requires the model to
	// read the error and the turn to finish.
	fails := func(t *testing.T, query string) string {
		turn := st.startTurn(t, `{"query": "`+query+`", "conversationId": "fault-tool-`+query+`", "bypassApproval": true}`)
		finish := turn.until(protocol.EventFinish, faultWait)
		turn.requireWholeLog(st)
		require.Equal(t, protocol.FinishStop, finish.Reason)
		require.Equal(t, replies[query][1].Content, finish.Text)
		results := ofType(turn.events, protocol.EventToolResult)[0].ToolResults
		require.Len(t, results, 1)
		require.Equal(t, protocol.StatusError, results[0].Status)
		reqs := st.requestsOf(query)
		require.Len(t, reqs, 2)
		require.Equal(t, results[0].Result, reqs[1].Messages[len(reqs[1].Messages)-1].Content, "the model reads the error")
		return results[0].Result
	}

	t.Run("PanickingToolIsAnError", func(t *testing.T) {
		t.Parallel()
		result := fails(t, "panic")
		require.Contains(t, result, "Explode did not complete")
		require.Contains(t, result, "the tool exploded")
	})
	t.Run("BashPastItsTimeLimitIsKilledAndAnError", func(t *testing.T) {
		t.Parallel()
		result := fails(t, "bash-timeout")
		require.Contains(t, result, "timed out after 3s")
		require.Contains(t, result, "begun")
		require.NotContains(t, result, "never")
	})
	t.Run("ToolPastItsActivityTimeoutIsAnError", func(t *testing.T) {
		t.Parallel()
		result := fails(t, "stall")
		require.Contains(t, result, "Stall did not complete")
		require.Contains(t, result, "timed out")
	})
}

// turnStream follows one turn's events through the API. It checks that ids
// go up by one and resumes with Last-Event-ID when the stream drops.
type turnStream struct {
	t      *testing.T
	api    *httptest.Server
	turnID string
	msgs   <-chan sseMessage
	// events are the turn's events so far, from the first.
	events []protocol.Event
	// resumes counts the streams opened after the first dropped.
	resumes int
}

// startTurn posts body to POST /chat/stream and follows the turn it starts.
func (st *stack) startTurn(t *testing.T, body string) *turnStream {
	t.Helper()
	resp, msgs := st.chat(t, body)
	turnID := resp.Header.Get(protocol.HeaderTurnID)
	require.NotEmpty(t, turnID)
	return &turnStream{t: t, api: st.api, turnID: turnID, msgs: msgs}
}

// until reads events until one of type typ, which it returns, within d.
func (s *turnStream) until(typ string, d time.Duration) protocol.Event {
	s.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				require.NotEqual(s.t, protocol.EventFinish, lastType(s.events), "the stream ended after finish")
				s.resumes++
				_, s.msgs, _ = openStream(s.t, eventsURL(s.api, s.turnID), http.Header{"Last-Event-ID": {strconv.Itoa(len(s.events))}})
				continue
			}
			if !m.HasID {
				requireNotice(s.t, m)
				continue
			}
			e := decodeEvent(s.t, m)
			require.Equal(s.t, strconv.Itoa(len(s.events)+1), m.ID, "ids go up by one: %s", m.Data)
			require.Equal(s.t, len(s.events)+1, e.Seq)
			s.events = append(s.events, e)
			if e.Type == typ {
				return e
			}
		case <-deadline.C:
			s.t.Fatalf("turn %s: no %s event within %s; events so far: %v", s.turnID, typ, d, shape(s.events))
		}
	}
}

// requireWholeLog requires the turn's finished log to be whole: the stream
// ends right after finish; every tool_call is answered by one tool_result
// with the same calls before anything else happens; a finish with reason
// error follows an error event and repeats it; and a fresh stream from the
// start gives exactly the events this one gave.
func (s *turnStream) requireWholeLog(st *stack) {
	t := s.t
	t.Helper()
	require.Equal(t, protocol.EventFinish, lastType(s.events))
	select {
	case m, ok := <-s.msgs:
		require.False(t, ok, "nothing after finish: %s", m.Data)
	case <-time.After(waitFor):
		t.Fatal("the stream did not end after finish")
	}
	requireSeqs(t, 1, s.events)
	require.Equal(t, protocol.EventTurnStart, s.events[0].Type)

	var open []protocol.ToolCall // calls of the batch not yet answered
	for _, e := range s.events {
		switch e.Type {
		case protocol.EventToolCall:
			require.Nil(t, open, "a tool_call before the previous batch's tool_result")
			open = e.ToolCalls
			require.NotEmpty(t, open)
		case protocol.EventToolResult:
			require.NotNil(t, open, "a tool_result without a tool_call")
			require.Len(t, e.ToolResults, len(open))
			for i, r := range e.ToolResults {
				require.Equal(t, open[i].ID, r.ID, "results in the calls' order")
				require.Equal(t, open[i].Name, r.Name)
				require.NotEmpty(t, r.Status)
			}
			open = nil
		case protocol.EventFinish:
			require.Nil(t, open, "finish while a batch had no tool_result")
		}
	}
	if finish := lastOf(s.events); finish.Reason == protocol.FinishError {
		errs := ofType(s.events, protocol.EventError)
		require.NotEmpty(t, errs, "an error event comes before finish with reason error")
		require.Equal(t, lastOf(errs).Message, finish.Message)
	}

	_, whole, _ := openStream(t, eventsURL(st.api, s.turnID)+"?after=0", nil)
	require.Equal(t, s.events, streamToEnd(t, whole), "the log read again is the log streamed")
}

func lastType(events []protocol.Event) string {
	if len(events) == 0 {
		return ""
	}
	return events[len(events)-1].Type
}

func indexOf(events []protocol.Event, typ string) int {
	for i, e := range events {
		if e.Type == typ {
			return i
		}
	}
	return len(events)
}

// byQuery scripts a model that answers the n-th request of a turn (counted
// from 0) with replies[query][n], where query is the turn's first user
// message; the last reply repeats.
func byQuery(replies map[string][]scripted.Reply) scripted.Script {
	var mu sync.Mutex
	asked := map[string]int{}
	return func(req openai.ChatCompletionRequest) scripted.Reply {
		q := firstUserMessage(req)
		mu.Lock()
		n := asked[q]
		asked[q]++
		mu.Unlock()
		rs := replies[q]
		if len(rs) == 0 {
			return scripted.Reply{Status: http.StatusBadRequest, Content: "no script for " + strconv.Quote(q)}
		}
		return rs[min(n, len(rs)-1)]
	}
}

func firstUserMessage(req openai.ChatCompletionRequest) string {
	for _, m := range req.Messages {
		if m.Role == openai.ChatMessageRoleUser {
			return m.Content
		}
	}
	return ""
}

// requestsOf returns the model requests of the turn whose query is query.
func (st *stack) requestsOf(query string) []openai.ChatCompletionRequest {
	var out []openai.ChatCompletionRequest
	for _, r := range st.replies.Requests() {
		if firstUserMessage(r) == query {
			out = append(out, r)
		}
	}
	return out
}

// requestTimes returns when the model requests of the turn whose query is
// query arrived.
func (st *stack) requestTimes(query string) []time.Time {
	reqs, times := st.replies.Requests(), st.replies.RequestTimes()
	var out []time.Time
	for i, r := range reqs[:min(len(reqs), len(times))] {
		if firstUserMessage(r) == query {
			out = append(out, times[i])
		}
	}
	return out
}

// fileText is the file's content, or "" when it cannot be read.
func fileText(name string) string {
	b, _ := os.ReadFile(name)
	return string(b)
}

// readPID waits for a process id in the file, and requires it to be one
// that is safe to signal as a process group (not 0 or 1, or negative).
func readPID(t *testing.T, name string) int {
	t.Helper()
	var text string
	require.Eventually(t, func() bool {
		text = fileText(name)
		return strings.HasSuffix(text, "\n")
	}, waitFor, 10*time.Millisecond, "a pid in %s", name)
	pid, err := strconv.Atoi(strings.TrimSpace(text))
	require.NoError(t, err)
	require.Greater(t, pid, 1, "a pid in %s", name)
	return pid
}

// runningInGroup lists the processes of process group pgid that run: those
// that exist and are not zombies waiting to be reaped.
func runningInGroup(pgid int) []int {
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid pgrp ...": comm may hold spaces and
		// parentheses, so the fields are counted from its end.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 2 && fields[0] != "Z" && fields[0] != "X" && fields[2] == strconv.Itoa(pgid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
