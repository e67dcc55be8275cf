package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestPolicyAnswersAreRecordedSoReplaysNeverEvaluateThemAgain runs a turn
// under a rule whose answer changes from one evaluation to the next
// (args.map(k, k) lists the keys in Go's random map order), then replays
// its history many times. Evaluated on every replay, the rule would ask on
// some replays and not on others, and those replays would fail.
func TestPolicyAnswersAreRecordedSoReplaysNeverEvaluateThemAgain(t *testing.T) {
	_, c := onDevServer(t)
	// Three keys the Bash schema knows, in random order to args.map.
	const args = `{"command":"echo hi","timeout":5000,"description":"say hi"}`
	model := oneBashCallModel(t, args)
	tools := &activities.Tools{Workspace: t.TempDir(), BashTimeout: 10 * time.Second}
	settings := workflows.Settings{
		ApprovalTimeout: time.Minute,
		Tools:           tools.Specs(),
		Rules:           []workflows.Rule{{Tool: protocol.ToolBash, Require: workflows.RequireWhen, When: `args.map(k, k)[0] == "command"`}},
	}
	answers := map[bool]int{}
	for range 200 {
		answers[workflows.RequiresApproval(settings, protocol.ToolBash, args)]++
	}
	require.Len(t, answers, 2, "the rule must answer both ways, or its replays prove nothing: %v", answers)
	w := worker.New(c, "policy-recorded", workflows.WorkerOptions())
	workflows.Register(w, &workflows.Workflows{Settings: settings}, activities.NewModel(model.URL+"/v1", "test", scripted.ModelName, workflows.TokenSignaler{Client: c}), tools)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: contract.TurnWorkflowID("policy-recorded", 1), TaskQueue: "policy-recorded",
	}, contract.ChatTurnWorkflow, workflows.TurnInput{
		ConversationID: "policy-recorded", Turn: 1,
		Messages: []protocol.Message{{Role: protocol.RoleUser, Content: "say hi"}},
	})
	require.NoError(t, err)
	// Whatever the rule said this time: approve if it asked.
	var events []protocol.Event
	require.Eventually(t, func() bool {
		events = queryEvents(t, c, run.GetID())
		return len(ofType(events, protocol.EventApprovalRequest)) == 1 || len(ofType(events, protocol.EventToolResult)) == 1
	}, 30*time.Second, 20*time.Millisecond)
	if reqs := ofType(events, protocol.EventApprovalRequest); len(reqs) == 1 {
		require.NoError(t, c.SignalWorkflow(ctx, run.GetID(), "", contract.ApprovalSignal,
			protocol.ApprovalDecision{RequestID: reqs[0].RequestID, Decision: protocol.DecisionApprove}))
	}
	var out contract.TurnOutput
	require.NoError(t, run.Get(ctx, &out))
	require.Equal(t, protocol.FinishStop, out.FinishReason)
	results := ofType(queryEvents(t, c, run.GetID()), protocol.EventToolResult)
	require.Len(t, results, 1)
	require.Len(t, results[0].ToolResults, 1)
	require.Equal(t, protocol.StatusOK, results[0].ToolResults[0].Status, "the call ran: %s", results[0].ToolResults[0].Result)

	history := fetchHistory(ctx, t, c, run.GetID(), run.GetRunID())
	replayer := turnReplayer()
	for i := range 40 {
		require.NoError(t, replayRun(replayer, history, run), "replay %d of the turn", i+1)
	}
}
