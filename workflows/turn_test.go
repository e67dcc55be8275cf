package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

var testTools = []string{protocol.ToolRead, protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash}

func testSettings() Settings {
	s := Settings{
		RequiredTools:   []string{protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash},
		ApprovalTimeout: 3 * time.Minute,
		MaxSteps:        25,
	}
	for _, name := range testTools {
		s.Tools = append(s.Tools, protocol.ToolSpec{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)})
	}
	return s
}

// harness runs workflows in the test environment with a scripted model and
// recording tools in place of the real activities.
type harness struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment
	// metrics receives what the workflows emit.
	metrics *metrics.Registry

	mu       sync.Mutex
	replies  []activities.ModelOutput
	modelErr error
	// modelErrs, when set, answer the model calls in order (nil for a
	// reply), before modelErr.
	modelErrs []error
	// modelInputs are the inputs of the model calls the replies answered.
	modelInputs []activities.ModelInput
	// chat, when set, answers the model calls instead of the replies (a
	// real model activity, say), and modelInputs keeps none: the model
	// server chat calls sees them (a long conversation's would take
	// hundreds of megabytes).
	chat      func(context.Context, activities.ModelInput) (activities.ModelOutput, error)
	toolCalls []protocol.ToolCall
	// admin is what the worker read of the control workflow: a test
	// freezes the gate with it.
	admin *contract.ControlWatcher
}

func newHarness(t *testing.T, settings Settings, replies ...activities.ModelOutput) *harness {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	reg, err := metrics.New(MetricHelp)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	suite.SetMetricsHandler(reg.Handler())
	h := &harness{t: t, env: suite.NewTestWorkflowEnvironment(), metrics: reg, replies: replies, admin: contract.NewControlWatcher()}
	w := &Workflows{Settings: settings, Admin: h.admin}
	h.env.RegisterWorkflowWithOptions(w.ChatTurn, workflow.RegisterOptions{Name: contract.ChatTurnWorkflow})
	h.env.RegisterWorkflowWithOptions(w.Conversation, workflow.RegisterOptions{Name: contract.ConversationWorkflow})
	h.env.RegisterWorkflowWithOptions(w.Subagent, workflow.RegisterOptions{Name: contract.SubagentWorkflow})
	h.env.RegisterActivityWithOptions(h.model, activity.RegisterOptions{Name: activities.ModelActivity})
	h.env.RegisterActivityWithOptions(func(_ context.Context, in activities.ToolInput) (string, error) {
		return "preview of " + in.Call.Name + " " + in.Call.Arguments, nil
	}, activity.RegisterOptions{Name: activities.PreviewActivity})
	h.env.RegisterActivityWithOptions(func(_ context.Context, ins []activities.ToolInput) ([]string, error) {
		out := make([]string, len(ins))
		for i, in := range ins {
			out[i] = "preview of " + in.Call.Name + " " + in.Call.Arguments
		}
		return out, nil
	}, activity.RegisterOptions{Name: activities.PreviewsActivity})
	for _, name := range testTools {
		h.env.RegisterActivityWithOptions(h.tool(name), activity.RegisterOptions{Name: name})
	}
	return h
}

// model answers each call with the next scripted reply; past the script it
// answers with plain text.
func (h *harness) model(ctx context.Context, in activities.ModelInput) (activities.ModelOutput, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if chat := h.chat; chat != nil {
		h.mu.Unlock()
		defer h.mu.Lock()
		return chat(ctx, in)
	}
	h.modelInputs = append(h.modelInputs, in)
	if len(h.modelErrs) > 0 {
		err := h.modelErrs[0]
		h.modelErrs = h.modelErrs[1:]
		if err != nil {
			return activities.ModelOutput{}, err
		}
	}
	if h.modelErr != nil {
		return activities.ModelOutput{}, h.modelErr
	}
	n := len(h.modelInputs)
	if n > len(h.replies) {
		return activities.ModelOutput{Content: fmt.Sprintf("done after %d calls", n-1)}, nil
	}
	return h.replies[n-1], nil
}

// tool returns a tool activity that records its call and echoes it.
func (h *harness) tool(name string) func(context.Context, activities.ToolInput) (activities.ToolOutput, error) {
	return func(_ context.Context, in activities.ToolInput) (activities.ToolOutput, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.toolCalls = append(h.toolCalls, in.Call)
		return activities.ToolOutput{Status: protocol.StatusOK, Result: name + " ran with " + in.Call.Arguments}, nil
	}
}

