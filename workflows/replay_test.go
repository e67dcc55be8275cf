package workflows_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/spantest"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// The replay corpus: one folder per release (testdata/replay/v0.1.0), and
// one per patch level no release carried (level1-a364ee3), each holding
// histories recorded by that build's workflow code
// (<scenario>.<workflow>.json), the events each recorded turn or subagent
// served (<scenario>.<workflow>.events.json), and the commit it was
// recorded at (COMMIT). `make corpus RELEASE=vX.Y.Z` records one.
const (
	corpusDir        = "testdata/replay"
	corpusCommitFile = "COMMIT"
	eventsSuffix     = ".events.json"
)

// TestReplayCorpus replays every recorded history of every release against
// today's workflow code. A change to the commands a workflow issues, made
// without workflow.GetVersion, fails here for each history it would strand;
// so does a change that renumbers the events a recorded turn had served,
// which Temporal alone would not notice.
func TestReplayCorpus(t *testing.T) {
	histories, err := filepath.Glob(filepath.Join(corpusDir, "*", "*.json"))
	require.NoError(t, err)
	types := map[string]int{}
	for _, path := range histories {
		if strings.HasSuffix(path, eventsSuffix) {
			continue
		}
		rel, _ := filepath.Rel(corpusDir, path)
		t.Run(rel, func(t *testing.T) { types[replayCorpusHistory(t, path)]++ })
	}
	for _, typ := range []string{contract.ChatTurnWorkflow, contract.ConversationWorkflow, contract.SubagentWorkflow} {
		require.NotZero(t, types[typ], "the corpus has no %s history", typ)
	}
}

// TestATurnBegunBeforeARetiredPatchFailsNamingIt replays a turn that
// v0.3.0 left paused (testdata/retired: its corpus's turns were deleted
// when their patches were retired, docs/versioning.md). Such a turn no
// longer runs on today's build, which a deployment must have drained
// before it takes this build (CHANGELOG.md); one it missed fails its
// workflow task where it meets the first patch it was begun without,
// naming it, instead of running code it never ran.
func TestATurnBegunBeforeARetiredPatchFailsNamingIt(t *testing.T) {
	history := readHistory(t, filepath.Join("testdata", "retired", "v0.3.0-paused.turn-1.json"))
	start := history.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
	replayer := worker.NewWorkflowReplayer()
	w := &workflows.Workflows{}
	replayer.RegisterWorkflowWithOptions(w.ChatTurn, workflow.RegisterOptions{Name: contract.ChatTurnWorkflow})
	err := replayer.ReplayWorkflowHistoryWithOptions(nil, history, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: start.GetWorkflowId(), RunID: start.GetOriginalExecutionRunId()},
	})
	require.ErrorContains(t, err, `removed support of version -1. for "tokens-by-heartbeat" changeID`,
		"v0.3.0's turn met tokens-by-heartbeat (v0.4.0) at its first model call")
}

// readHistory reads the history recorded (as JSON) at path.
func readHistory(t *testing.T, path string) *historypb.History {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	history, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	require.NoError(t, err, "read history %s", path)
	return history
}

