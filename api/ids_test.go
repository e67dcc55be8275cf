package main

import (
	"context"
	"net/http"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// answers says hello to each message, calling no tool.
func answers(openai.ChatCompletionRequest) scripted.Reply {
	return scripted.Reply{Content: "hello"}
}

func TestNoConversationIDTakesAnotherConversationsTurn(t *testing.T) {
	t.Parallel()
	st := newStack(t, withScript(answers))
	api := st.newAuthedAPI(t)

	// alice's conversation "victim" runs its first turn.
	turn1, msgs := chatAs(t, api, aliceToken, `{"query":"one","conversationId":"victim"}`)
	require.Equal(t, contract.TurnWorkflowID("victim", 1), turn1)
	finish := lastOf(streamToEnd(t, msgs))
	require.Equal(t, protocol.FinishStop, finish.Reason)

	// bob picks the ids of alice's next turn and of a subagent of it as
	// his own conversations' ids: refused, saying what is allowed.
	for _, id := range []string{"victim-turn-2", "victim-turn-2-sub-1", "x-turn-y"} {
		resp, body := send(t, http.MethodPost, api.URL+"/chat/stream", "Bearer "+bobToken,
			`{"query":"mine","conversationId":"`+id+`"}`)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
		require.Contains(t, body, `may not contain \"-turn-\"`)
	}
	_, err := st.client.DescribeWorkflow(context.Background(), contract.ConversationWorkflowID("victim-turn-2"), "")
	require.True(t, isNotFound(err), "no conversation started under the id of alice's turn: %v", err)
	// Nor is alice's first turn any conversation's to read or change.
	for _, req := range [][3]string{
		{http.MethodGet, "/conversations/victim-turn-1/messages"},
		{http.MethodGet, "/conversations/victim-turn-1/turns"},
		{http.MethodGet, "/conversations/victim-turn-1/grants"},
		{http.MethodDelete, "/conversations/victim-turn-1/grants/grant-0"},
		{http.MethodPost, "/conversations/victim-turn-1/compact", `{}`},
	} {
		resp, body := send(t, req[0], api.URL+req[1], "Bearer "+bobToken, req[2])
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s %s: %s", req[0], req[1], body)
		require.Contains(t, body, "no such conversation")
	}

	// alice's second turn runs whatever bob did.
	turn2, msgs := chatAs(t, api, aliceToken, `{"query":"two","conversationId":"victim"}`)
	require.Equal(t, contract.TurnWorkflowID("victim", 2), turn2)
	events := streamToEnd(t, msgs)
	require.Empty(t, ofType(events, protocol.EventError))
	require.Equal(t, protocol.FinishStop, lastOf(events).Reason)
}

func TestAConversationStartedUnderATurnLikeIDStillTakesMessages(t *testing.T) {
	t.Parallel()
	st := newStack(t, withScript(answers))
	api := st.newAuthedAPI(t)
	// A conversation started before the API refused such ids, as the API
	// started it then.
	const legacy = "notes-turn-over"
	_, err := st.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: contract.ConversationWorkflowID(legacy), TaskQueue: st.queue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, contract.ConversationWorkflow, contract.ConversationInput{ConversationID: legacy})
	require.NoError(t, err)

	turnID, msgs := chatAs(t, api, aliceToken, `{"query":"one","conversationId":"`+legacy+`"}`)
	require.Equal(t, contract.TurnWorkflowID(legacy, 1), turnID)
	require.Equal(t, protocol.FinishStop, lastOf(streamToEnd(t, msgs)).Reason)

	resp, body := send(t, http.MethodGet, api.URL+"/conversations/"+legacy+"/messages", "Bearer "+aliceToken, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `"total":2`)

	// The id of one of its turns is no conversation's: refused.
	resp, body = send(t, http.MethodPost, api.URL+"/chat/stream", "Bearer "+bobToken,
		`{"query":"mine","conversationId":"`+legacy+`-turn-1"}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
}
