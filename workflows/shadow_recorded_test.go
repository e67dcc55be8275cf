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
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestShadowVerdictsAreRecordedSoReplaysNeverEvaluateThemAgain runs turns
// whose shadow rule answers at random (args.map(k, k) lists the keys in
// Go's random map order) and replays each history many times. Whether
// the call has a ledger row, and so whether the turn writes one, follows
// the shadow verdict: evaluated again on a replay, it would write on some
// replays and not on others, and those replays would fail.
func TestShadowVerdictsAreRecordedSoReplaysNeverEvaluateThemAgain(t *testing.T) {
	_, c := onDevServer(t)
	const args = `{"command":"echo hi","timeout":5000,"description":"say hi"}`
	model := oneBashCallModel(t, args)
	ledger, err := auditdb.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { ledger.Close() })
	tools := &activities.Tools{Workspace: t.TempDir(), BashTimeout: 10 * time.Second}
	settings := workflows.Settings{
		ApprovalTimeout: time.Minute,
		Audit:           true,
		Tools:           tools.Specs(),
		Rules: []workflows.Rule{
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
			{Tool: protocol.ToolBash, Require: workflows.RequireWhen, When: `args.map(k, k)[0] == "command"`, Shadow: true},
		},
	}
	w := worker.New(c, "shadow-recorded", workflows.WorkerOptions())
	workflows.Register(w, &workflows.Workflows{Settings: settings}, activities.NewModel(model.URL+"/v1", "test", scripted.ModelName, workflows.TokenSignaler{Client: c}), tools)
	workflows.RegisterAuditor(w, &activities.Auditor{Ledger: ledger})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	replayer := turnReplayer()
	rows := map[bool]int{}
	for turn := 1; len(rows) < 2; turn++ {
		require.LessOrEqual(t, turn, 30, "the shadow rule must answer both ways, or the replays prove nothing: %v", rows)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: contract.TurnWorkflowID("shadow-recorded", turn), TaskQueue: "shadow-recorded",
		}, contract.ChatTurnWorkflow, workflows.TurnInput{
			ConversationID: "shadow-recorded", Turn: turn,
			Messages: []protocol.Message{{Role: protocol.RoleUser, Content: "say hi"}},
		})
		require.NoError(t, err)
		var out contract.TurnOutput
		require.NoError(t, run.Get(ctx, &out))
		require.Empty(t, ofType(queryEvents(t, c, run.GetID()), protocol.EventApprovalRequest), "a shadow rule never asks")
		page, err := ledger.List(ctx, auditdb.Filter{Shadow: auditdb.ShadowDisagree})
		require.NoError(t, err)
		had := len(page.Records) > rows[true]
		rows[had]++

		history := fetchHistory(ctx, t, c, run.GetID(), run.GetRunID())
		for i := range 20 {
			require.NoError(t, replayRun(replayer, history, run), "replay %d of turn %d", i+1, turn)
		}
	}
}
