package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// quorumAPI serves st's turns with a token for each of dev (who sends
// messages), alice, bob, carol (admin) and erin (approve, in the team
// oncall); tokens maps principal to token.
func quorumAPI(t *testing.T, st *stack) (*httptest.Server, map[string]string) {
	t.Helper()
	tokens := map[string]string{}
	o := st.apiOptions()
	for _, p := range []string{"dev", "alice", "bob", "carol", "erin"} {
		tokens[p] = p + "-token-0123456789abcdef"
		roles := []string{config.RoleApprove}
		if p == "dev" {
			roles = config.DefaultRoles
		}
		if p == "carol" {
			roles = []string{config.RoleAdmin}
		}
		tok := config.APIToken{Token: tokens[p], Principal: p, Roles: roles}
		if p == "erin" {
			tok.Teams = []string{"oncall"}
		}
		o.Tokens = append(o.Tokens, tok)
	}
	return serveAPI(t, NewServer(o)), tokens
}

// voteAs posts a decision on request id with token, and returns the answer.
func voteAs(t *testing.T, api *httptest.Server, token, id, body string) (int, protocol.ApprovalResult, string) {
	t.Helper()
	resp, out := send(t, http.MethodPost, api.URL+"/chat/approval", "Bearer "+token, `{"requestId":"`+id+`",`+body+`}`)
	var res protocol.ApprovalResult
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	}
	return resp.StatusCode, res, out
}

