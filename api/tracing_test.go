package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/internal/spantest"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// The spans a message's turn descends from, nearest first: the turn's run,
// started by the conversation under the message Update that the API's
// request sent.
var turnAncestry = []string{
	"RunWorkflow:" + contract.ChatTurnWorkflow,
	"StartChildWorkflow:" + contract.ChatTurnWorkflow,
	"HandleUpdate:" + contract.SendMessageUpdate,
	"UpdateWithStartWorkflow:" + contract.SendMessageUpdate,
	"POST /chat/stream",
}

// decideAs posts a decision with token and requires it taken.
func decideAs(t *testing.T, apiURL, token, body string) {
	t.Helper()
	require.JSONEq(t, `{"accepted":true}`, decision(t, apiURL, token, body))
}

// decision posts body, a decision, to POST /chat/approval with token and
// answers the 200's body.
func decision(t *testing.T, apiURL, token, body string) string {
	t.Helper()
	resp, got := send(t, http.MethodPost, apiURL+"/chat/approval", "Bearer "+token, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, got)
	return got
}

func TestATurnIsOneTraceFromItsRequestThroughTheModelAndTheToolsWithItsApprovals(t *testing.T) {
	t.Parallel()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(telemetry.LiveOnly(exporter)))
	st := newStack(t, withTracing(tp))
	api := st.newAuthedAPI(t)
	spans := func() spantest.Spans { return spantest.FromStubs(exporter.GetSpans()) }
	// A span is exported when it ends: the request's when its stream
	// closes, the turn's when its workflow returns.
	until := func(name string, n int) spantest.Spans {
		t.Helper()
		require.Eventually(t, func() bool { return len(spans().Named(name)) >= n }, waitFor, 10*time.Millisecond,
			"%d %q spans are exported", n, name)
		return spans()
	}

	// Turn 1: Read runs unasked, Bash is approved by bob for the rest of
	// the conversation, Write is declined by alice.
	_, msgs := chatAs(t, api, aliceToken, `{"query": "take a note", "conversationId": "traced"}`)
	seq := 0
	requests := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	bash, write := requests["Bash"], requests["Write"]
	decideAs(t, api.URL, bobToken, `{"requestId":"`+bash.RequestID+`","decision":"approve","remember":"conversation"}`)
	decideAs(t, api.URL, aliceToken, `{"requestId":"`+write.RequestID+`","decision":"decline","reason":"not now"}`)
	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	decisions := ofType(rest, protocol.EventApprovalDecision)
	require.Len(t, decisions, 2)

	until("POST /chat/stream", 1)
	got := until("RunWorkflow:"+contract.ChatTurnWorkflow, 1)
	post := got.Named("POST /chat/stream")[0]
	require.Equal(t, "", post.ParentID, "the request is the root of its trace")
	turn := got.InTrace(post.TraceID)
	run := turn.Named("RunWorkflow:" + contract.ChatTurnWorkflow)
	require.Len(t, run, 1, "the turn is in the request's trace: %v", turn.Names())
	require.Equal(t, turnAncestry[1:], turn.Ancestry(run[0]))
	require.Equal(t, contract.TurnWorkflowID("traced", 1), run[0].Attributes["temporalWorkflowID"])

	// Both model calls, each with its HTTP request to the model server.
	models := turn.Named("RunActivity:" + "Model")
	require.Len(t, models, 2)
	calls := turn.Named("HTTP POST")
	require.Len(t, calls, 2, "one client span per model call")
	for _, c := range calls {
		require.Equal(t, append([]string{"RunActivity:Model", "StartActivity:Model"}, turnAncestry...), turn.Ancestry(c))
		require.Equal(t, st.model.URL+"/v1/chat/completions", c.Attributes["url.full"])
		require.Equal(t, "200", c.Attributes["http.response.status_code"])
	}
	// The tools that ran, and not the one declined.
	for _, tool := range []string{"Read", "Bash"} {
		ran := turn.Named("RunActivity:" + tool)
		require.Len(t, ran, 1, "%s ran once: %v", tool, turn.Names())
		require.Equal(t, append([]string{"StartActivity:" + tool}, turnAncestry...), turn.Ancestry(ran[0]))
	}
	require.Empty(t, turn.Named("RunActivity:Write"), "the declined Write never ran")

	// The approvals, children of the turn's run.
	approval := func(trace spantest.Spans, tool string) spantest.Span {
		t.Helper()
		named := trace.Named(workflows.ApprovalSpanPrefix + tool)
		require.Len(t, named, 1, "one approval span of %s: %v", tool, trace.Names())
		return named[0]
	}
	read := approval(turn, "Read")
	require.Equal(t, turnAncestry, turn.Ancestry(read))
	require.Equal(t, workflows.DecidedByPolicy, read.Attributes[workflows.AttrDecidedBy])

	ws := approval(turn, "Write")
	require.Equal(t, turnAncestry, turn.Ancestry(ws))
	require.Equal(t, protocol.DecisionDecline, ws.Attributes[workflows.AttrDecision])
	require.Equal(t, workflows.DecidedByPerson, ws.Attributes[workflows.AttrDecidedBy])
	require.Equal(t, "alice", ws.Attributes[workflows.AttrPrincipal])
	require.Equal(t, decisions[1].Role, ws.Attributes[workflows.AttrRole])
	require.NotEmpty(t, ws.Attributes[workflows.AttrRole], "the decision carries the role of the token that made it")
	require.Equal(t, write.RequestID, ws.Attributes[workflows.AttrRequestID])
	require.Equal(t, write.ToolCallID, ws.Attributes[workflows.AttrToolCallID])
	require.WithinDuration(t, write.ExpiresAt.Add(-time.Minute), ws.Start, time.Millisecond, "the wait starts at the request")
	require.True(t, ws.End.After(ws.Start))
	// It links to the decision, whose trace is the decision's request.
	require.Len(t, ws.Links, 1)
	decision, ok := got.ByID(ws.Links[0])
	require.True(t, ok)
	require.Equal(t, "HandleUpdate:"+contract.ApprovalUpdate, decision.Name)
	require.Equal(t, []string{"UpdateWorkflow:" + contract.ApprovalUpdate, "POST /chat/approval"}, got.Ancestry(decision))

	bs := approval(turn, "Bash")
	require.Equal(t, protocol.DecisionApprove, bs.Attributes[workflows.AttrDecision])
	require.Equal(t, "bob", bs.Attributes[workflows.AttrPrincipal])
	require.Equal(t, "true", bs.Attributes[workflows.AttrRemember])
	grantID := bs.Attributes[workflows.AttrGrantID]
	require.NotEmpty(t, grantID)

	// Turn 2 of the same conversation is a trace of its own, from its own
	// request: Bash is answered by bob's grant, Write asks again.
	_, msgs = chatAs(t, api, aliceToken, `{"query": "another note", "conversationId": "traced"}`)
	seq = 0
	write2 := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))["Write"]
	decideAs(t, api.URL, aliceToken, `{"requestId":"`+write2.RequestID+`","decision":"decline"}`)
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

	until("POST /chat/stream", 2)
	got = until("RunWorkflow:"+contract.ChatTurnWorkflow, 2)
	post2 := got.Named("POST /chat/stream")[1]
	require.NotEqual(t, post.TraceID, post2.TraceID)
	turn2 := got.InTrace(post2.TraceID)
	run2 := turn2.Named("RunWorkflow:" + contract.ChatTurnWorkflow)
	require.Len(t, run2, 1, "turn 2 is in its own request's trace, not the first one's: %v", turn2.Names())
	require.Equal(t, contract.TurnWorkflowID("traced", 2), run2[0].Attributes["temporalWorkflowID"])
	require.Equal(t, turnAncestry[1:], turn2.Ancestry(run2[0]))
	granted := approval(turn2, "Bash")
	require.Equal(t, workflows.DecidedByGrant, granted.Attributes[workflows.AttrDecidedBy])
	require.Equal(t, grantID, granted.Attributes[workflows.AttrGrantID])
	require.Equal(t, "bob", granted.Attributes[workflows.AttrPrincipal])
	require.Len(t, turn2.Named("RunActivity:Bash"), 1)
}

