package workflows

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// quorumSettings ask two approvals of distinct deciders for Bash.
func quorumSettings(r Rule) Settings {
	s := testSettings()
	s.ApprovalTimeout = 10 * time.Minute
	r.Tool, r.Require = protocol.ToolBash, RequireAlways
	s.Rules = []Rule{r}
	return s
}

func vote(id, by, decision string) protocol.ApprovalDecision {
	return protocol.ApprovalDecision{RequestID: id, Decision: decision, Principal: by, Role: "approve"}
}

// rowsByID are the ledger's rows by their ids.
func rowsByID(t *testing.T, l *auditdb.Ledger) map[string]audit.Record {
	t.Helper()
	page, err := l.List(context.Background(), auditdb.Filter{Limit: auditdb.MaxLimit})
	require.NoError(t, err)
	rows := map[string]audit.Record{}
	for _, r := range page.Records {
		rows[r.ID] = r
	}
	return rows
}

func TestAQuorumCallRunsOnlyAfterTwoDistinctApprovalsAndRefusesASecondVoteByTheSamePerson(t *testing.T) {
	settings := quorumSettings(Rule{Deciders: []string{"alice", "bob", "carol", "dev"}, Quorum: 2, SecondPerson: true})
	settings.Audit = true
	h := newHarness(t, settings, calls(call("b", "Bash", `{"command":"make deploy"}`)))
	ledger, err := auditdb.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { ledger.Close() })
	h.env.RegisterActivity(&activities.Auditor{Ledger: ledger})
	var first, again, edited, remembered, bySender, second *updateOutcome
	var pending []protocol.PendingApproval
	var waitingRow audit.Record
	ranBeforeSecond := -1
	h.env.RegisterDelayedCallback(func() {
		id := h.requestID("Bash")
		first = h.decide(vote(id, "alice", protocol.DecisionApprove))
		again = h.decide(vote(id, "alice", protocol.DecisionApprove))
		edited = h.decide(protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Principal: "bob", Arguments: `{"command":"make"}`})
		remembered = h.decide(protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Principal: "bob", Remember: protocol.RememberConversation})
		bySender = h.decide(vote(id, "dev", protocol.DecisionApprove))
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(contract.PendingQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&pending))
		waitingRow = rowsByID(t, ledger)[h.requestID("Bash")]
	}, 90*time.Second)
	h.env.RegisterDelayedCallback(func() {
		ranBeforeSecond = len(h.ranTools())
		second = h.decide(vote(h.requestID("Bash"), "bob", protocol.DecisionApprove))
	}, 2*time.Minute)
	in := userTurn("deploy")
	in.Sender = "dev"

	out := h.runTurn(in)

	require.NoError(t, first.rejected)
	require.True(t, first.result.Accepted && first.result.Pending, "the first vote is taken and the call still waits")
	require.Contains(t, first.result.Message, "vote recorded, 1 of 2 approvals")
	require.Equal(t, protocol.RejectVoted, contract.RejectionReason(again.rejected))
	require.ErrorContains(t, again.rejected, `"alice" has voted on it already`)
	require.Equal(t, protocol.RejectInvalid, contract.RejectionReason(edited.rejected))
	require.ErrorContains(t, edited.rejected, "votes must be on the same arguments")
	require.Equal(t, protocol.RejectInvalid, contract.RejectionReason(remembered.rejected))
	require.ErrorContains(t, remembered.rejected, "never stands in for one")
	require.Equal(t, protocol.RejectForbidden, contract.RejectionReason(bySender.rejected))
	require.ErrorContains(t, bySender.rejected, "need a second person", "second_person applies to each vote")

	require.Len(t, pending, 1)
	require.Equal(t, []string{"alice", "bob", "carol", "dev"}, pending[0].Deciders)
	require.Equal(t, 2, pending[0].Votes.Quorum)
	require.Equal(t, []string{"bob", "carol"}, pending[0].Votes.MayVote, "nor the sender, under second_person")
	require.Len(t, pending[0].Votes.Cast, 1)
	require.Equal(t, "alice", pending[0].Votes.Cast[0].By)
	// The call's ledger row, which GET /approvals lists, says the same
	// after the vote.
	require.Equal(t, audit.StageAsked, waitingRow.Stage)
	requireStanding(t, pending[0], waitingRow)

	require.Zero(t, ranBeforeSecond, "one approval of two runs nothing")
	require.NoError(t, second.rejected)
	require.False(t, second.result.Pending, "the second approval decides")
	require.Equal(t, []string{"Bash"}, h.ranTools())

	req := findEvent(t, out.Events, protocol.EventApprovalRequest)
	require.Equal(t, 2, req.Votes.Quorum)
	require.Empty(t, req.Votes.Cast)
	votes := ofType(out.Events, protocol.EventApprovalVote)
	require.Len(t, votes, 2)
	require.Equal(t, "alice", votes[0].By)
	require.Equal(t, 1, votes[0].Votes.Approvals())
	require.Equal(t, "bob", votes[1].By)
	decision := findEvent(t, out.Events, protocol.EventApprovalDecision)
	require.Equal(t, protocol.DecisionApprove, decision.Decision)
	require.Equal(t, "bob", decision.By, "the vote that reached the quorum")

	rows := rowsByID(t, ledger)
	require.Len(t, rows, 3, "the call's row and one a vote")
	call := rows[req.RequestID]
	require.Equal(t, audit.OutcomeOK, call.Outcome)
	require.Equal(t, "bob", call.Principal)
	require.Contains(t, call.Votes, `"quorum":2`, "the decision keeps the votes that made it")
	for _, voter := range []string{"alice", "bob"} {
		r := rows["vote:"+req.RequestID+":"+voter]
		require.Equal(t, DecidedByVote, r.DecidedBy, voter)
		require.Equal(t, voter, r.Principal)
		require.Equal(t, protocol.DecisionApprove, r.Decision)
		require.Equal(t, "b", r.ToolCallID)
		require.Empty(t, r.Votes+r.Deciders, "a vote's row is not a call's")
	}
}