func (h *harness) ranTools() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for _, c := range h.toolCalls {
		names = append(names, c.Name)
	}
	return names
}

// runTurn runs a ChatTurn to its end and returns its output.
func (h *harness) runTurn(in TurnInput) contract.TurnOutput {
	h.t.Helper()
	h.env.ExecuteWorkflow(contract.ChatTurnWorkflow, in)
	require.True(h.t, h.env.IsWorkflowCompleted())
	require.NoError(h.t, h.env.GetWorkflowError())
	var out contract.TurnOutput
	require.NoError(h.t, h.env.GetWorkflowResult(&out))
	return out
}

// events returns the events of the running workflow.
func (h *harness) events() []protocol.Event {
	h.t.Helper()
	v, err := h.env.QueryWorkflow(contract.EventsQuery, contract.EventsRequest{})
	require.NoError(h.t, err)
	var resp contract.EventsResponse
	require.NoError(h.t, v.Get(&resp))
	return resp.Events
}

// requestID returns the approval request id published for the named tool.
func (h *harness) requestID(tool string) string {
	h.t.Helper()
	for _, e := range h.events() {
		if e.Type == protocol.EventApprovalRequest && e.ToolName == tool {
			return e.RequestID
		}
	}
	h.t.Fatalf("no approval request for %s", tool)
	return ""
}

// updateOutcome records how the approval Update ended.
type updateOutcome struct {
	rejected error
	result   protocol.ApprovalResult
	done     bool
}

// callback fills o in as the workflow handles the Update: a rejection, or
// an error of the handler, is in rejected.
func (o *updateOutcome) callback() *testsuite.TestUpdateCallback {
	return &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { o.rejected, o.done = err, true },
		OnComplete: func(v any, err error) {
			o.done = true
			if r, ok := v.(protocol.ApprovalResult); ok {
				o.result = r
			}
			if err != nil {
				o.rejected = err
			}
		},
	}
}

// decide sends d as the approval Update; the outcome fills in as the
// workflow handles it.
func (h *harness) decide(d protocol.ApprovalDecision) *updateOutcome {
	o := &updateOutcome{}
	h.env.UpdateWorkflow(contract.ApprovalUpdate, "", o.callback(), d)
	return o
}

func userTurn(query string) TurnInput {
	return TurnInput{ConversationID: "c1", Turn: 1, Messages: []protocol.Message{{Role: protocol.RoleUser, Content: query}}}
}

func calls(cs ...protocol.ToolCall) activities.ModelOutput {
	return activities.ModelOutput{ToolCalls: cs}
}

func call(id, name, args string) protocol.ToolCall {
	return protocol.ToolCall{ID: id, Name: name, Arguments: args}
}

func eventTypes(events []protocol.Event) []string {
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	return types
}

func toolMessages(msgs []protocol.Message) []protocol.Message {
	var out []protocol.Message
	for _, m := range msgs {
		if m.Role == protocol.RoleTool {
			out = append(out, m)
		}
	}
	return out
}

func TestBatchWithoutProtectedCallsRunsExactlyAsWithoutGate(t *testing.T) {
	batch := calls(call("a", "Read", `{"file_path":"a.txt"}`), call("b", "Read", `{"file_path":"b.txt"}`))

	gated := newHarness(t, testSettings(), batch)
	withGate := gated.runTurn(userTurn("read two files"))

	ungatedSettings := testSettings()
	ungatedSettings.RequiredTools = nil
	ungated := newHarness(t, ungatedSettings, batch)
	withoutGate := ungated.runTurn(userTurn("read two files"))

	require.Equal(t, withoutGate, withGate)
	require.Equal(t, ungated.modelInputs, gated.modelInputs)
	require.Equal(t, []string{"Read", "Read"}, gated.ranTools())
	require.NotContains(t, eventTypes(withGate.Events), protocol.EventApprovalRequest)
	require.Equal(t, []string{protocol.EventTurnStart, protocol.EventToolCall, protocol.EventToolResult, protocol.EventToken, protocol.EventFinish}, eventTypes(withGate.Events))
}

