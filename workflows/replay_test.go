package workflows_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/workflows"
)

// TestRecordedTurnHistoryReplays replays a turn recorded on a real server
// (two approvals by signal, token batches, three tools) against today's
// code. A change that alters the commands a recorded turn makes fails here:
// such a change needs workflow.GetVersion, or a new workflow type.
func TestRecordedTurnHistoryReplays(t *testing.T) {
	replayer := worker.NewWorkflowReplayer()
	replayer.RegisterWorkflowWithOptions((&workflows.Workflows{}).ChatTurn, workflow.RegisterOptions{Name: workflows.ChatTurnWorkflow})
	require.NoError(t, replayer.ReplayWorkflowHistoryFromJSONFile(nil, recordedHistory))
}