// replayCorpusHistory replays the history at path and checks the events
// it serves against the recorded ones; it returns the workflow type.
func replayCorpusHistory(t *testing.T, path string) string {
	history := readHistory(t, path)
	start := history.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
	typ, id := start.GetWorkflowType().GetName(), start.GetWorkflowId()

	capture := &eventsCapture{}
	replayer, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
		Interceptors: []interceptor.WorkerInterceptor{capture},
	})
	require.NoError(t, err)
	w := &workflows.Workflows{}
	replayer.RegisterWorkflowWithOptions(w.ChatTurn, workflow.RegisterOptions{Name: contract.ChatTurnWorkflow})
	replayer.RegisterWorkflowWithOptions(w.Conversation, workflow.RegisterOptions{Name: contract.ConversationWorkflow})
	replayer.RegisterWorkflowWithOptions(w.Subagent, workflow.RegisterOptions{Name: contract.SubagentWorkflow})
	// Replayed under its own workflow ID, as a worker replays it: the ids
	// of a turn's subagents derive from it.
	execution := workflow.Execution{ID: id, RunID: start.GetOriginalExecutionRunId()}
	require.NoError(t, replayer.ReplayWorkflowHistoryWithOptions(nil, history, worker.ReplayWorkflowHistoryOptions{OriginalExecution: execution}),
		"%s workflow %s, recorded in %s, does not replay on today's code: a change to the commands it issues needs workflow.GetVersion (docs/versioning.md)",
		typ, id, path)

	if typ == contract.ConversationWorkflow {
		return typ // it publishes no events
	}
	recorded, err := os.ReadFile(strings.TrimSuffix(path, ".json") + eventsSuffix)
	require.NoError(t, err, "%s workflow %s, recorded in %s, has no recorded events to compare its SSE ids with", typ, id, path)
	var want []protocol.Event
	require.NoError(t, json.Unmarshal(recorded, &want))
	require.NotNil(t, capture.events, "%s workflow %s set no %s query handler", typ, id, contract.EventsQuery)
	got, err := capture.events(contract.EventsRequest{})
	require.NoError(t, err)
	require.Equal(t, eventIDs(want), eventIDs(got.Events),
		"%s workflow %s, recorded in %s, serves its events under other ids on today's code: a change to the events a turn publishes needs workflow.GetVersion (docs/versioning.md)",
		typ, id, path)
	return typ
}

// eventIDs lists what a client holds of each event by its SSE id: its
// type, and what names a request or carries answer text.
func eventIDs(events []protocol.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("%d %s %s %s %q", e.Seq, e.Type, e.RequestID, e.ToolCallID, e.Data)
	}
	return out
}

// eventsCapture keeps the events query handler of the workflow a replayer
// replays, so a test can ask what the replayed turn would serve.
type eventsCapture struct {
	interceptor.WorkerInterceptorBase
	events func(contract.EventsRequest) (contract.EventsResponse, error)
}

func (c *eventsCapture) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &captureInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, capture: c}
}

type captureInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	capture *eventsCapture
}

func (i *captureInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&captureOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, capture: i.capture})
}

type captureOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	capture *eventsCapture
}

func (o *captureOutbound) SetQueryHandler(ctx workflow.Context, name string, handler any) error {
	if h, ok := handler.(func(contract.EventsRequest) (contract.EventsResponse, error)); ok && name == contract.EventsQuery {
		o.capture.events = h
	}
	return o.Next.SetQueryHandler(ctx, name, handler)
}

// TestReplayWithTracingMakesNoApprovalSpans replays every recorded turn
// and subagent on a replayer that traces, as a worker that traces replays
// a turn it had evicted: the replay must still match (a span is no
// command), and the approvals it answers again must not be traced again.
func TestReplayWithTracingMakesNoApprovalSpans(t *testing.T) {
	histories, err := filepath.Glob(filepath.Join(corpusDir, "*", "*.json"))
	require.NoError(t, err)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	replayed := 0
	for _, path := range histories {
		if strings.HasSuffix(path, eventsSuffix) || strings.Contains(path, ".conversation") {
			continue
		}
		history := readHistory(t, path)
		start := history.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
		replayer, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
			Interceptors: []interceptor.WorkerInterceptor{telemetry.NewTracingInterceptor(tp)},
		})
		require.NoError(t, err)
		w := &workflows.Workflows{}
		replayer.RegisterWorkflowWithOptions(w.ChatTurn, workflow.RegisterOptions{Name: contract.ChatTurnWorkflow})
		replayer.RegisterWorkflowWithOptions(w.Subagent, workflow.RegisterOptions{Name: contract.SubagentWorkflow})
		execution := workflow.Execution{ID: start.GetWorkflowId(), RunID: start.GetOriginalExecutionRunId()}
		require.NoError(t, replayer.ReplayWorkflowHistoryWithOptions(nil, history, worker.ReplayWorkflowHistoryOptions{OriginalExecution: execution}),
			"%s replays with tracing", path)
		replayed++
	}
	require.NotZero(t, replayed)
	spans := spantest.FromStubs(exporter.GetSpans())
	runs := spans.Named("RunWorkflow:" + contract.ChatTurnWorkflow)
	require.NotEmpty(t, runs, "the replayer traced")
	for _, s := range runs {
		require.Equal(t, "true", s.Attributes[telemetry.ReplayedAttribute], "a run that only replayed is marked, for LiveOnly to drop")
	}
	for _, s := range spans {
		require.False(t, strings.HasPrefix(s.Name, workflows.ApprovalSpanPrefix), "a replay traced %s again", s.Name)
	}
}