func TestDeclinedCallGetsSynthesizedResponseInOriginalOrder(t *testing.T) {
	h := newHarness(t, testSettings(), calls(
		call("r", "Read", `{"file_path":"in.txt"}`),
		call("w", "Write", `{"file_path":"out.txt","content":"x"}`),
		call("b", "Bash", `{"command":"ls"}`),
	))
	var bash, write *updateOutcome
	// Decided in reverse order: Bash first, then Write.
	h.env.RegisterDelayedCallback(func() {
		bash = h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove})
	}, time.Second)
	h.env.RegisterDelayedCallback(func() {
		write = h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionDecline, Reason: "not that file"})
	}, 2*time.Second)

	out := h.runTurn(userTurn("do three things"))

	require.True(t, bash.result.Accepted)
	require.True(t, write.result.Accepted)
	require.Equal(t, []string{"Read", "Bash"}, h.ranTools())

	require.Len(t, h.modelInputs, 2)
	tools := toolMessages(h.modelInputs[1].Messages)
	require.Len(t, tools, 3)
	require.Equal(t, []string{"r", "w", "b"}, []string{tools[0].ToolCallID, tools[1].ToolCallID, tools[2].ToolCallID})
	require.Equal(t, "Read ran with {\"file_path\":\"in.txt\"}", tools[0].Content)
	require.Equal(t, "Not executed: a person declined this call. Do not call it again unless the user asks you to. Their reason: not that file", tools[1].Content)
	require.Equal(t, "Bash ran with {\"command\":\"ls\"}", tools[2].Content)

	require.Equal(t, []string{
		protocol.EventTurnStart, protocol.EventToolCall, protocol.EventApprovalRequest, protocol.EventApprovalRequest, protocol.EventHeartbeat,
		protocol.EventApprovalDecision, protocol.EventApprovalDecision, protocol.EventToolResult, protocol.EventToken, protocol.EventFinish,
	}, eventTypes(out.Events))
	for i, e := range out.Events {
		require.Equal(t, i+1, e.Seq)
	}
	results := out.Events[7].ToolResults
	require.Equal(t, []string{protocol.StatusOK, protocol.StatusDeclined, protocol.StatusOK},
		[]string{results[0].Status, results[1].Status, results[2].Status})
	require.Equal(t, protocol.FinishStop, out.FinishReason)
}

func TestUndecidedCallTimesOutAsDecline(t *testing.T) {
	settings := testSettings()
	settings.ApprovalTimeout = 72 * time.Hour
	h := newHarness(t, settings, calls(call("w", "Write", `{"file_path":"x","content":"y"}`)))
	out := h.runTurn(userTurn("write"))

	require.Empty(t, h.ranTools())
	tools := toolMessages(out.Messages)
	require.Len(t, tools, 1)
	require.Equal(t, "Not executed: nobody decided on this call in time, so it did not run. Do not call it again unless the user asks you to.", tools[0].Content)
	decision := findEvent(t, out.Events, protocol.EventApprovalDecision)
	require.Equal(t, protocol.DecisionTimeout, decision.Decision)
	require.Equal(t, protocol.StatusTimeout, findEvent(t, out.Events, protocol.EventToolResult).ToolResults[0].Status)
}

func TestCancelledTurnDeclinesPendingApprovals(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("r", "Read", `{}`), call("b", "Bash", `{"command":"rm -rf /"}`)))
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute)

	out := h.runTurn(userTurn("clean up"))

	require.Equal(t, protocol.FinishCancelled, out.FinishReason)
	require.Empty(t, h.ranTools(), "nothing runs once the turn is cancelled")
	require.Len(t, h.modelInputs, 1, "the model is not called again")
	tools := toolMessages(out.Messages)
	require.Len(t, tools, 2, "every call still gets a response")
	require.Equal(t, "Not executed: the turn was cancelled before this call ran. Do not call it again unless the user asks you to.", tools[1].Content)
	require.Equal(t, protocol.DecisionDecline, findEvent(t, out.Events, protocol.EventApprovalDecision).Decision)
	require.Equal(t, protocol.EventFinish, out.Events[len(out.Events)-1].Type)
}

func TestInterruptDeclinesPendingApprovalsAndFinishesTurn(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("b", "Bash", `{"command":"make"}`)))
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(contract.InterruptSignal, Interrupt{Reason: reasonNewMessage})
	}, time.Minute)

	out := h.runTurn(userTurn("build"))

	require.Equal(t, protocol.FinishCancelled, out.FinishReason)
	require.Empty(t, h.ranTools())
	require.Equal(t, "Not executed: the user sent a new message before this call was decided; answer that instead. Do not call it again unless the user asks you to.", toolMessages(out.Messages)[0].Content)
}

