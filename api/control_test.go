package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// Tokens of the control tests: an admin, two who decide, one who sends.
const (
	rootToken  = "root-0123456789abcdef"
	aliceTok   = "alice-0123456789abcd"
	bobTok     = "bob-0123456789abcdef"
	devTok     = "dev-0123456789abcdef"
	carolToken = "carol-0123456789abcd"
)

// controlTokens are the principals of the control tests.
var controlTokens = []config.APIToken{
	{Token: rootToken, Principal: "root", Roles: []string{config.RoleAdmin}},
	{Token: aliceTok, Principal: "alice", Roles: config.DefaultRoles},
	{Token: bobTok, Principal: "bob", Roles: config.DefaultRoles},
	{Token: devTok, Principal: "dev", Roles: config.DefaultRoles},
	{Token: carolToken, Principal: "carol", Roles: config.DefaultRoles},
}

// untilNotice reads messages until the id-less event of type typ,
// counting the numbered ones it passes in seq, and returns it.
func untilNotice(t *testing.T, msgs <-chan sseMessage, seq *int, typ string) protocol.Event {
	t.Helper()
	for {
		m, ok := nextMessage(t, msgs)
		require.True(t, ok, "stream ended before %s", typ)
		e := decodeEvent(t, m)
		if m.HasID {
			*seq++
			continue
		}
		if e.Type == typ {
			return e
		}
	}
}

// ledgerOf reads every ledger row of principal.
func ledgerOf(t *testing.T, st *stack, principal string) []audit.Record {
	t.Helper()
	page, err := st.ledger.List(context.Background(), auditdb.Filter{Principal: principal, Limit: auditdb.MaxLimit})
	require.NoError(t, err)
	return page.Records
}

