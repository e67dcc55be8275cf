package workflows_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestTurnWithApprovalsBySignalOnRealTemporal runs the Read / Write / Bash
// batch of the scripted demo model on a real dev server with the real tool and
// model activities, declines Write and approves Bash by signal.
func TestTurnWithApprovalsBySignalOnRealTemporal(t *testing.T) {
	_, c := onDevServer(t)

	// The model streams in small chunks with pauses, so answer text reaches
	// the turn as token batches while the model is still answering.
	model := scripted.New(scripted.Demo(), scripted.ChunkDelay(15*time.Millisecond))
	modelServer := httptest.NewServer(model)
	t.Cleanup(modelServer.Close)
	workspace := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(workspace, "README.md"), []byte("# the workspace readme\n"), 0o644))

	tools := &activities.Tools{Workspace: workspace, BashTimeout: 10 * time.Second}
	w := worker.New(c, "turn-integration", workflows.WorkerOptions())
	wf := &workflows.Workflows{Settings: workflows.Settings{
		RequiredTools:   []string{protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash},
		ApprovalTimeout: time.Minute,
		Tools:           tools.Specs(),
	}}
	m := activities.NewModel(modelServer.URL+"/v1", "test", scripted.ModelName, workflows.TokenSignaler{Client: c})
	m.FlushInterval = 20 * time.Millisecond
	workflows.Register(w, wf, m, tools)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conv := "itest-" + uuid.NewString()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: contract.TurnWorkflowID(conv, 1), TaskQueue: "turn-integration",
	}, contract.ChatTurnWorkflow, workflows.TurnInput{
		ConversationID: conv, Turn: 1,
		Messages: []protocol.Message{{Role: protocol.RoleUser, Content: "tidy up"}},
	})
	require.NoError(t, err)

	var requests []protocol.Event
	require.Eventually(t, func() bool {
		requests = nil
		for _, e := range queryEvents(t, c, run.GetID()) {
			if e.Type == protocol.EventApprovalRequest {
				requests = append(requests, e)
			}
		}
		return len(requests) == 2
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{protocol.ToolWrite, protocol.ToolBash}, []string{requests[0].ToolName, requests[1].ToolName})

	// Decided in reverse order, by signal, as the Temporal CLI would.
	require.NoError(t, c.SignalWorkflow(ctx, requests[1].WorkflowID, "", contract.ApprovalSignal,
		protocol.ApprovalDecision{RequestID: requests[1].RequestID, Decision: protocol.DecisionApprove}))
	require.NoError(t, c.SignalWorkflow(ctx, requests[0].WorkflowID, "", contract.ApprovalSignal,
		protocol.ApprovalDecision{RequestID: requests[0].RequestID, Decision: protocol.DecisionDecline, Reason: "no notes today"}))

	var out contract.TurnOutput
	require.NoError(t, run.Get(ctx, &out))
	require.Equal(t, protocol.FinishStop, out.FinishReason)

	var result protocol.Event
	var tokens strings.Builder
	for i, e := range out.Events {
		require.Equal(t, i+1, e.Seq)
		switch e.Type {
		case protocol.EventToolResult:
			result = e
		case protocol.EventToken:
			tokens.WriteString(e.Data)
		}
	}
	statuses := []string{}
	for _, r := range result.ToolResults {
		statuses = append(statuses, r.Name+":"+r.Status)
	}
	require.Equal(t, []string{"Read:ok", "Write:declined", "Bash:ok"}, statuses)
	require.Contains(t, result.ToolResults[0].Result, "the workspace readme")
	require.Contains(t, result.ToolResults[1].Result, "no notes today")
	require.Contains(t, result.ToolResults[2].Result, "README.md", "ls -la ran in the workspace")
	require.NoFileExists(t, filepath.Join(workspace, scripted.DemoNotePath))

	// Every piece of answer text reached the log once, in order, and the
	// final answer streamed in more than one token event.
	require.Equal(t, out.Messages[0].Content+out.Text, tokens.String())
	require.Greater(t, countType(out.Events, protocol.EventToken), 2)
}

func queryEvents(t *testing.T, c client.Client, workflowID string) []protocol.Event {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.QueryWorkflow(ctx, workflowID, "", contract.EventsQuery, contract.EventsRequest{})
	if err != nil {
		return nil // not started yet
	}
	var resp contract.EventsResponse
	if v.Get(&resp) != nil {
		return nil // called from an Eventually condition: no require here
	}
	return resp.Events
}

func countType(events []protocol.Event, typ string) int {
	n := 0
	for _, e := range events {
		if e.Type == typ {
			n++
		}
	}
	return n
}
