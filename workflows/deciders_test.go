package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

func TestThePolicyNamesWhoMayDecideAndCanRequireASecondPerson(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{
		{Tool: protocol.ToolBash, Require: RequireAlways, Deciders: []string{"lead", DeciderRolePrefix + "admin"}},
		{Tool: protocol.ToolWrite, Require: RequireAlways, SecondPerson: true},
	}
	h := newHarness(t, settings, calls(
		call("b", "Bash", `{"command":"make deploy"}`),
		call("w", "Write", `{"file_path":"a","content":"b"}`),
	))
	refused := map[string]*updateOutcome{}
	var pendingAfterRefusals []protocol.PendingApproval
	h.env.RegisterDelayedCallback(func() {
		bash, write := h.requestID("Bash"), h.requestID("Write")
		refused["bash by dev"] = h.decide(protocol.ApprovalDecision{RequestID: bash, Decision: protocol.DecisionApprove, Principal: "dev", Role: "approve"})
		h.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: bash, Decision: protocol.DecisionApprove}) // names nobody: "temporal"
		refused["write by its sender"] = h.decide(protocol.ApprovalDecision{RequestID: write, Decision: protocol.DecisionApprove, Principal: "dev", Role: "approve"})
		refused["write by nobody"] = h.decide(protocol.ApprovalDecision{RequestID: write, Decision: protocol.DecisionApprove})
	}, time.Minute)
	var allowed []*updateOutcome
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(contract.PendingQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&pendingAfterRefusals))
		allowed = append(allowed,
			h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove, Principal: "root", Role: "admin"}),
			h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionDecline, Principal: "ops", Role: "approve"}))
	}, 2*time.Minute)
	in := userTurn("deploy")
	in.Sender = "dev"

	out := h.runTurn(in)

	require.Len(t, pendingAfterRefusals, 2, "no refused decision was taken, nor the signal of a Temporal client that names nobody")
	for name, o := range refused {
		require.Equal(t, protocol.RejectForbidden, contract.RejectionReason(o.rejected), "%s: %v", name, o.rejected)
	}
	require.ErrorContains(t, refused["bash by dev"].rejected, `Bash calls are decided only by lead, role:admin, not by "dev"`)
	require.ErrorContains(t, refused["write by its sender"].rejected, `Write calls need a second person: "dev" sent the message`)
	require.ErrorContains(t, refused["write by nobody"].rejected, "decide with an API token")
	for _, o := range allowed {
		require.NoError(t, o.rejected)
	}
	by := map[string]string{}
	for _, e := range ofType(out.Events, protocol.EventApprovalDecision) {
		by[e.ToolCallID] = e.By + " " + e.Role
	}
	require.Equal(t, map[string]string{"b": "root admin", "w": "ops approve"}, by)
	require.Equal(t, []string{"Bash"}, h.ranTools())
}

// A role:NAME decider names a team role of the decision (Teams) as it
// names its Role; a signal's teams are trusted like its principal.
func TestARoleDeciderTakesADecisionWhoseTeamsNameIt(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{
		{Tool: protocol.ToolBash, Require: RequireAlways, Deciders: []string{DeciderRolePrefix + "oncall"}},
		{Tool: protocol.ToolWrite, Require: RequireAlways, Deciders: []string{DeciderRolePrefix + "finance"}},
	}
	h := newHarness(t, settings, calls(
		call("b", "Bash", `{"command":"make deploy"}`),
		call("w", "Write", `{"file_path":"a","content":"b"}`),
	))
	var refused, allowed *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		refused = h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove, Principal: "carol", Role: "approve", Teams: []string{"finance"}})
		allowed = h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionApprove, Principal: "carol", Role: "approve", Teams: []string{"finance"}})
		h.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove, Principal: "erin", Teams: []string{"oncall"}})
	}, time.Minute)
	in := userTurn("deploy")
	in.Sender = "dev"

	out := h.runTurn(in)

	require.Equal(t, protocol.RejectForbidden, contract.RejectionReason(refused.rejected), "%v", refused.rejected)
	require.ErrorContains(t, refused.rejected, `Bash calls are decided only by role:oncall, not by "carol"`)
	require.NoError(t, allowed.rejected)
	by := map[string]string{}
	for _, e := range ofType(out.Events, protocol.EventApprovalDecision) {
		by[e.ToolCallID] = e.By + " " + e.Role
	}
	require.Equal(t, map[string]string{"b": "erin ", "w": "carol approve"}, by)
	require.ElementsMatch(t, []string{"Bash", "Write"}, h.ranTools())
}

// A signed link names no one: under second_person it cannot show that its
// holder is not the sender, so its decision is refused; elsewhere it
// decides as before. (Settings recorded before LinksNotSecondPerson take
// it, as they did: the replay corpus holds them.)
func TestASignedLinkCannotBeTheSecondPerson(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{
		{Tool: protocol.ToolBash, Require: RequireAlways},
		{Tool: protocol.ToolWrite, Require: RequireAlways, SecondPerson: true},
	}
	h := newHarness(t, settings, calls(
		call("b", "Bash", `{"command":"make deploy"}`),
		call("w", "Write", `{"file_path":"a","content":"b"}`),
	))
	var bash, write *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		bash = h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove, Principal: protocol.PrincipalLink})
		write = h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionApprove, Principal: protocol.PrincipalLink})
	}, time.Minute)
	in := userTurn("deploy")
	in.Sender = "dev"

	out := h.runTurn(in)

	require.NoError(t, bash.rejected, "a link decides a call that needs no second person")
	require.Equal(t, protocol.RejectForbidden, contract.RejectionReason(write.rejected))
	require.ErrorContains(t, write.rejected, "a signed link names no one")
	require.Equal(t, []string{"Bash"}, h.ranTools(), "the Write timed out")
	require.True(t, out.Events[len(out.Events)-1].Type == protocol.EventFinish)
}
