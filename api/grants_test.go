package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

func TestRememberedApprovalSkipsTheNextAskUntilRevokedOverHTTP(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	conv := "grants-1"
	decide := func(e protocol.Event, body string) {
		t.Helper()
		_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+e.RequestID+`",`+body+`}`)
		require.Equal(t, true, out["accepted"])
	}

	// Turn 1: Bash approved and remembered; Write declined.
	_, msgs := st.chat(t, `{"query":"one","conversationId":"`+conv+`"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	decide(asked["Bash"], `"decision":"approve","remember":"conversation"`)
	decide(asked["Write"], `"decision":"decline"`)
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

	// Turn 2: only Write asks; Bash is decided by the grant.
	_, msgs = st.chat(t, `{"query":"two","conversationId":"`+conv+`"}`)
	seq = 0
	events := untilEvent(t, msgs, &seq, protocol.EventHeartbeat, 1)
	require.Len(t, requestsByTool(events), 1)
	write := requestsByTool(events)["Write"]
	grantUsed := findType(events, protocol.EventApprovalDecision)
	require.NotEmpty(t, grantUsed.Grant)
	require.Equal(t, protocol.DecisionApprove, grantUsed.Decision)
	decide(write, `"decision":"decline"`)
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

	// Another conversation, while the grant holds: it asks for both.
	_, other := st.chat(t, `{"query":"one","conversationId":"grants-other"}`)
	otherSeq := 0
	require.Len(t, requestsByTool(untilEvent(t, other, &otherSeq, protocol.EventApprovalRequest, 2)), 2)
	require.Empty(t, st.grants(t, "grants-other"), "another conversation has none")

	// The grant is listed, revoked once, and then gone.
	grants := st.grants(t, conv)
	require.Len(t, grants, 1)
	require.Equal(t, grantUsed.Grant, grants[0].ID)
	require.Equal(t, "Bash", grants[0].Tool)
	require.Equal(t, http.StatusOK, st.delete(t, "/conversations/"+conv+"/grants/"+grants[0].ID))
	require.Equal(t, http.StatusNotFound, st.delete(t, "/conversations/"+conv+"/grants/"+grants[0].ID))
	require.Empty(t, st.grants(t, conv))

	// Turn 3: Bash asks again.
	_, msgs = st.chat(t, `{"query":"three","conversationId":"`+conv+`"}`)
	seq = 0
	require.Contains(t, requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2)), "Bash")
}

func (st *stack) grants(t *testing.T, conv string) []contract.Grant {
	t.Helper()
	resp, err := http.Get(st.api.URL + "/conversations/" + conv + "/grants")
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct {
		Grants []contract.Grant `json:"grants"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Grants
}

func (st *stack) delete(t *testing.T, path string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, st.api.URL+path, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestAGrantLimitedToOneUseOverHTTPDecidesOneCallThenAsks(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	conv := "grants-limited"
	_, msgs := st.chat(t, `{"query":"one","conversationId":"`+conv+`"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	for tool, body := range map[string]string{
		"Bash":  `"decision":"approve","remember":"conversation","rememberUses":1,"rememberFor":"1h","rememberWhen":"args.command.startsWith(\"ls\")"`,
		"Write": `"decision":"decline"`,
	} {
		_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+asked[tool].RequestID+`",`+body+`}`)
		require.Equal(t, true, out["accepted"], out)
	}
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	g := st.grants(t, conv)
	require.Len(t, g, 1)
	require.Equal(t, 1, g[0].Uses)
	require.NotNil(t, g[0].ExpiresAt)
	require.Equal(t, `args.command.startsWith("ls")`, g[0].When)

	// Turn 2: the grant decides its one call, and says none is left.
	_, msgs = st.chat(t, `{"query":"two","conversationId":"`+conv+`"}`)
	seq = 0
	events := untilEvent(t, msgs, &seq, protocol.EventHeartbeat, 1)
	used := findType(events, protocol.EventApprovalDecision)
	require.Equal(t, g[0].ID, used.Grant)
	require.NotNil(t, used.GrantUsesLeft)
	require.Equal(t, 0, *used.GrantUsesLeft)
	decideAll(t, st, events)
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, 1, st.grants(t, conv)[0].Used, "the conversation counted the use")

	// Turn 3: used up, so Bash asks again.
	_, msgs = st.chat(t, `{"query":"three","conversationId":"`+conv+`"}`)
	seq = 0
	require.Contains(t, requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2)), "Bash")
}

// decideAll declines every approval_request among events.
func decideAll(t *testing.T, st *stack, events []protocol.Event) {
	t.Helper()
	for _, e := range events {
		if e.Type == protocol.EventApprovalRequest {
			_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+e.RequestID+`","decision":"decline"}`)
			require.Equal(t, true, out["accepted"], out)
		}
	}
}

func TestAGrantScopeThatMayCostTooMuchIsRefusedWithA400NamingTheLimit(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	_, msgs := st.chat(t, `{"query":"one","conversationId":"grants-costly"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	// A million iterations for every later Bash call, inside a workflow
	// task: past the SDK's deadlock detector, the turn would never end.
	costly := "true"
	for i := 6; i > 0; i-- {
		costly = `[0,1,2,3,4,5,6,7,8,9].all(x` + strconv.Itoa(i) + `, ` + costly + `)`
	}
	body, err := json.Marshal(map[string]any{"requestId": asked["Bash"].RequestID, "decision": "approve", "remember": "conversation", "rememberWhen": costly})
	require.NoError(t, err)

	status, out := st.postJSON(t, "/chat/approval", string(body))

	require.Equal(t, http.StatusBadRequest, status, out)
	require.Contains(t, out["error"], "rememberWhen")
	require.Contains(t, out["error"], "past the limit of 500000 that one call may cost")
	for _, tool := range []string{"Bash", "Write"} {
		_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+asked[tool].RequestID+`","decision":"decline"}`)
		require.Equal(t, true, out["accepted"], "the refused decision decided nothing: %v", out)
	}
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Empty(t, st.grants(t, "grants-costly"))
}