// TestTheBinariesExportOneTraceOverOTLPWhenTheEndpointIsSet runs a turn
// through the worker and API binaries, configured only by the standard
// OTEL_EXPORTER_OTLP_ENDPOINT, to an OTLP/HTTP receiver of the test's. The
// batches are held for a minute (OTEL_BSP_SCHEDULE_DELAY), so the spans
// arrive only because each process flushes them when it is stopped.
func TestTheBinariesExportOneTraceOverOTLPWhenTheEndpointIsSet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts a Temporal dev server")
	}
	workerBin := proctest.Build(t, "github.com/tollgate/tollgate/worker")
	apiBin := proctest.Build(t, "github.com/tollgate/tollgate/api")
	srv := devserver.ForTest(t)
	dir := t.TempDir()
	// The model server notes the trace context each request carries.
	replies := scripted.New(scripted.Demo())
	var mu sync.Mutex
	var traceparents []string
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceparents = append(traceparents, r.Header.Get("traceparent"))
		mu.Unlock()
		replies.ServeHTTP(w, r)
	}))
	t.Cleanup(model.Close)
	receiver := spantest.NewReceiver(t)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "ws"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ws", "README.md"), []byte("# traced\n"), 0o644))

	env := func(httpAddr string) []string {
		return append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_", "HTTP_ADDR", "OTEL_"),
			"TEMPORAL_ADDRESS="+srv.HostPort, "TEMPORAL_NAMESPACE="+srv.Namespace,
			"HTTP_ADDR="+httpAddr, "TOLLGATE_TASK_QUEUE=otlp", "TOLLGATE_METRICS_ADDR="+config.MetricsOff,
			"TOLLGATE_WORKSPACE="+filepath.Join(dir, "ws"), "TOLLGATE_PAYLOAD_DIR="+filepath.Join(dir, "payloads"),
			"OPENAI_BASE_URL="+model.URL+"/v1", "OPENAI_API_KEY=test", "OPENAI_MODEL="+scripted.ModelName,
			telemetry.EnvEndpoint+"="+receiver.URL, "OTEL_BSP_SCHEDULE_DELAY=60000")
	}
	worker := proctest.Start(t, "worker", workerBin(), env(proctest.FreeAddr(t)))
	apiAddr := proctest.FreeAddr(t)
	api := proctest.Start(t, "api", apiBin(), env(apiAddr))
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + apiAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, waitFor, 50*time.Millisecond, "the API is up")

	// The caller is traced too: its trace context is continued.
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest(http.MethodPost, "http://"+apiAddr+"/chat/stream", strings.NewReader(`{"query": "traced over OTLP", "conversationId": "otlp"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	stream, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { stream.Body.Close() })
	require.Equal(t, http.StatusOK, stream.StatusCode)
	msgs := readSSE(stream.Body)
	seq := 0
	requests := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	bash := requests["Bash"]
	for tool, decision := range map[string]string{"Bash": protocol.DecisionApprove, "Write": protocol.DecisionDecline} {
		resp, got := send(t, http.MethodPost, "http://"+apiAddr+"/chat/approval", "", `{"requestId":"`+requests[tool].RequestID+`","decision":"`+decision+`"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, got)
		require.JSONEq(t, `{"accepted":true}`, got)
	}
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, protocol.FinishStop, events[len(events)-1].Reason)
	require.Zero(t, receiver.Requests(), "the batches wait for the schedule delay or a flush")

	api.Stop(t)
	worker.Stop(t)

	spans := receiver.Spans()
	posts := spans.Named("POST /chat/stream")
	require.Len(t, posts, 1, "spans: %v", spans.Names())
	require.Equal(t, telemetry.APIService, posts[0].Service)
	require.Equal(t, callerTrace, posts[0].TraceID, "the caller's trace goes on")
	require.Equal(t, callerSpan, posts[0].ParentID)
	trace := spans.InTrace(posts[0].TraceID)
	run := trace.Named("RunWorkflow:" + contract.ChatTurnWorkflow)
	require.Len(t, run, 1, "the worker's spans are in the API's request's trace: %v", trace.Names())
	require.Equal(t, telemetry.WorkerService, run[0].Service)
	// The caller's span is not among them: "?" ends each ancestry.
	ancestry := append(slices.Clone(turnAncestry), "?")
	require.Equal(t, ancestry[1:], trace.Ancestry(run[0]))
	// Each model request is in the trace, under its activity. The run
	// that scheduled the first may have left the worker's cache before the
	// turn ended (seen in CI after a query the API gave up on failed to
	// answer): the run that replays it ends and exports its RunWorkflow
	// span, the evicted run's never ends, so its StartActivity has no
	// exported parent. The last call is always the exported run's.
	calls := trace.Named("HTTP POST")
	require.Len(t, calls, 2)
	slices.SortFunc(calls, func(a, b spantest.Span) int { return a.Start.Compare(b.Start) })
	var sent []string
	full := append([]string{"RunActivity:Model", "StartActivity:Model"}, ancestry...)
	evicted := false
	for i, c := range calls {
		got := trace.Ancestry(c)
		if i == 0 && !slices.Equal(full, got) {
			require.Equal(t, []string{"RunActivity:Model", "StartActivity:Model", "?"}, got)
			t.Logf("the first model call's run left the worker's cache before the turn ended: %v", got)
			evicted = true
		} else {
			require.Equal(t, full, got)
		}
		sent = append(sent, "00-"+c.TraceID+"-"+c.SpanID+"-01")
	}
	mu.Lock()
	require.ElementsMatch(t, sent, traceparents, "each model request carried its client span as traceparent")
	mu.Unlock()
	approved := trace.Named(workflows.ApprovalSpanPrefix + "Bash")
	require.Len(t, approved, 1)
	require.Equal(t, workflows.DecidedByPerson, approved[0].Attributes[workflows.AttrDecidedBy])
	require.Equal(t, bash.RequestID, approved[0].Attributes[workflows.AttrRequestID])
	// The approval span ends in the run that took the decision: the
	// evicted one too, when it left the cache after the decision (seen in
	// CI), and then its parent is that run's unexported RunWorkflow span.
	if got := trace.Ancestry(approved[0]); evicted && !slices.Equal(ancestry, got) {
		require.Equal(t, []string{"?"}, got)
		t.Logf("the decision's run left the worker's cache before the turn ended: %v", got)
	} else {
		require.Equal(t, ancestry, got)
	}
}
