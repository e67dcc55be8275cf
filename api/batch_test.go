package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// batchBody is the body of POST /chat/approvals that makes decision on
// each of ids.
func batchBody(decision string, ids ...string) string {
	var ds []protocol.DecisionRequest
	for _, id := range ids {
		ds = append(ds, protocol.DecisionRequest{RequestID: id, Decision: decision})
	}
	b, _ := json.Marshal(protocol.BatchDecisionRequest{Decisions: ds})
	return string(b)
}

func TestOnePostDecidesATurnsCallsAndEachDecisionKeepsItsDeciders(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, SecondPerson: true},
			{Tool: protocol.ToolBash, Require: workflows.RequireAlways},
		}
	}))
	const devToken, leadToken, chatToken = "dev-0123456789abcdef", "lead-0123456789abcde", "chat-0123456789abcde"
	o := st.apiOptions()
	o.Tokens = []config.APIToken{
		{Token: devToken, Principal: "dev", Roles: config.DefaultRoles},
		{Token: leadToken, Principal: "lead", Roles: []string{config.RoleApprove}},
		{Token: chatToken, Principal: "bot", Roles: []string{config.RoleChat}},
	}
	api := serveAPI(t, NewServer(o))
	post := func(token, body string) (int, string) {
		t.Helper()
		resp, out := send(t, http.MethodPost, api.URL+"/chat/approvals", "Bearer "+token, body)
		return resp.StatusCode, out
	}

	_, msgs := chatAs(t, api, devToken, `{"query": "tidy up", "conversationId": "batch-four-eyes"}`)
	seq := 0
	requests := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	write, bash := requests[protocol.ToolWrite].RequestID, requests[protocol.ToolBash].RequestID
	both := batchBody(protocol.DecisionApprove, bash, write)

	// The sender may approve the Bash, not their own Write, whoever the
	// body says decides: the batch is refused whole, naming the Write.
	status, out := post(devToken, strings.ReplaceAll(both, `"decision":"approve"`, `"decision":"approve","principal":"lead","role":"admin"`))
	require.Equal(t, http.StatusOK, status, out)
	var refused protocol.ApprovalBatchResult
	require.NoError(t, json.Unmarshal([]byte(out), &refused))
	require.Equal(t, protocol.ApprovalBatchResult{
		Reason: protocol.RejectForbidden, RequestID: write,
		Message: `approval request "` + write + `": Write calls need a second person: "dev" sent the message that led to this call`,
	}, refused)

	for name, tc := range map[string]struct {
		token, body string
		status      int
		says        string
	}{
		"a chat token":       {chatToken, both, http.StatusForbidden, "needs a token with the role"},
		"no decisions":       {leadToken, `{"decisions":[]}`, http.StatusBadRequest, "decisions is missing or empty"},
		"no body object":     {leadToken, `[]`, http.StatusBadRequest, "body must be a JSON object"},
		"a bad decision":     {leadToken, `{"decisions":[{"requestId":"` + bash + `","decision":"maybe"}]}`, http.StatusBadRequest, `decisions[0]: decision "maybe" is neither`},
		"a request twice":    {leadToken, batchBody(protocol.DecisionApprove, bash, write, bash), http.StatusBadRequest, "decisions[0] and decisions[2] both decide request " + bash},
		"another turn's":     {leadToken, batchBody(protocol.DecisionApprove, bash, contract.NewRequestID(contract.TurnWorkflowID("other", 1), "0123")), http.StatusBadRequest, "decisions[1]: request " + contract.NewRequestID(contract.TurnWorkflowID("other", 1), "0123") + " is not of the same turn"},
		"not a request id":   {leadToken, batchBody(protocol.DecisionApprove, bash, "nonsense"), http.StatusBadRequest, `decisions[1]: requestId "nonsense" is not a tollgate request id`},
		"too many":           {leadToken, batchBody(protocol.DecisionDecline, manyIDs(write, 101)...), http.StatusBadRequest, "101 decisions, more than the limit of 100"},
		"an edit it refuses": {leadToken, `{"decisions":[{"requestId":"` + write + `","decision":"approve","arguments":"[1]"}]}`, http.StatusBadRequest, "decisions[0]: arguments must be a JSON object"},
	} {
		status, out := post(tc.token, tc.body)
		require.Equal(t, tc.status, status, "%s: %s", name, out)
		var e protocol.ErrorBody
		require.NoError(t, json.Unmarshal([]byte(out), &e), name)
		require.Contains(t, e.Error, tc.says, name)
	}

	// Nothing was taken: both still wait, and lead decides them together.
	pending := listApprovals(t, api, leadToken, "batch-four-eyes")
	require.Len(t, pending, 2, "a refused batch takes none of its decisions")
	status, out = post(leadToken, both)
	require.Equal(t, http.StatusOK, status, out)
	require.JSONEq(t, `{"accepted":true,"decided":2}`, out)
	status, again := post(leadToken, both)
	require.Equal(t, http.StatusOK, status, again)
	require.JSONEq(t, `{"accepted":true,"decided":2}`, again, "a retried POST is told the first one's outcome")

	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	by := map[string]string{}
	for _, d := range ofType(events, protocol.EventApprovalDecision) {
		by[d.ToolCallID] = d.By + " " + d.Role
	}
	require.Equal(t, map[string]string{"call_0_1": "lead approve", "call_0_2": "lead approve"}, by)
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write ok", "call_0_2 Bash ok"}, resultStatuses(ofType(events, protocol.EventToolResult)[0].ToolResults))
}