func TestAQuorumOfTwoPrincipalsApprovesOverHTTPAndAVoterVotesOnce(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{"alice", "bob", "carol"}, Quorum: 2},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	api, tokens := quorumAPI(t, st)

	_, msgs := chatAs(t, api, tokens["dev"], `{"query": "tidy up", "conversationId": "quorum-http"}`)
	seq := 0
	write := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))["Write"]
	require.Equal(t, 2, write.Votes.Quorum)
	require.Equal(t, []string{"alice", "bob", "carol"}, write.Votes.MayVote)

	status, res, body := voteAs(t, api, tokens["dev"], write.RequestID, `"decision":"approve"`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, protocol.RejectForbidden, res.Reason, "dev is no decider: %s", body)

	status, res, body = voteAs(t, api, tokens["alice"], write.RequestID, `"decision":"approve"`)
	require.Equal(t, http.StatusOK, status, body)
	require.True(t, res.Accepted && res.Pending, body)
	require.Contains(t, res.Message, "vote recorded, 1 of 2 approvals")
	require.Equal(t, []string{"bob", "carol"}, res.Votes.MayVote)
	vote := untilEvent(t, msgs, &seq, protocol.EventApprovalVote, 1)
	require.Equal(t, "alice", vote[len(vote)-1].By)

	status, res, body = voteAs(t, api, tokens["alice"], write.RequestID, `"decision":"decline","reason":"on second thought"`)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, protocol.RejectVoted, res.Reason, body)
	require.Contains(t, res.Message, `"alice" has voted on it already`)
	status, _, body = voteAs(t, api, tokens["bob"], write.RequestID, `"decision":"approve","arguments":{"file_path":"other.txt","content":"x"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, "votes must be on the same arguments")
	status, _, body = voteAs(t, api, tokens["bob"], write.RequestID, `"decision":"approve","remember":"conversation"`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, "a remembered decision never stands in for one")

	status, res, body = voteAs(t, api, tokens["bob"], write.RequestID, `"decision":"approve"`)
	require.Equal(t, http.StatusOK, status, body)
	require.JSONEq(t, `{"accepted":true}`, body, "the second approval decides: %+v", res)

	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	d := ofType(events, protocol.EventApprovalDecision)
	require.Equal(t, "bob", d[0].By)
	require.Len(t, ofType(events, protocol.EventApprovalVote), 1, "bob's vote, after alice's")
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write ok", "call_0_2 Bash ok"}, resultStatuses(ofType(events, protocol.EventToolResult)[0].ToolResults))
}

// issue #32's own example: escalate: {after: 50%, to: [role:oncall]}.
// oncall is a team role of erin's token; carol, whose token has none,
// cannot claim it in her body.
func TestAnEscalationStepLetsATeamRoleDecideOnlyAfterHalfTheTimeout(t *testing.T) {
	t.Parallel()
	st, sink, _ := linkStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{"alice"}, Timeout: 8 * time.Second,
				Escalate: []policy.Escalation{{AfterPercent: 50, To: []string{"bob", workflows.DeciderRolePrefix + "oncall"}}}},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	api, tokens := quorumAPI(t, st)

	_, msgs := chatAs(t, api, tokens["dev"], `{"query": "tidy up", "conversationId": "escalation-http"}`)
	seq := 0
	write := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))["Write"]
	require.Equal(t, []string{"alice"}, write.Deciders)
	for _, p := range []string{"erin", "bob"} {
		_, res, body := voteAs(t, api, tokens[p], write.RequestID, `"decision":"approve"`)
		require.Equal(t, protocol.RejectForbidden, res.Reason, "before the step only alice decides, not %s: %s", p, body)
	}

	// The inbox lists who may decide it now.
	inboxDeciders := func(c *assert.CollectT) []string {
		_, page, _ := inboxGet(c, api, tokens["alice"], "conversationId=escalation-http", "")
		require.Len(c, page.Approvals, 1)
		return page.Approvals[0].Deciders
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, []string{"alice"}, inboxDeciders(c))
	}, waitFor, 50*time.Millisecond)

	hop := untilEvent(t, msgs, &seq, protocol.EventApprovalEscalated, 1)
	require.Equal(t, []string{"alice", "bob", "role:oncall"}, hop[len(hop)-1].Deciders)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Equal(c, []string{"alice", "bob", "role:oncall"}, inboxDeciders(c), "the escalation step's")
	}, waitFor, 50*time.Millisecond)
	notice := sink.of(t, activities.NoticeEscalation, protocol.ToolWrite)
	require.Equal(t, []string{"bob", "role:oncall"}, notice.EscalatedTo)
	require.Equal(t, write.RequestID, notice.RequestID)
	require.True(t, strings.HasPrefix(notice.ApproveURL, st.api.URL+links.Path+"?"), "the escalation's notice carries the call's links: %q", notice.ApproveURL)
	require.NotEmpty(t, notice.DeclineURL)

	_, res, body := voteAs(t, api, tokens["carol"], write.RequestID, `"decision":"approve","teams":["oncall"]`)
	require.Equal(t, protocol.RejectForbidden, res.Reason, "carol is not on call, whatever her body says: %s", body)
	_, res, body = voteAs(t, api, tokens["erin"], write.RequestID, `"decision":"approve"`)
	require.True(t, res.Accepted, body)
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	d := ofType(events, protocol.EventApprovalDecision)[0]
	require.Equal(t, "erin", d.By)
	require.Equal(t, config.RoleApprove, d.Role, "the decision's role stays the token's permission")
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write ok", "call_0_2 Bash ok"}, resultStatuses(ofType(events, protocol.EventToolResult)[0].ToolResults))
}

func TestConsoleShowsVotesSoFarAndTwoPrincipalsReachTheQuorum(t *testing.T) {
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{"alice", "bob", "carol"}, Quorum: 2},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	api, tokens := quorumAPI(t, st)
	b := newBrowser(t)
	b.do(chromedp.Navigate(api.URL + "/"))
	useToken := func(principal string) {
		b.do(chromedp.SetValue(chromedp.CSS(`[data-testid="api-token"]`), tokens[principal]))
		require.True(t, eval[bool](b, `document.querySelector('[data-testid="api-token"]').dispatchEvent(new Event('change'))`))
	}
	useToken("dev")
	sendFromConsole(b, "tidy up")
	turn := nthTurn(1)
	write := callIn(turn, "Write")
	b.do(chromedp.WaitVisible(chromedp.CSS(write + ` [data-testid="approve"]`)))
	votes := jsQuote(write + ` [data-testid="approval-votes"]`)
	b.waitUntil(`document.querySelector(` + votes + `)?.textContent === "votes: 0 of 2 approvals · may still vote: alice, bob, carol"`)

	useToken("alice")
	b.do(chromedp.Click(chromedp.CSS(write + ` [data-testid="approve"]`)))
	status := jsQuote(write + ` [data-testid="approval-status"]`)
	b.waitUntil(`document.querySelector(` + status + `).textContent.startsWith("vote recorded, 1 of 2 approvals")`)
	b.waitUntil(`document.querySelector(` + votes + `).textContent === "votes: 1 of 2 approvals · alice approved · may still vote: bob, carol"`)
	require.Equal(t, "alice approved", eval[string](b, `document.querySelector(`+jsQuote(write+` [data-testid="approval-vote"]`)+`).textContent`))
	b.screenshot("console-quorum-one-of-two")

	// Alice again: refused, and the panel stays for the next person.
	b.do(chromedp.Click(chromedp.CSS(write + ` [data-testid="decline"]`)))
	b.waitUntil(`document.querySelector(` + status + `).textContent.includes('"alice" has voted on it already')`)

	useToken("bob")
	b.do(chromedp.Click(chromedp.CSS(write + ` [data-testid="approve"]`)))
	b.do(chromedp.WaitVisible(chromedp.CSS(turn + ` [data-testid="finish"][data-reason="stop"]`)))
	b.waitUntil(count(write+` [data-testid="tool-result"][data-status="ok"]`) + ` === 1`)
	require.Equal(t, 2, eval[int](b, count(write+` [data-testid="approval-vote"]`)))
}

func TestOnePersonCannotReachAQuorumWithTheirTokenAndTheNoticesLink(t *testing.T) {
	t.Parallel()
	st, sink, _ := linkStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolBash, Require: workflows.RequireAlways, Quorum: 2},
			{Tool: protocol.ToolWrite, Require: workflows.RequireNever},
		}
	}))
	api, tokens := quorumAPI(t, st)
	_, msgs := chatAs(t, api, tokens["dev"], `{"query":"one","conversationId":"quorum-links"}`)
	seq := 0
	bash := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))["Bash"]
	notice := sink.of(t, activities.NoticeApprovalRequest, "Bash")

	_, res, body := voteAs(t, api, tokens["alice"], bash.RequestID, `"decision":"approve"`)
	require.True(t, res.Accepted && res.Pending, body)
	// Alice holds the notice's link too: a link names no one, so it
	// cannot be the second vote (nor an API without tokens).
	status, page := postLink(t, st.api.URL, notice.ApproveURL, nil)
	require.Equal(t, http.StatusConflict, status, page)
	require.Contains(t, page, "a link names no one")
	require.Equal(t, protocol.RejectForbidden, postDecision(t, st.api, bash.RequestID, protocol.DecisionApprove, "", false))

	_, res, body = voteAs(t, api, tokens["bob"], bash.RequestID, `"decision":"approve"`)
	require.True(t, res.Accepted && !res.Pending, body)
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	var by []string
	for _, v := range ofType(events, protocol.EventApprovalVote) {
		by = append(by, v.By)
	}
	require.Equal(t, []string{"alice", "bob"}, by)
}

func TestASubagentsQuorumCallTakesVotesFromDistinctPrincipalsAsATurnsDoes(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Agents = []workflows.AgentDef{notetaker}
		s.Rules = []workflows.Rule{{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Quorum: 2}}
	}))
	api, tokens := quorumAPI(t, st)
	_, msgs := chatAs(t, api, tokens["dev"], `{"query":"use a subagent to take notes","conversationId":"quorum-subagent"}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, "subagent_approval_request", 1)
	req := events[len(events)-1]
	require.Equal(t, protocol.ToolWrite, req.ToolName)
	require.Equal(t, 2, req.Votes.Quorum, "the parent's stream shows the subagent's quorum")

	_, res, body := voteAs(t, api, tokens["alice"], req.RequestID, `"decision":"approve"`)
	require.True(t, res.Accepted && res.Pending, body)
	_, res, body = voteAs(t, api, tokens["alice"], req.RequestID, `"decision":"approve","reason":"again"`)
	require.Equal(t, protocol.RejectVoted, res.Reason, body)
	_, res, body = voteAs(t, api, tokens["bob"], req.RequestID, `"decision":"approve"`)
	require.True(t, res.Accepted && !res.Pending, body)

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	var voters []string
	for _, e := range append(events, rest...) {
		if e.Type == protocol.EventSubagentPrefix+protocol.EventApprovalVote {
			voters = append(voters, e.By)
		}
	}
	require.Equal(t, []string{"alice", "bob"}, voters)
	require.Contains(t, findType(rest, protocol.EventToolResult).ToolResults[0].Result, "Write ran", "the subagent's Write ran after the second vote")
}