func TestApproveWithEditedArgumentsRunsToolWithEditedArguments(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("b", "Bash", `{"command":"rm -rf build"}`)))
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove, Arguments: `{"command":"rm -rf build/tmp"}`})
	}, time.Second)

	out := h.runTurn(userTurn("clean"))

	require.Len(t, h.toolCalls, 1)
	require.JSONEq(t, `{"command":"rm -rf build/tmp"}`, h.toolCalls[0].Arguments)
	require.Contains(t, toolMessages(out.Messages)[0].Content, "edited the arguments")
	// The model's own record of its call is unchanged.
	require.Equal(t, `{"command":"rm -rf build"}`, out.Messages[0].ToolCalls[0].Arguments)
}

func TestApprovalValidatorRejectsUnknownDuplicateAndLateDecisions(t *testing.T) {
	settings := testSettings()
	settings.ApprovalTimeout = time.Hour
	h := newHarness(t, settings,
		calls(call("w", "Write", `{"file_path":"a","content":"b"}`)),
		calls(call("e", "Edit", `{"file_path":"a","old_string":"b","new_string":"c"}`)),
		calls(call("w2", "Write", `{"file_path":"b","content":"c"}`)),
	)
	var first, duplicate, unknown, forged, late, badDecision, badArgs *updateOutcome
	var writeID string
	h.env.RegisterDelayedCallback(func() {
		writeID = h.requestID("Write")
		unknown = h.decide(protocol.ApprovalDecision{RequestID: "tollgate-conv-x-turn-1/apr-0000", Decision: protocol.DecisionApprove})
		forged = h.decide(protocol.ApprovalDecision{RequestID: writeID + "0", Decision: protocol.DecisionApprove})
		badDecision = h.decide(protocol.ApprovalDecision{RequestID: writeID, Decision: "yes"})
		badArgs = h.decide(protocol.ApprovalDecision{RequestID: writeID, Decision: protocol.DecisionApprove, Arguments: `[1]`})
		first = h.decide(protocol.ApprovalDecision{RequestID: writeID, Decision: protocol.DecisionApprove})
	}, time.Second)
	h.env.RegisterDelayedCallback(func() {
		duplicate = h.decide(protocol.ApprovalDecision{RequestID: writeID, Decision: protocol.DecisionDecline})
	}, 2*time.Second)
	// The Edit of the second step times out after an hour, while the turn
	// waits for the third step's Write: a decision on the Edit then is late.
	h.env.RegisterDelayedCallback(func() {
		late = h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Edit"), Decision: protocol.DecisionApprove})
	}, 90*time.Minute)

	h.runTurn(userTurn("write then edit"))

	require.True(t, first.result.Accepted)
	for name, o := range map[string]*updateOutcome{
		"unknown": unknown, "forged": forged, "duplicate": duplicate, "late": late,
		"bad decision": badDecision, "bad arguments": badArgs,
	} {
		require.NotNil(t, o, name)
		require.Error(t, o.rejected, name)
		require.False(t, o.result.Accepted, name)
	}
	require.ErrorContains(t, unknown.rejected, "unknown request")
	require.ErrorContains(t, forged.rejected, "unknown request")
	require.ErrorContains(t, duplicate.rejected, "already decided")
	require.ErrorContains(t, late.rejected, "expired", "a request whose time ran out is expired, not decided")
	require.Equal(t, protocol.RejectExpired, contract.RejectionReason(late.rejected))
	require.Equal(t, protocol.RejectDecided, contract.RejectionReason(duplicate.rejected))
	require.ErrorContains(t, badDecision.rejected, `decision "yes"`)
	require.ErrorContains(t, badArgs.rejected, "not a JSON object")
	require.Equal(t, []string{"Write"}, h.ranTools())
}

func TestApprovalBySignalRunsToolAndIgnoresInvalidSignals(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("w", "Write", `{"file_path":"a","content":"b"}`)))
	h.env.RegisterDelayedCallback(func() {
		id := h.requestID("Write")
		h.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: id + "x", Decision: protocol.DecisionDecline})
		h.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove})
		h.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionDecline})
	}, time.Second)

	out := h.runTurn(userTurn("write"))

	require.Equal(t, []string{"Write"}, h.ranTools())
	decisions := 0
	for _, e := range out.Events {
		if e.Type == protocol.EventApprovalDecision {
			decisions++
			require.Equal(t, protocol.DecisionApprove, e.Decision)
		}
	}
	require.Equal(t, 1, decisions, "the first valid decision wins")
}