// manyIDs is n request ids of the workflow of id, all different.
func manyIDs(id string, n int) []string {
	wid, _ := contract.RequestWorkflowID(id)
	out := make([]string, n)
	for i := range out {
		out[i] = contract.NewRequestID(wid, fmt.Sprintf("%032x", i))
	}
	return out
}

// listApprovals is GET /approvals of conversation, as token sees it.
func listApprovals(t *testing.T, api *httptest.Server, token, conversation string) []protocol.PendingApproval {
	t.Helper()
	resp, out := send(t, http.MethodGet, api.URL+"/approvals?conversationId="+conversation, "Bearer "+token, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	var page struct {
		Approvals []protocol.PendingApproval `json:"approvals"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	return page.Approvals
}

// A turn of ten protected Writes and a long answer costs fewer history
// events when one POST /chat/approvals decides its ten calls than when
// ten POST /chat/approval do: each Update costs the turn its accepted and
// completed events and a workflow task.
func TestOneBatchDecisionCostsTheTurnFewerEventsThanTenSingleOnes(t *testing.T) {
	t.Parallel()
	var writes []protocol.ToolCall
	for i := range 10 {
		writes = append(writes, protocol.ToolCall{ID: fmt.Sprintf("call_w%d", i), Name: protocol.ToolWrite, Arguments: fmt.Sprintf(`{"file_path":"f%d.txt","content":"x"}`, i)})
	}
	answer := strings.TrimSpace(strings.Repeat("word ", 2000))
	turn := []scripted.Reply{{ToolCalls: writes}, {Content: answer}}
	st := newStack(t, withScript(byQuery(map[string][]scripted.Reply{"batch": turn, "each": turn})))

	run := func(conv, query string, decide func(ids []string)) int {
		t.Helper()
		_, msgs := st.chat(t, `{"query":"`+query+`","conversationId":"`+conv+`"}`)
		seq := 0
		var ids []string
		for _, e := range ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 10), protocol.EventApprovalRequest) {
			ids = append(ids, e.RequestID)
		}
		decide(ids)
		events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
		require.Equal(t, protocol.FinishStop, events[len(events)-1].Reason)
		results := ofType(events, protocol.EventToolResult)
		require.NotEmpty(t, results)
		ok := 0
		for _, r := range results {
			for _, tr := range r.ToolResults {
				if tr.Status == protocol.StatusOK {
					ok++
				}
			}
		}
		require.Equal(t, 10, ok, "every Write ran")

		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		n := 0
		iter := st.client.GetWorkflowHistory(ctx, contract.TurnWorkflowID(conv, 1), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			_, err := iter.Next()
			require.NoError(t, err)
			n++
		}
		return n
	}
	batched := run("decided-at-once", "batch", func(ids []string) {
		status, out := st.postJSON(t, "/chat/approvals", batchBody(protocol.DecisionApprove, ids...))
		require.Equal(t, http.StatusOK, status, out)
		require.Equal(t, true, out["accepted"], out)
	})
	each := run("decided-one-by-one", "each", func(ids []string) {
		for _, id := range ids {
			status, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+id+`","decision":"approve"}`)
			require.Equal(t, http.StatusOK, status, out)
			require.Equal(t, true, out["accepted"], out)
		}
	})
	t.Logf("a turn of 10 protected Writes and a 2,000-word answer: %d history events decided by one POST /chat/approvals, %d by ten POST /chat/approval", batched, each)
	require.Less(t, batched, each)
}
