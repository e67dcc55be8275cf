package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/spantest"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// traced makes h's worker trace into an in-memory exporter, and returns
// what it exported so far.
func (h *harness) traced() func() spantest.Spans {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	h.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{telemetry.NewTracingInterceptor(tp)}})
	return func() spantest.Spans { return spantest.FromStubs(exporter.GetSpans()) }
}

// approvalSpan is the one approval span of tool among spans.
func approvalSpan(t *testing.T, spans spantest.Spans, tool string) spantest.Span {
	t.Helper()
	named := spans.Named(ApprovalSpanPrefix + tool)
	require.Len(t, named, 1, "one approval span of %s among %v", tool, spans.Names())
	return named[0]
}

func TestAnApprovalSpanLastsFromRequestToDecisionAndNamesWhatDecided(t *testing.T) {
	h := newHarness(t, testSettings(), calls(
		call("r", "Read", `{"file_path":"README.md"}`),
		call("w", "Write", `{"file_path":"a.txt","content":"b"}`),
		call("b", "Bash", `{"command":"make deploy"}`),
	))
	spans := h.traced()
	var write string
	h.env.RegisterDelayedCallback(func() {
		write = h.requestID("Write")
		h.decide(protocol.ApprovalDecision{RequestID: write, Decision: protocol.DecisionApprove, Arguments: `{"file_path":"a.txt","content":"c"}`,
			Remember: protocol.RememberConversation, Principal: "alice", Role: "approve"})
	}, time.Minute)

	out := h.runTurn(userTurn("write and deploy"))
	require.Equal(t, []string{protocol.DecisionApprove, protocol.DecisionTimeout}, decisionsOf(out.Events))

	got := spans()
	run := got.Named("RunWorkflow:" + contract.ChatTurnWorkflow)
	require.Len(t, run, 1)
	requested := findEvent(t, out.Events, protocol.EventApprovalRequest).ExpiresAt.Add(-testSettings().ApprovalTimeout)

	w := approvalSpan(t, got, "Write")
	require.Equal(t, run[0].SpanID, w.ParentID, "an approval span is a child of the turn's run")
	require.Equal(t, requested, w.Start, "it starts when the request was published, in workflow time")
	require.Equal(t, time.Minute, w.End.Sub(w.Start), "and ends when the decision came")
	require.Equal(t, map[string]string{
		AttrToolName: "Write", AttrToolCallID: "w", AttrConversationID: "c1", AttrRequestID: write,
		AttrDecision: protocol.DecisionApprove, AttrDecidedBy: DecidedByPerson, AttrPrincipal: "alice", AttrRole: "approve",
		AttrRemember: "true", AttrGrantID: out.Grants[0].ID, AttrEdited: "true",
	}, w.Attributes)
	update := got.Named("HandleUpdate:" + contract.ApprovalUpdate)
	require.Len(t, update, 1)
	require.Equal(t, []string{update[0].SpanID}, w.Links, "it links to the span of the Update that decided")

	b := approvalSpan(t, got, "Bash")
	require.Equal(t, testSettings().ApprovalTimeout, b.End.Sub(b.Start), "the timeout ends it when the timer fires")
	require.Equal(t, protocol.DecisionTimeout, b.Attributes[AttrDecision])
	require.Equal(t, DecidedByTimer, b.Attributes[AttrDecidedBy])
	require.NotContains(t, b.Attributes, AttrPrincipal, "nobody decided")
	require.Empty(t, b.Links)

	r := approvalSpan(t, got, "Read")
	require.Equal(t, DecidedByPolicy, r.Attributes[AttrDecidedBy], "the policy requires no approval of a Read")
	require.Equal(t, protocol.DecisionApprove, r.Attributes[AttrDecision])
	require.Equal(t, r.Start, r.End, "nothing waited")
	require.Equal(t, run[0].SpanID, r.ParentID)
}

func TestCallsAnsweredByAGrantOrTheTurnItselfAreTracedSo(t *testing.T) {
	grant := contract.Grant{ID: "grant-1", Tool: "Bash", Decision: protocol.DecisionApprove, By: "bob"}
	h := newHarness(t, testSettings(), calls(
		call("b", "Bash", `{"command":"ls"}`),
		call("w", "Write", `{"file_path":"a.txt","content":"b"}`),
	))
	spans := h.traced()
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(contract.InterruptSignal, Interrupt{})
	}, time.Minute)
	in := userTurn("ls and write")
	in.Grants = []contract.Grant{grant}

	h.runTurn(in)

	got := spans()
	b := approvalSpan(t, got, "Bash")
	require.Equal(t, DecidedByGrant, b.Attributes[AttrDecidedBy])
	require.Equal(t, "grant-1", b.Attributes[AttrGrantID])
	require.Equal(t, "bob", b.Attributes[AttrPrincipal], "the grant decides as the person who made it")
	w := approvalSpan(t, got, "Write")
	require.Equal(t, DecidedByTurn, w.Attributes[AttrDecidedBy], "a new message declined it")
	require.Equal(t, protocol.DecisionDecline, w.Attributes[AttrDecision])
	require.Equal(t, time.Minute, w.End.Sub(w.Start))
}

func TestEachMessageOfAConversationTracesItsTurnUnderItsOwnUpdate(t *testing.T) {
	h := newHarness(t, testSettings(),
		activities.ModelOutput{Content: "first answer"},
		activities.ModelOutput{Content: "second answer"},
	)
	spans := h.traced()
	var r1, r2 contract.TurnRef
	h.env.RegisterDelayedCallback(func() { h.send("one", &r1) }, time.Second)
	h.env.RegisterDelayedCallback(func() { h.send("two", &r2) }, time.Minute)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Hour)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "c2"})
	require.Equal(t, 2, r2.Turn)

	got := spans()
	updates := got.Named("HandleUpdate:" + contract.SendMessageUpdate)
	require.Len(t, updates, 2)
	starts := got.Named("StartChildWorkflow:" + contract.ChatTurnWorkflow)
	require.Len(t, starts, 2, "spans: %v", got.Names())
	for i := range starts {
		require.Equal(t, updates[i].SpanID, starts[i].ParentID,
			"turn %d starts under the Update of its own message, not under the conversation's run", i+1)
	}
}