func TestAStandInDecidesForWhomTheyStandInAndTheLedgerSaysSo(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{"alice"}, SecondPerson: true},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	o := st.apiOptions()
	o.Tokens = controlTokens
	api := serveAPI(t, NewServer(o))
	put := func(token, body string) (int, string) {
		t.Helper()
		resp, out := send(t, http.MethodPut, api.URL+"/delegations", "Bearer "+token, body)
		return resp.StatusCode, out
	}
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)

	// Only an admin sets a stand-in; nonsense is refused, saying why.
	status, body := put(aliceTok, `{"from":"alice","to":"bob","until":"`+until+`"}`)
	require.Equal(t, http.StatusForbidden, status, body)
	status, body = put(rootToken, `{"from":"alice","to":" alice\t","until":"`+until+`"}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, "cannot stand in for themself", "spaces around a name make no one else")
	status, body = put(rootToken, `{"from":"alice","to":"link","until":"`+until+`"}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, `to: the principal \"link\" is who decisions through a signed link`, "every link would decide as alice")
	status, body = put(rootToken, `{"from":"alice bob","to":"carol","until":"`+until+`"}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, "from: the principal must be a name")
	status, body = put(rootToken, `{"from":"alice","to":"bob","until":"`+until+`","reason":"holiday"}`)
	require.Equal(t, http.StatusOK, status, body)
	var set protocol.Delegations
	require.NoError(t, json.Unmarshal([]byte(body), &set))
	require.Len(t, set.Delegations, 1)
	bobForAlice := set.Delegations[0]
	require.Equal(t, "root", bobForAlice.By)
	status, body = put(rootToken, `{"from":"bob","to":"carol","until":"`+until+`"}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, "chain")
	resp, body := send(t, http.MethodGet, api.URL+"/delegations", "Bearer "+bobTok, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `"to":"bob"`)

	decide := func(token, requestID, extra string) string {
		t.Helper()
		resp, out := send(t, http.MethodPost, api.URL+"/chat/approval", "Bearer "+token, `{"requestId":"`+requestID+`","decision":"approve"`+extra+`}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, out)
		return out
	}
	ask := func(token, conv string) (<-chan sseMessage, *int, protocol.Event) {
		t.Helper()
		_, msgs := chatAs(t, api, token, `{"query": "tidy up", "conversationId": "`+conv+`"}`)
		seq := 0
		return msgs, &seq, requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))[protocol.ToolWrite]
	}

	// dev's Write: only alice decides it; carol may not, bob may for her
	// (what a body says of onBehalfOf counts for nothing).
	msgs, seq, write := ask(devTok, "stand-in-dev")
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decide(carolToken, write.RequestID, `,"onBehalfOf":"alice"`))
	require.JSONEq(t, `{"accepted":true}`, decide(bobTok, write.RequestID, ""))
	d := ofType(untilEvent(t, msgs, seq, protocol.EventFinish, 1), protocol.EventApprovalDecision)
	require.Len(t, d, 1)
	require.Equal(t, "bob", d[0].By)
	require.Equal(t, "alice", d[0].OnBehalfOf)
	rows := ledgerOf(t, st, "bob")
	require.Len(t, rows, 1)
	require.Equal(t, write.RequestID, rows[0].ID)
	require.Equal(t, "alice", rows[0].OnBehalfOf, "the ledger says bob for alice")

	// alice's own Write: her stand-in counts as her, a second person must
	// decide; bob's own Write likewise.
	_, _, write = ask(aliceTok, "stand-in-alice")
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decide(bobTok, write.RequestID, ""))
	_, _, write = ask(bobTok, "stand-in-bob")
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decide(bobTok, write.RequestID, ""))
	require.JSONEq(t, `{"accepted":true}`, decide(aliceTok, write.RequestID, ""))

	// Removed, the delegation does nothing: bob is no decider again.
	resp, body = send(t, http.MethodDelete, api.URL+"/delegations/"+bobForAlice.ID, "Bearer "+rootToken, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.JSONEq(t, `{"delegations":[]}`, body)
	resp, body = send(t, http.MethodDelete, api.URL+"/delegations/"+bobForAlice.ID, "Bearer "+rootToken, "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	_, _, write = ask(devTok, "stand-in-dev-2")
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decide(bobTok, write.RequestID, ""))

	var kinds []string
	for _, r := range ledgerOf(t, st, "root") {
		require.Equal(t, audit.AdminTool, r.Tool)
		require.Equal(t, config.RoleAdmin, r.Role)
		kinds = append(kinds, r.Kind)
	}
	require.ElementsMatch(t, []string{audit.KindDelegate, audit.KindUndelegate}, kinds)
}

func TestAFrozenGateAsksEveryProtectedCallAndTellsEveryOpenStream(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	o := st.apiOptions()
	o.Tokens = controlTokens
	api := serveAPI(t, NewServer(o))
	admin := func(path, token, body string) (int, string) {
		t.Helper()
		resp, out := send(t, http.MethodPost, api.URL+path, "Bearer "+token, body)
		return resp.StatusCode, out
	}
	decide := func(requestID, extra string) {
		t.Helper()
		resp, out := send(t, http.MethodPost, api.URL+"/chat/approval", "Bearer "+aliceTok, `{"requestId":"`+requestID+`","decision":"approve"`+extra+`}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, out)
		require.JSONEq(t, `{"accepted":true}`, out)
	}
	const conv = "frozen-grant"

	// A grant answers dev's Writes in the conversation.
	_, msgs := chatAs(t, api, devTok, `{"query": "tidy up", "conversationId": "`+conv+`"}`)
	seq := 0
	write := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))[protocol.ToolWrite]
	decide(write.RequestID, `,"remember":"conversation"`)
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

	// A turn elsewhere waits; its stream is open as the gate freezes, on
	// this API and on another, which learns of the freeze by reading the
	// control workflow.
	otherTurn, waiting := chatAs(t, api, devTok, `{"query": "tidy up", "conversationId": "frozen-other"}`)
	wseq := 0
	other := requestsByTool(untilEvent(t, waiting, &wseq, protocol.EventApprovalRequest, 1))[protocol.ToolWrite]
	api2 := serveAPI(t, NewServer(o))
	_, elsewhere, stopElsewhere := openStream(t, api2.URL+"/chat/turns/"+otherTurn+"/events", http.Header{"Authorization": {"Bearer " + devTok}})
	defer stopElsewhere()
	eseq := 0
	untilEvent(t, elsewhere, &eseq, protocol.EventApprovalRequest, 1)

	status, body := admin("/admin/freeze", aliceTok, `{"reason":"incident"}`)
	require.Equal(t, http.StatusForbidden, status, body)
	status, body = admin("/admin/freeze", rootToken, `{"reason":"incident 42"}`)
	require.Equal(t, http.StatusOK, status, body)
	var f protocol.GateFreeze
	require.NoError(t, json.Unmarshal([]byte(body), &f))
	require.True(t, f.Frozen)
	require.Equal(t, "root", f.By)
	frozen := untilNotice(t, waiting, &wseq, protocol.EventGateFrozen)
	require.Equal(t, "root", frozen.By)
	require.Equal(t, "incident 42", frozen.Reason)
	require.Equal(t, frozen, untilNotice(t, elsewhere, &eseq, protocol.EventGateFrozen), "the other API's stream is told too")
	resp, body := send(t, http.MethodGet, api.URL+"/admin/freeze", "Bearer "+devTok, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `"frozen":true`)
	require.Eventually(t, st.admin.Frozen, waitFor, 10*time.Millisecond, "the worker learns of the freeze")

	// Frozen: the grant answers nothing, dev's Write asks.
	_, msgs = chatAs(t, api, devTok, `{"query": "tidy up", "conversationId": "`+conv+`"}`)
	seq = 0
	events := untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1)
	require.Empty(t, ofType(events, protocol.EventApprovalDecision), "no grant answers a call while the gate is frozen")
	write = requestsByTool(events)[protocol.ToolWrite]

	// bypassApproval is refused while frozen.
	req, err := http.NewRequest(http.MethodPost, api.URL+"/chat/stream", strings.NewReader(`{"query":"go","bypassApproval":true}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+rootToken)
	req.Header.Set("Content-Type", "application/json")
	bypass, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	bypass.Body.Close()
	require.Equal(t, http.StatusLocked, bypass.StatusCode)

	// Only an admin thaws it; thawed, both open streams are told.
	status, body = admin("/admin/thaw", aliceTok, `{"reason":"I need my grant back"}`)
	require.Equal(t, http.StatusForbidden, status, body)
	status, body = admin("/admin/thaw", rootToken, `{"reason":"resolved"}`)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "root", untilNotice(t, msgs, &seq, protocol.EventGateThawed).By)
	untilNotice(t, waiting, &wseq, protocol.EventGateThawed)
	status, body = admin("/admin/thaw", rootToken, `{}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, "not frozen")
	decide(write.RequestID, "")
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	decide(other.RequestID, "")
	untilEvent(t, waiting, &wseq, protocol.EventFinish, 1)

	// Frozen with new turns blocked: a message is refused, naming the
	// freeze.
	status, body = admin("/admin/freeze", rootToken, `{"reason":"audit","blockNewTurns":true}`)
	require.Equal(t, http.StatusOK, status, body)
	resp, body = send(t, http.MethodPost, api.URL+"/chat/stream", "Bearer "+devTok, `{"query":"tidy up"}`)
	require.Equal(t, http.StatusLocked, resp.StatusCode, body)
	require.Contains(t, body, "the gate is frozen by root")
	require.Contains(t, body, "audit")

	var kinds []string
	for _, r := range ledgerOf(t, st, "root") {
		kinds = append(kinds, r.Kind)
	}
	require.ElementsMatch(t, []string{audit.KindFreeze, audit.KindThaw, audit.KindFreeze}, kinds)
}

