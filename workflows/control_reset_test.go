package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestAResetControlWorkflowTakesANewEpochSoWatchersTakeItsState resets
// the control workflow, on a real dev server, to before a freeze of a
// run that continued as new: the reset run holds fewer changes than the
// watchers read last, and they must take its state all the same (it
// used to keep the epoch, and they dropped it as older: the gate read
// as frozen, or as thawed, against what the workflow said).
func TestAResetControlWorkflowTakesANewEpochSoWatchersTakeItsState(t *testing.T) {
	srv, c := onDevServer(t)
	const queue = "control-reset"
	w := worker.New(c, queue, workflows.WorkerOptions())
	w.RegisterWorkflowWithOptions((&workflows.Workflows{}).Control, workflow.RegisterOptions{Name: contract.ControlWorkflow})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.ControlWorkflowID, TaskQueue: queue},
		contract.ControlWorkflow, contract.ControlInput{ChangesPerRun: 2})
	require.NoError(t, err)
	change := func(name string, in any) contract.ControlState {
		t.Helper()
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: contract.ControlWorkflowID, UpdateName: name, Args: []any{in},
			WaitForStage: client.WorkflowUpdateStageCompleted})
		require.NoError(t, err)
		var st contract.ControlState
		require.NoError(t, h.Get(ctx, &st))
		return st
	}
	change(contract.FreezeUpdate, contract.FreezeInput{By: "root"})
	change(contract.ThawUpdate, contract.ThawInput{By: "root"})
	// Two changes: the run continues as new, carrying its epoch.
	var second string
	require.Eventually(t, func() bool {
		d, err := c.DescribeWorkflow(ctx, contract.ControlWorkflowID, "")
		if err != nil {
			return false
		}
		second = d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		return second != first.GetRunID()
	}, 30*time.Second, 20*time.Millisecond)
	frozen := change(contract.FreezeUpdate, contract.FreezeInput{By: "root", FreezeRequest: protocol.FreezeRequest{Reason: "incident"}})
	require.Equal(t, 3, frozen.Changes)
	watcher := contract.NewControlWatcher()
	watcher.Set(frozen)

	// Reset the second run to its first workflow task: before the freeze.
	var taskDone int64
	iter := c.GetWorkflowHistory(ctx, contract.ControlWorkflowID, second, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() && taskDone == 0 {
		e, err := iter.Next()
		require.NoError(t, err)
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			taskDone = e.GetEventId()
		}
	}
	_, err = c.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace: srv.Namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: contract.ControlWorkflowID, RunId: second},
		Reason: "an operator undoes the freeze", WorkflowTaskFinishEventId: taskDone,
		ResetReapplyExcludeTypes: []enumspb.ResetReapplyExcludeType{enumspb.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL, enumspb.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE},
	})
	require.NoError(t, err)

	var after contract.ControlState
	require.Eventually(t, func() bool {
		after, err = contract.ReadControl(ctx, c)
		return err == nil && after.Changes == 2
	}, 30*time.Second, 20*time.Millisecond)
	require.False(t, after.Freeze.Frozen, "the reset run is before the freeze")
	require.NotEqual(t, frozen.Epoch, after.Epoch, "a reset run is an epoch of its own")
	watcher.Set(after)
	require.False(t, watcher.Frozen(), "the watcher takes the reset run's state")
}