// TestTodaysHistoriesOfTheApproversSeatReplay records, with today's code,
// turns that take the paths no release's corpus holds yet: the audit
// ledger's local activities, a budget's request, a scoped grant answered in
// a SideEffect. Each history must replay on the same code and serve the
// same events under the same ids, as a worker that evicted the turn
// replays it.
func TestTodaysHistoriesOfTheApproversSeatReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal dev server")
	}
	dir := t.TempDir()
	newRecorder(t, dir).recordApproversSeat()
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	require.NoError(t, err)
	types := map[string]int{}
	for _, path := range paths {
		if strings.HasSuffix(path, eventsSuffix) {
			continue
		}
		types[replayCorpusHistory(t, path)]++
	}
	require.Equal(t, map[string]int{contract.ConversationWorkflow: 1, contract.ChatTurnWorkflow: 2}, types)
	// The histories hold what they are here for: the ledger's local
	// activities behind its patch, and turn 2's scoped grant in a
	// SideEffect.
	markers := func(name string) map[string]int {
		out := map[string]int{}
		history := readHistory(t, filepath.Join(dir, name))
		for _, e := range history.GetEvents() {
			if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
				out["activity "+a.GetActivityType().GetName()]++
			}
			m := e.GetMarkerRecordedEventAttributes()
			if m == nil {
				continue
			}
			out[m.GetMarkerName()]++
			if m.GetMarkerName() == "SideEffect" {
				// A string answer is a request id or, for a scoped grant,
				// the id of the grant that answered; the settings are an
				// object.
				var answer string
				if converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()["data"], &answer) == nil && strings.HasPrefix(answer, "grant-") {
					out["grant answer"]++
				}
				var settings workflows.Settings
				if converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()["data"], &settings) == nil && settings.PatchLevel > 0 {
					out[fmt.Sprintf("patch level %d", settings.PatchLevel)]++
				}
			}
			if m.GetMarkerName() == "Version" {
				// Only a patch added after today's level asks GetVersion.
				var id string
				require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()["change-id"], &id))
				if !slices.Contains(workflows.PatchesAfterLevel(), id) {
					out["version markers"]++
				}
			}
		}
		return out
	}
	turn1, turn2 := markers("seat.turn-1.json"), markers("seat.turn-2.json")
	// Today's turns take every patch of their level without a marker; only
	// a patch added since asks.
	require.Equal(t, 1, turn1[fmt.Sprintf("patch level %d", workflows.PatchLevel)], "the level recorded with the settings")
	require.Zero(t, turn1["version markers"])
	require.GreaterOrEqual(t, turn1["LocalActivity"], 4, "the ledger's three writes and the preview")
	require.Zero(t, turn1["activity "+activities.PreviewActivity], "the preview is a local activity")
	require.Zero(t, turn1["grant answer"])
	require.Equal(t, 1, turn2["grant answer"], "the scoped grant's answer, recorded")

	// Both messages reached an idle conversation: each was answered only
	// once its turn's workflow had started, so a reader of the turn never
	// looks for a workflow that does not exist yet.
	var order []string
	for _, e := range readHistory(t, filepath.Join(dir, "seat.conversation.json")).GetEvents() {
		if a := e.GetChildWorkflowExecutionStartedEventAttributes(); a != nil {
			order = append(order, "started "+a.GetWorkflowExecution().GetWorkflowId())
		}
		if a := e.GetWorkflowExecutionUpdateCompletedEventAttributes(); a != nil {
			var ref contract.TurnRef
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(a.GetOutcome().GetSuccess(), &ref))
			order = append(order, "answered "+ref.TurnID)
		}
	}
	turnIDs := []string{contract.TurnWorkflowID("corpus-seat", 1), contract.TurnWorkflowID("corpus-seat", 2)}
	require.Equal(t, []string{"started " + turnIDs[0], "answered " + turnIDs[0], "started " + turnIDs[1], "answered " + turnIDs[1]}, order)
}