func TestBypassApprovalRunsProtectedCallsWithoutAsking(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("w", "Write", `{"file_path":"a","content":"b"}`)))
	in := userTurn("write")
	in.BypassApproval = true

	out := h.runTurn(in)

	require.Equal(t, []string{"Write"}, h.ranTools())
	require.NotContains(t, eventTypes(out.Events), protocol.EventApprovalRequest)
}

func TestMalformedArgumentsAndUnknownToolsAnswerTheModelWithoutAsking(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("w", "Write", `{"file_path": "a`), call("x", "Delete", `{}`)))

	out := h.runTurn(userTurn("go"))

	require.Empty(t, h.ranTools())
	require.NotContains(t, eventTypes(out.Events), protocol.EventApprovalRequest)
	tools := toolMessages(out.Messages)
	require.Contains(t, tools[0].Content, "Write was not run: arguments are not valid JSON")
	require.Contains(t, tools[1].Content, `no tool named "Delete"`)
	require.Len(t, h.modelInputs, 2, "the model reads the errors and answers")
}

func TestTurnStopsAtMaxSteps(t *testing.T) {
	settings := testSettings()
	settings.MaxSteps = 3
	loop := calls(call("r", "Read", `{"file_path":"a"}`))
	h := newHarness(t, settings, loop, loop, loop, loop)

	out := h.runTurn(userTurn("loop"))

	require.Equal(t, protocol.FinishMaxSteps, out.FinishReason)
	require.Len(t, h.modelInputs, 3)
}

func TestRejectedModelRequestEndsTurnWithErrorEvent(t *testing.T) {
	h := newHarness(t, testSettings())
	h.modelErr = temporal.NewNonRetryableApplicationError("model server answered 400: bad model", "ModelRequestRejected", nil)

	out := h.runTurn(userTurn("hi"))

	require.Equal(t, protocol.FinishError, out.FinishReason)
	require.Len(t, h.modelInputs, 1, "a non-retryable error is not retried")
	e := findEvent(t, out.Events, protocol.EventError)
	require.Contains(t, e.Message, "bad model")
	require.Equal(t, []string{protocol.EventTurnStart, protocol.EventError, protocol.EventFinish}, eventTypes(out.Events))
}

func TestRetryableModelErrorIsRetried(t *testing.T) {
	h := newHarness(t, testSettings())
	h.modelErr = errors.New("model server answered 503")
	h.env.RegisterDelayedCallback(func() {
		h.mu.Lock()
		h.modelErr = nil
		h.mu.Unlock()
	}, 5*time.Second)

	out := h.runTurn(userTurn("hi"))

	require.Equal(t, protocol.FinishStop, out.FinishReason)
	require.Greater(t, len(h.modelInputs), 1)
}

func TestTokensStreamedDuringModelCallArePublishedOnce(t *testing.T) {
	tr := &turn{step: 2, modelRunning: true}
	tr.onTokens(activities.TokenBatch{Step: 2, Attempt: 1, Offset: 0, Text: "Hel"})
	tr.onTokens(activities.TokenBatch{Step: 1, Attempt: 1, Offset: 3, Text: "zzz"}) // an earlier call
	tr.onTokens(activities.TokenBatch{Step: 2, Attempt: 1, Offset: 0, Text: "Hello"})
	tr.onTokens(activities.TokenBatch{Step: 2, Attempt: 1, Offset: 9, Text: "gap"})
	tr.onTokens(activities.TokenBatch{Step: 2, Attempt: 1, Offset: 5, Text: ", world"})
	require.Equal(t, []string{"Hel", "lo", ", world"}, tokenData(tr.log.events))

	tr.modelRunning = false
	tr.onTokens(activities.TokenBatch{Step: 2, Attempt: 1, Offset: 12, Text: "!"})
	require.Len(t, tr.log.events, 3, "no tokens once the call has returned")
}

