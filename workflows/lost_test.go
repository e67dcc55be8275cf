package workflows

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/mocks"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestOnlyATurnOrSubagentWhoseTaskFailsOnAMissingPayloadIsEnded drives
// LostPayloads with the calls a worker makes: a task polled, then failed.
func TestOnlyATurnOrSubagentWhoseTaskFailsOnAMissingPayloadIsEnded(t *testing.T) {
	key := strings.Repeat("ab", 32)
	missing := `storage driver "tollgate-dir" retrieve failed: payload ` + key + ` is not in the payload store (payload folder /srv/p): …`
	c := mocks.NewClient(t)
	terminated := make(chan string, 4)
	// A termination runs in a goroutine of its own, and stays in l.ending
	// until it returns: held here, it shows in ending() at once, so that
	// the failures that must end nothing are checked as they come, not by
	// how soon a goroutine would have run.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	c.On("TerminateWorkflow", mock.Anything, mock.Anything, mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		terminated <- args.String(1) + " " + args.String(3)
		<-release
	}).Return(nil)
	l := NewLostPayloads(slog.New(slog.DiscardHandler), payloads.MissingKey)
	l.Attach(c)
	ending := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.ending)
	}
	call := func(req, reply any) {
		require.NoError(t, l.intercept(context.Background(), "", req, reply, nil,
			func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }))
	}
	task := func(token, wid, typ string) {
		call(&workflowservice.PollWorkflowTaskQueueRequest{}, &workflowservice.PollWorkflowTaskQueueResponse{
			TaskToken:         []byte(token),
			WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: wid, RunId: "run-" + wid},
			WorkflowType:      &commonpb.WorkflowType{Name: typ},
		})
	}
	fail := func(token, msg string) {
		call(&workflowservice.RespondWorkflowTaskFailedRequest{TaskToken: []byte(token), Failure: &failurepb.Failure{Message: "workflow task failed", Cause: &failurepb.Failure{Message: msg}}}, &workflowservice.RespondWorkflowTaskFailedResponse{})
	}

	task("t1", "conv-turn-1", contract.ChatTurnWorkflow)
	fail("t1", "storage driver \"tollgate-s3\" retrieve failed: dial tcp: connection refused")
	require.Zero(t, ending(), "a store that does not answer ends nothing")
	task("t2", "conv", contract.ConversationWorkflow)
	fail("t2", missing)
	require.Zero(t, ending(), "a conversation is never ended")
	task("t3", "conv-turn-1", contract.ChatTurnWorkflow)
	fail("t3", missing)
	require.Equal(t, 1, ending(), "the turn is being ended")

	select {
	case got := <-terminated:
		require.Equal(t, "conv-turn-1 "+contract.LostPayloadReason(key), got)
	case <-time.After(5 * time.Second):
		t.Fatal("the turn was not ended")
	}
	why, ok := contract.LostPayload(contract.LostPayloadReason(key))
	require.True(t, ok)
	require.Contains(t, why, key)
	require.NotContains(t, why, "/srv/p", "the reason names the key, not where the store is")
	require.Empty(t, terminated, "a store that does not answer, and a conversation, are never ended")
	require.Empty(t, l.tasks, "answered tasks are forgotten")
}
