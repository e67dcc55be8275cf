package workflows_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestAQuorumTurnWithAnEscalationReplaysItsHistory runs a turn whose
// Bash rule needs two votes and escalates to bob, on a real dev server
// with a ledger, votes on it by Update as alice and then bob (who may
// only once the step passed), and replays its history: the votes' ledger
// writes and the step's timer, notice and row come back in the order
// they were recorded.
func TestAQuorumTurnWithAnEscalationReplaysItsHistory(t *testing.T) {
	_, c := onDevServer(t)
	model := oneBashCallModel(t, `{"command":"echo deploy"}`)
	ledger, err := auditdb.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { ledger.Close() })
	tools := &activities.Tools{Workspace: t.TempDir(), BashTimeout: 10 * time.Second}
	settings := workflows.Settings{
		ApprovalTimeout: time.Minute,
		Audit:           true,
		Tools:           tools.Specs(),
		Rules: []workflows.Rule{{Tool: protocol.ToolBash, Require: workflows.RequireAlways, Deciders: []string{"alice", "carol"}, Quorum: 2,
			Escalate: []policy.Escalation{{After: 2 * time.Second, To: []string{"bob"}}}}},
	}
	const queue = "quorum-recorded"
	w := worker.New(c, queue, workflows.WorkerOptions())
	workflows.Register(w, &workflows.Workflows{Settings: settings}, activities.NewModel(model.URL+"/v1", "test", scripted.ModelName, workflows.TokenSignaler{Client: c}), tools)
	workflows.RegisterAuditor(w, &activities.Auditor{Ledger: ledger})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.TurnWorkflowID(queue, 1), TaskQueue: queue},
		contract.ChatTurnWorkflow, workflows.TurnInput{ConversationID: queue, Turn: 1, Messages: []protocol.Message{{Role: protocol.RoleUser, Content: "deploy"}}})
	require.NoError(t, err)
	var events []protocol.Event
	until := func(typ string) protocol.Event {
		t.Helper()
		require.Eventually(t, func() bool {
			events = queryEvents(t, c, run.GetID())
			return len(ofType(events, typ)) > 0
		}, time.Minute, 50*time.Millisecond, "no %s event", typ)
		return ofType(events, typ)[0]
	}
	vote := func(by string) (protocol.ApprovalResult, error) {
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: run.GetID(), UpdateName: contract.ApprovalUpdate, WaitForStage: client.WorkflowUpdateStageCompleted,
			Args: []any{protocol.ApprovalDecision{RequestID: until(protocol.EventApprovalRequest).RequestID, Decision: protocol.DecisionApprove, Principal: by}},
		})
		var res protocol.ApprovalResult
		if err == nil {
			err = h.Get(ctx, &res)
		}
		return res, err
	}

	res, err := vote("alice")
	require.NoError(t, err)
	require.True(t, res.Pending)
	hop := until(protocol.EventApprovalEscalated)
	require.Equal(t, []string{"alice", "carol", "bob"}, hop.Deciders)
	res, err = vote("bob")
	require.NoError(t, err)
	require.False(t, res.Pending)
	var out contract.TurnOutput
	require.NoError(t, run.Get(ctx, &out))
	require.Equal(t, "Done.", out.Text)
	page, err := ledger.List(ctx, auditdb.Filter{Limit: auditdb.MaxLimit})
	require.NoError(t, err)
	require.Len(t, page.Records, 4, "the call's row, two votes and the step")

	history := fetchHistory(ctx, t, c, run.GetID(), run.GetRunID())
	replayer := turnReplayer()
	require.NoError(t, replayRun(replayer, history, run))
}