func TestTokensOfARetriedModelCallSpellTheAnswerKept(t *testing.T) {
	batch := func(attempt int32, offset int, text string) activities.TokenBatch {
		return activities.TokenBatch{Step: 1, Attempt: attempt, Offset: offset, Text: text}
	}
	tests := []struct {
		name    string
		batches []activities.TokenBatch
		final   string
		// events are the token events, a reset one written "↺data".
		events []string
	}{
		{
			name:    "a retry that says the same goes on where the first attempt stopped",
			batches: []activities.TokenBatch{batch(1, 0, "I will "), batch(2, 0, "I "), batch(2, 2, "will count")},
			final:   "I will count.",
			events:  []string{"I will ", "count", "."},
		},
		{
			name:    "a retry worded otherwise starts the answer again",
			batches: []activities.TokenBatch{batch(1, 0, "I will count"), batch(2, 0, "I "), batch(2, 2, "shall count")},
			final:   "I shall count them.",
			events:  []string{"I will count", "↺I shall count", " them."},
		},
		{
			name:    "an answer shorter than what streamed is corrected at the end",
			batches: []activities.TokenBatch{batch(1, 0, "I will count the lines")},
			final:   "I will",
			events:  []string{"I will count the lines", "↺I will"},
		},
		{
			name:    "an answer with no text voids what streamed",
			batches: []activities.TokenBatch{batch(1, 0, "I will")},
			final:   "",
			events:  []string{"I will", "↺"},
		},
		{
			name:    "batches of an attempt given up are dropped",
			batches: []activities.TokenBatch{batch(1, 0, "I "), batch(2, 0, "We "), batch(1, 2, "will")},
			final:   "We count.",
			events:  []string{"I ", "↺We ", "count."},
		},
		{
			name:    "a batch repeated or out of order changes nothing",
			batches: []activities.TokenBatch{batch(1, 0, "Hel"), batch(1, 3, "lo"), batch(1, 0, "Hel"), batch(1, 3, "lo")},
			final:   "Hello",
			events:  []string{"Hel", "lo"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s answerStream
			var events []protocol.Event
			for _, b := range tt.batches {
				if e, ok := s.take(b); ok {
					events = append(events, e)
				}
			}
			if e, ok := s.finish(tt.final); ok {
				events = append(events, e)
			}
			var got []string
			for _, e := range events {
				require.Equal(t, protocol.EventToken, e.Type)
				if e.Reset {
					e.Data = "↺" + e.Data
				}
				got = append(got, e.Data)
			}
			require.Equal(t, tt.events, got)
			require.Equal(t, tt.final, spell(events), "the events spell the answer")
		})
	}
}

// spell applies token events in order, as a client shows them.
func spell(events []protocol.Event) string {
	var text string
	for _, e := range events {
		if e.Reset {
			text = ""
		}
		text += e.Data
	}
	return text
}

func tokenData(events []protocol.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Data)
	}
	return out
}

func TestEventsQueryReturnsEventsAfterCursor(t *testing.T) {
	var l eventLog
	for _, typ := range []string{protocol.EventTurnStart, protocol.EventToken, protocol.EventFinish} {
		l.append(protocol.Event{Type: typ})
	}
	require.Equal(t, []int{2, 3}, seqs(l.after(1).Events))
	require.True(t, l.after(1).Finished)
	require.Empty(t, l.after(3).Events)
	require.Equal(t, []int{1, 2, 3}, seqs(l.after(-5).Events))
}

func seqs(events []protocol.Event) []int {
	var out []int
	for _, e := range events {
		out = append(out, e.Seq)
	}
	return out
}

func findEvent(t *testing.T, events []protocol.Event, typ string) protocol.Event {
	t.Helper()
	for _, e := range events {
		if e.Type == typ {
			return e
		}
	}
	t.Fatalf("no %s event in %v", typ, eventTypes(events))
	return protocol.Event{}
}

func TestRequestIDNamesItsWorkflow(t *testing.T) {
	id := contract.NewRequestID(contract.TurnWorkflowID("c", 3), "abc")
	wid, ok := contract.RequestWorkflowID(id)
	require.True(t, ok)
	require.Equal(t, "tollgate-conv-c-turn-3", wid)
	for _, bad := range []string{"", "abc", "/apr-abc", "other-wf/apr-abc", "tollgate-x/apr-", strings.Repeat("x", 10)} {
		_, ok := contract.RequestWorkflowID(bad)
		require.False(t, ok, bad)
	}
}

func TestASubagentsWorkflowIDNamesItsTurn(t *testing.T) {
	turn := contract.TurnWorkflowID("c-sub-1", 3) // a conversation id may look like anything
	nested := contract.SubagentWorkflowID(contract.SubagentWorkflowID(turn, 2), 1)
	require.Equal(t, turn+"-sub-2-sub-1", nested)
	require.Equal(t, turn, contract.TurnOfWorkflowID(nested))
	require.Equal(t, turn, contract.TurnOfWorkflowID(turn))
}