// requireStanding requires that the ledger's row of a waiting call says
// who may decide it and where its votes stand as the pending query does.
func requireStanding(t *testing.T, want protocol.PendingApproval, row audit.Record) {
	t.Helper()
	var got protocol.PendingApproval
	if row.Deciders != "" {
		require.NoError(t, json.Unmarshal([]byte(row.Deciders), &got.Deciders))
	}
	if row.Votes != "" {
		require.NoError(t, json.Unmarshal([]byte(row.Votes), &got.Votes))
	}
	require.Equal(t, want.Deciders, got.Deciders)
	if want.Votes != nil {
		require.NotNil(t, got.Votes)
		require.Equal(t, want.Votes.Quorum, got.Votes.Quorum)
		require.Equal(t, want.Votes.Declines, got.Votes.Declines)
		require.Equal(t, want.Votes.MayVote, got.Votes.MayVote)
		require.Len(t, got.Votes.Cast, len(want.Votes.Cast))
		for i, v := range want.Votes.Cast {
			require.Equal(t, v.By, got.Votes.Cast[i].By)
			require.Equal(t, v.Decision, got.Votes.Cast[i].Decision)
			require.True(t, v.At.Equal(got.Votes.Cast[i].At))
		}
	} else {
		require.Nil(t, got.Votes)
	}
}

func TestOneDeclineDeclinesAQuorumCallUnlessTheRuleAsksForMore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		declines int
		voters   []string
		declined bool
	}{
		{"one decline declines", 0, []string{"alice"}, true},
		{"declines: 2 needs two", 2, []string{"alice"}, false},
		{"declines: 2 declines on the second", 2, []string{"alice", "bob"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, quorumSettings(Rule{Quorum: 2, Declines: tc.declines}), calls(call("b", "Bash", `{"command":"make deploy"}`)))
			h.env.RegisterDelayedCallback(func() {
				for _, v := range tc.voters {
					o := h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionDecline, Principal: v, Reason: "not now"})
					require.NoError(t, o.rejected)
				}
			}, time.Minute)

			out := h.runTurn(userTurn("deploy"))

			require.Empty(t, h.ranTools())
			decision := findEvent(t, out.Events, protocol.EventApprovalDecision)
			if tc.declined {
				require.Equal(t, protocol.DecisionDecline, decision.Decision)
				require.Equal(t, "not now", decision.Reason)
			} else {
				require.Equal(t, protocol.DecisionTimeout, decision.Decision, "one decline of two needed: the timer decides")
			}
		})
	}
}