func TestAFreezeOutlivesAnOperatorWhoTerminatesTheControlWorkflow(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	o := st.apiOptions()
	o.Tokens = controlTokens
	api := serveAPI(t, NewServer(o))
	resp, body := send(t, http.MethodPost, api.URL+"/admin/freeze", "Bearer "+rootToken, `{"reason":"incident"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.NoError(t, st.client.TerminateWorkflow(context.Background(), contract.ControlWorkflowID, "", "an operator tidies up"))

	// The next change starts the control workflow again: from the state
	// the last one held, not from nothing, which would thaw the gate with
	// no thaw in the ledger.
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	resp, body = send(t, http.MethodPut, api.URL+"/delegations", "Bearer "+rootToken, `{"from":"alice","to":"bob","until":"`+until+`"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	resp, body = send(t, http.MethodGet, api.URL+"/admin/freeze", "Bearer "+devTok, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `"frozen":true`)
	require.Contains(t, body, `"reason":"incident"`)
	st2, err := contract.ReadControl(context.Background(), st.client)
	require.NoError(t, err)
	require.True(t, st2.Freeze.Frozen)
	require.Len(t, st2.Delegations, 1)

	ids := map[string]bool{}
	for _, r := range ledgerOf(t, st, "root") {
		ids[r.ID] = true
	}
	require.Len(t, ids, 2, "the freeze's row and the delegation's, neither written over")
}
