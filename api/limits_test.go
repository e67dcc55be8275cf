package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/workflows"
)

// TestABatchOfAHundredProtectedCallsWaitsAndRuns goes past Temporal's 2 KB
// limit on a search attribute value: every pending request id of a batch no
// longer fits in TollgatePendingApprovals (22 did not, with ids this long).
func TestABatchOfAHundredProtectedCallsWaitsAndRuns(t *testing.T) {
	const n = 100
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "All ran."}
		}
		var calls []activities.ToolCall
		for i := range n {
			calls = append(calls, activities.ToolCall{ID: fmt.Sprintf("call_%03d", i), Name: activities.ToolBash, Arguments: fmt.Sprintf(`{"command":"echo %d"}`, i)})
		}
		return scripted.Reply{ToolCalls: calls}
	}
	st := newStack(t, withScript(script))
	const conv = "a-wide-batch-of-protected-calls-in-a-conversation-with-a-long-id"
	_, msgs := st.chat(t, `{"query": "run them all", "conversationId": "`+conv+`"}`)
	seq := 0
	requests := ofType(untilEvent(t, msgs, &seq, workflows.EventApprovalRequest, n), workflows.EventApprovalRequest)
	require.Len(t, requests, n)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, approvalsAt(c, st.api.URL, "?conversationId="+conv), n, "the inbox lists every one")
	}, waitFor, 50*time.Millisecond)
	for _, r := range requests {
		postDecision(t, st.api, r.RequestID, workflows.DecisionApprove, "", true)
	}
	events := untilEvent(t, msgs, &seq, workflows.EventFinish, 1)
	finish := events[len(events)-1]
	require.Equal(t, workflows.FinishStop, finish.Reason, finish.Message)
	results := ofType(events, workflows.EventToolResult)[0].ToolResults
	require.Len(t, results, n)
	for i, r := range results {
		require.Equal(t, activities.StatusOK, r.Status, r.Result)
		require.Contains(t, r.Result, fmt.Sprint(i))
	}
}

func TestAConversationThatEndedIsNeverReplacedByAnEmptyOneUnderItsID(t *testing.T) {
	st := newStack(t, withScript(scripted.Always(scripted.Reply{Content: "Hello."})))
	_, msgs := st.chat(t, `{"query": "hi", "conversationId": "ended"}`)
	seq := 0
	untilEvent(t, msgs, &seq, workflows.EventFinish, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	id := workflows.ConversationWorkflowID("ended")
	require.NoError(t, st.client.TerminateWorkflow(ctx, id, "", "an operator ended it"))

	status, msg := post(t, st.api.URL+"/chat/stream", "application/json", "", `{"query": "again", "conversationId": "ended"}`)
	require.Equal(t, http.StatusConflict, status, msg)
	require.Contains(t, msg, "conversation ended has ended")
	desc, err := st.client.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, desc.GetWorkflowExecutionInfo().GetStatus(), "no new run under its id")
	_, err = st.client.DescribeWorkflowExecution(ctx, workflows.TurnWorkflowID("ended", 1), "")
	require.NoError(t, err, "turn 1 is still the first conversation's")
}