func TestAQuorumCallWithOneApprovalOfTwoTimesOut(t *testing.T) {
	h := newHarness(t, quorumSettings(Rule{Quorum: 2}), calls(call("b", "Bash", `{"command":"make deploy"}`)))
	var byLink, byNobody *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		id := h.requestID("Bash")
		require.NoError(t, h.decide(vote(id, "alice", protocol.DecisionApprove)).rejected)
		// A signed link, and a signal that names nobody, name no person:
		// alice, who holds the notice's link too, must not count twice.
		byLink = h.decide(vote(id, protocol.PrincipalLink, protocol.DecisionApprove))
		byNobody = h.decide(vote(id, protocol.PrincipalTemporal, protocol.DecisionApprove))
	}, time.Minute)

	out := h.runTurn(userTurn("deploy"))

	require.Empty(t, h.ranTools())
	for _, o := range []*updateOutcome{byLink, byNobody} {
		require.Equal(t, protocol.RejectForbidden, contract.RejectionReason(o.rejected))
		require.ErrorContains(t, o.rejected, "names nobody")
	}
	require.Equal(t, protocol.DecisionTimeout, findEvent(t, out.Events, protocol.EventApprovalDecision).Decision)
	require.Len(t, ofType(out.Events, protocol.EventApprovalVote), 1)
}

func TestAQuorumRulesCallIsNeverAnsweredByAGrant(t *testing.T) {
	settings := quorumSettings(Rule{Quorum: 2})
	h := newHarness(t, settings, calls(call("b", "Bash", `{"command":"make deploy"}`)))
	in := userTurn("deploy")
	// A grant made under another rule, earlier in the conversation.
	in.Grants = []contract.Grant{{ID: "grant-1", Tool: protocol.ToolBash, Decision: protocol.DecisionApprove, By: "alice"}}

	out := h.runTurn(in)

	require.Empty(t, h.ranTools(), "the call asked, and nobody voted")
	require.Equal(t, protocol.DecisionTimeout, findEvent(t, out.Events, protocol.EventApprovalDecision).Decision)
}

func TestEscalationLetsOncallDecideOnlyAfterHalfTheTimeoutAndTellsThem(t *testing.T) {
	var mu sync.Mutex
	var notices []activities.Notice
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var n activities.Notice
		require.NoError(t, json.NewDecoder(r.Body).Decode(&n))
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n)
	}))
	defer srv.Close()
	settings := quorumSettings(Rule{Deciders: []string{"alice"}, Escalate: []policy.Escalation{
		{AfterPercent: 50, To: []string{DeciderRolePrefix + "oncall", "bob"}},
		{After: 8 * time.Minute, To: []string{"carol"}},
	}})
	settings.Notify, settings.Audit = true, true
	h := newHarness(t, settings, calls(call("b", "Bash", `{"command":"make deploy"}`)))
	RegisterNotifier(h.env, &activities.Notifier{URL: srv.URL})
	ledger, err := auditdb.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { ledger.Close() })
	h.env.RegisterActivity(&activities.Auditor{Ledger: ledger})
	var early, late *updateOutcome
	var pendingLate []protocol.PendingApproval
	var rowLate audit.Record
	h.env.RegisterDelayedCallback(func() {
		early = h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove, Principal: "olga", Role: "oncall"})
	}, 4*time.Minute)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(contract.PendingQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&pendingLate))
		rowLate = rowsByID(t, ledger)[h.requestID("Bash")]
		late = h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove, Principal: "olga", Role: "oncall"})
	}, 6*time.Minute)

	out := h.runTurn(userTurn("deploy"))

	require.Equal(t, protocol.RejectForbidden, contract.RejectionReason(early.rejected), "before half the timeout only alice decides")
	require.NoError(t, late.rejected)
	require.Equal(t, []string{"Bash"}, h.ranTools())
	require.Len(t, pendingLate, 1)
	require.Equal(t, []string{"alice", "role:oncall", "bob"}, pendingLate[0].Deciders)
	requireStanding(t, pendingLate[0], rowLate)
	req := findEvent(t, out.Events, protocol.EventApprovalRequest)
	require.Equal(t, []string{"alice"}, req.Deciders)
	hops := ofType(out.Events, protocol.EventApprovalEscalated)
	require.Len(t, hops, 1, "decided before the second step")
	require.Equal(t, []string{"role:oncall", "bob"}, hops[0].Escalated)
	require.Equal(t, []string{"alice", "role:oncall", "bob"}, hops[0].Deciders)
	require.Equal(t, "olga", findEvent(t, out.Events, protocol.EventApprovalDecision).By)

	mu.Lock()
	defer mu.Unlock()
	var kinds []string
	for _, n := range notices {
		kinds = append(kinds, n.Kind)
	}
	require.Equal(t, []string{activities.NoticeApprovalRequest, activities.NoticeEscalation}, kinds)
	require.Equal(t, []string{"role:oncall", "bob"}, notices[1].EscalatedTo)
	require.Equal(t, req.RequestID, notices[1].RequestID)

	row := rowsByID(t, ledger)["escalation:"+req.RequestID+":1"]
	require.Equal(t, DecidedByEscalation, row.DecidedBy)
	require.Contains(t, row.Reason, "role:oncall, bob may decide too")
}