// TestTheInboxShowsVotesSoFarAndWhoMayStillVote reads a quorum call from
// the inbox as the ledger lists it: GET /approvals says who may decide it
// and where its votes stand as the turn's pending query does, before and
// after alice's vote, without asking the turn; the inbox page, with
// alice's token and then bob's, shows "1 of 2" and who may still vote,
// and bob's approval there decides it.
func TestTheInboxShowsVotesSoFarAndWhoMayStillVote(t *testing.T) {
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{"alice", "bob", "carol"}, Quorum: 2},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	api, tokens := quorumAPI(t, st)
	_, msgs := chatAs(t, api, tokens["dev"], `{"query": "tidy up", "conversationId": "quorum-inbox"}`)
	seq := 0
	write := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))["Write"]

	// inboxSays is the inbox's row of the Write once it says what the
	// turn's pending query says.
	inboxSays := func(casts int) protocol.PendingApproval {
		t.Helper()
		var got protocol.PendingApproval
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			status, page, _ := inboxGet(c, api, tokens["alice"], "conversationId=quorum-inbox", "")
			require.Equal(c, http.StatusOK, status)
			require.Len(c, page.Approvals, 1)
			got = page.Approvals[0]
			require.NotNil(c, got.Votes)
			require.Len(c, got.Votes.Cast, casts)
		}, waitFor, 50*time.Millisecond)
		v, err := st.client.QueryWorkflow(context.Background(), write.WorkflowID, "", contract.PendingQuery)
		require.NoError(t, err)
		var pending []protocol.PendingApproval
		require.NoError(t, v.Get(&pending))
		require.Len(t, pending, 1)
		require.Equal(t, pending[0].Deciders, got.Deciders)
		require.Equal(t, pending[0].Votes, got.Votes)
		return got
	}
	before := inboxSays(0)
	require.Equal(t, []string{"alice", "bob", "carol"}, before.Deciders)
	require.Equal(t, 2, before.Votes.Quorum)
	require.Equal(t, []string{"alice", "bob", "carol"}, before.Votes.MayVote)

	b := newBrowser(t)
	b.do(chromedp.Navigate(api.URL + "/inbox"))
	useToken := func(principal string) {
		b.do(chromedp.SetValue(chromedp.CSS(`[data-testid="api-token"]`), tokens[principal]))
		require.True(t, eval[bool](b, `document.querySelector('[data-testid="api-token"]').dispatchEvent(new Event('change'))`))
	}
	useToken("alice")
	row := fmt.Sprintf(`[data-testid="approval"][data-request-id=%q]`, write.RequestID)
	votes := jsQuote(row + ` [data-testid="approval-votes"]`)
	b.waitUntil(`document.querySelector(` + votes + `)?.textContent === "votes: 0 of 2 approvals · may still vote: alice, bob, carol"`)

	b.do(chromedp.Click(chromedp.CSS(row + ` [data-testid="approve"]`)))
	b.waitUntil(`document.querySelector(` + jsQuote(row+` [data-testid="approval-status"]`) + `).textContent.startsWith("vote recorded, 1 of 2 approvals")`)
	b.waitUntil(`document.querySelector(` + votes + `)?.textContent === "votes: 1 of 2 approvals · alice approved · may still vote: bob, carol"`)
	b.screenshot("inbox-quorum-one-of-two")
	after := inboxSays(1)
	require.Equal(t, "alice", after.Votes.Cast[0].By)
	require.Equal(t, []string{"bob", "carol"}, after.Votes.MayVote)
	_, metrics := send(t, http.MethodGet, api.URL+"/metrics", "Bearer "+tokens["carol"], "")
	require.Regexp(t, `(?m)^tollgate_api_pending_queries_total 0$`, metrics, "the inbox asked no turn")

	useToken("bob")
	b.do(chromedp.Click(chromedp.CSS(row + ` [data-testid="approve"]`)))
	b.waitUntil(count(`[data-testid="decided-approval"][data-request-id=`+jsQuote(write.RequestID)+`]`) + ` === 1`)
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, "bob", ofType(events, protocol.EventApprovalDecision)[0].By)
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write ok", "call_0_2 Bash ok"}, resultStatuses(ofType(events, protocol.EventToolResult)[0].ToolResults))
}
