package workflows_test

import (
	"context"
	"net/http/httptest"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// What the tests that record a turn on a real dev server and replay it
// (policy_recorded_test.go, shadow_recorded_test.go,
// quorum_recorded_test.go) share.

// oneBashCallModel is a model server that asks for one Bash call with
// args, then says "Done." once it has the call's result.
func oneBashCallModel(t *testing.T, args string) *httptest.Server {
	t.Helper()
	model := httptest.NewServer(scripted.New(func(req openai.ChatCompletionRequest) scripted.Reply {
		if req.Messages[len(req.Messages)-1].Role == openai.ChatMessageRoleTool {
			return scripted.Reply{Content: "Done."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: "call_1", Name: protocol.ToolBash, Arguments: args}}}
	}))
	t.Cleanup(model.Close)
	return model
}

// fetchHistory is the whole history of run runID of workflow id (its
// latest run when runID is ""); it fails t, which may be a wait's
// collector.
func fetchHistory(ctx context.Context, t require.TestingT, c client.Client, id, runID string) *historypb.History {
	history := &historypb.History{}
	iter := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		history.Events = append(history.Events, e)
	}
	return history
}

// turnReplayer replays ChatTurn histories with this build's code.
func turnReplayer() worker.WorkflowReplayer {
	replayer := worker.NewWorkflowReplayer()
	replayer.RegisterWorkflowWithOptions((&workflows.Workflows{}).ChatTurn, workflow.RegisterOptions{Name: contract.ChatTurnWorkflow})
	return replayer
}

// replayRun replays the history of run with replayer.
func replayRun(replayer worker.WorkflowReplayer, history *historypb.History, run client.WorkflowRun) error {
	return replayer.ReplayWorkflowHistoryWithOptions(nil, history, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: run.GetID(), RunID: run.GetRunID()},
	})
}

// onDevServer starts a Temporal dev server for t and dials it, closing
// both when t ends; it skips t in -short runs.
func onDevServer(t *testing.T) (*devserver.Server, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Temporal dev server")
	}
	srv := devserver.ForTest(t)
	c, err := srv.Dial()
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return srv, c
}