func TestEscalationStepsPassInOrderWhileNobodyDecides(t *testing.T) {
	settings := quorumSettings(Rule{Deciders: []string{"alice"}, Quorum: 0, Escalate: []policy.Escalation{
		{AfterPercent: 50, To: []string{"bob"}},
		{After: 8 * time.Minute, To: []string{"carol"}},
	}})
	h := newHarness(t, settings, calls(call("b", "Bash", `{"command":"make deploy"}`)))

	out := h.runTurn(userTurn("deploy"))

	hops := ofType(out.Events, protocol.EventApprovalEscalated)
	require.Len(t, hops, 2)
	require.Equal(t, []string{"alice", "bob"}, hops[0].Deciders)
	require.Equal(t, []string{"alice", "bob", "carol"}, hops[1].Deciders)
	require.Equal(t, protocol.DecisionTimeout, findEvent(t, out.Events, protocol.EventApprovalDecision).Decision)
}

func TestAStandInsVoteCountsForTheOneTheyStandInForAndNeitherVotesAgain(t *testing.T) {
	settings := quorumSettings(Rule{Deciders: []string{"alice", "carol"}, Quorum: 2})
	settings.Audit = true
	h := newHarness(t, settings, calls(call("b", "Bash", `{"command":"make deploy"}`)))
	ledger, err := auditdb.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { ledger.Close() })
	h.env.RegisterActivity(&activities.Auditor{Ledger: ledger})
	var forAlice, alice, bobAgain, carol *updateOutcome
	var pending []protocol.PendingApproval
	h.env.RegisterDelayedCallback(func() {
		id := h.requestID("Bash")
		standIn := vote(id, "bob", protocol.DecisionApprove)
		standIn.OnBehalfOf = "alice"
		forAlice = h.decide(standIn)
		alice = h.decide(vote(id, "alice", protocol.DecisionApprove))
		bobAgain = h.decide(standIn)
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(contract.PendingQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&pending))
	}, 90*time.Second)
	h.env.RegisterDelayedCallback(func() {
		carol = h.decide(vote(h.requestID("Bash"), "carol", protocol.DecisionApprove))
	}, 2*time.Minute)

	out := h.runTurn(userTurn("deploy"))

	require.NoError(t, forAlice.rejected, "bob decides where alice may, as her stand-in")
	require.True(t, forAlice.result.Pending)
	require.Equal(t, protocol.RejectVoted, contract.RejectionReason(alice.rejected), "alice's stand-in voted for her")
	require.Equal(t, protocol.RejectVoted, contract.RejectionReason(bobAgain.rejected), "bob voted already, for alice")
	require.ErrorContains(t, bobAgain.rejected, `"bob" has voted on it already`)
	require.Len(t, pending, 1)
	require.Equal(t, []string{"carol"}, pending[0].Votes.MayVote)
	require.NoError(t, carol.rejected)
	require.False(t, carol.result.Pending)
	require.Equal(t, []string{"Bash"}, h.ranTools())

	votes := ofType(out.Events, protocol.EventApprovalVote)
	require.Len(t, votes, 2)
	require.Equal(t, "bob", votes[0].By)
	require.Equal(t, "alice", votes[0].OnBehalfOf)
	req := findEvent(t, out.Events, protocol.EventApprovalRequest)
	row := rowsByID(t, ledger)["vote:"+req.RequestID+":bob"]
	require.Equal(t, "alice", row.OnBehalfOf, "the ledger says bob for alice")
}
