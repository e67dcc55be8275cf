package workflows

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
)

// grantDecisions are the approval_decision events a grant made, in order.
func grantDecisions(events []Event) []Event {
	var out []Event
	for _, e := range events {
		if e.Type == EventApprovalDecision && e.Grant != "" {
			out = append(out, e)
		}
	}
	return out
}

func bashCalls(commands ...string) activities.ModelOutput {
	var cs []activities.ToolCall
	for i, c := range commands {
		cs = append(cs, call("b"+string(rune('0'+i)), "Bash", `{"command":"`+c+`"}`))
	}
	return calls(cs...)
}

func TestAGrantWithUsesDecidesThatManyCallsThenTheCallAsks(t *testing.T) {
	h := newHarness(t, testSettings(), bashCalls("make", "make", "make"))
	in := userTurn("go")
	in.Grants = []Grant{{ID: "g1", Tool: "Bash", Decision: DecisionApprove, Uses: 3, Used: 1}}
	h.env.RegisterDelayedCallback(func() {
		h.decide(ApprovalDecision{RequestID: h.requestID("Bash"), Decision: DecisionApprove})
	}, time.Minute)

	out := h.runTurn(in)

	used := grantDecisions(out.Events)
	require.Len(t, used, 2, "two uses were left")
	require.Equal(t, 1, *used[0].GrantUsesLeft)
	require.Equal(t, 0, *used[1].GrantUsesLeft)
	require.Nil(t, used[0].GrantExpiresAt)
	require.Len(t, ofType(out.Events, EventApprovalRequest), 1, "the third call asks")
	require.Equal(t, map[string]int{"g1": 2}, out.GrantsUsed)
	require.Equal(t, []string{"Bash", "Bash", "Bash"}, h.ranTools())
}

func TestAGrantEndsAtItsExpiry(t *testing.T) {
	first := calls(call("b", "Bash", `{"command":"make"}`), call("w", "Write", `{"file_path":"a","content":"b"}`))
	h := newHarness(t, testSettings(), first, bashCalls("make"))
	in := userTurn("go")
	ends := h.env.Now().Add(90 * time.Second)
	in.Grants = []Grant{{ID: "g1", Tool: "Bash", Decision: DecisionApprove, ExpiresAt: &ends}}
	// The Write is decided after the grant has ended; the next Bash asks.
	h.env.RegisterDelayedCallback(func() {
		h.decide(ApprovalDecision{RequestID: h.requestID("Write"), Decision: DecisionApprove})
	}, 2*time.Minute)
	h.env.RegisterDelayedCallback(func() {
		h.decide(ApprovalDecision{RequestID: h.requestID("Bash"), Decision: DecisionDecline})
	}, 3*time.Minute)

	out := h.runTurn(in)

	used := grantDecisions(out.Events)
	require.Len(t, used, 1)
	require.True(t, ends.Equal(*used[0].GrantExpiresAt))
	require.Nil(t, used[0].GrantUsesLeft)
	asked := ofType(out.Events, EventApprovalRequest)
	require.Len(t, asked, 2)
	require.Equal(t, "Bash", asked[1].ToolName, "past its expiry the grant's tool asks")
}

func TestAGrantWithAScopeDecidesOnlyTheCallsItAccepts(t *testing.T) {
	h := newHarness(t, testSettings(), bashCalls("git status", "rm -rf build"))
	in := userTurn("go")
	in.Grants = []Grant{{ID: "g1", Tool: "Bash", Decision: DecisionApprove, When: `args.command.startsWith("git ")`}}
	h.env.RegisterDelayedCallback(func() {
		h.decide(ApprovalDecision{RequestID: h.requestID("Bash"), Decision: DecisionDecline})
	}, time.Minute)

	out := h.runTurn(in)

	used := grantDecisions(out.Events)
	require.Len(t, used, 1)
	require.Equal(t, "b0", used[0].ToolCallID, "git status")
	asked := ofType(out.Events, EventApprovalRequest)
	require.Len(t, asked, 1)
	require.Equal(t, `{"command":"rm -rf build"}`, asked[0].Arguments)
	require.Equal(t, []string{"Bash"}, h.ranTools())
}

func TestADecisionMakesALimitedGrantAndABadScopeIsRefused(t *testing.T) {
	h := newHarness(t, testSettings(), bashCalls("git status"))
	var bad, good *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		id := h.requestID("Bash")
		bad = h.decide(ApprovalDecision{RequestID: id, Decision: DecisionApprove, Remember: RememberConversation, RememberWhen: `args.command.startsWith(`})
		good = h.decide(ApprovalDecision{RequestID: id, Decision: DecisionApprove, Remember: RememberConversation,
			RememberFor: "8h", RememberUses: 5, RememberWhen: `args.command.startsWith("git ")`})
	}, time.Minute)

	out := h.runTurn(userTurn("go"))

	require.ErrorContains(t, bad.rejected, "rememberWhen")
	require.Equal(t, RejectInvalid, RejectionReason(bad.rejected))
	require.NoError(t, good.rejected)
	require.Len(t, out.Grants, 1)
	g := out.Grants[0]
	require.Equal(t, 5, g.Uses)
	require.Equal(t, `args.command.startsWith("git ")`, g.When)
	require.NotNil(t, g.ExpiresAt)
	require.Equal(t, 8*time.Hour, g.ExpiresAt.Sub(g.CreatedAt))
}

func TestARememberLimitWithoutRememberIsBadInput(t *testing.T) {
	for _, d := range []ApprovalDecision{
		{RequestID: "r", Decision: DecisionApprove, RememberUses: 2},
		{RequestID: "r", Decision: DecisionApprove, Remember: RememberConversation, RememberFor: "soon"},
		{RequestID: "r", Decision: DecisionApprove, Remember: RememberConversation, RememberFor: "-1h"},
		{RequestID: "r", Decision: DecisionApprove, Remember: RememberConversation, RememberUses: -1},
	} {
		require.Error(t, d.Check(), "%+v", d)
	}
}

func TestAGrantScopeThatCostsTooMuchDecidesNothingAndTheCallAsks(t *testing.T) {
	items := `[` + strings.TrimSuffix(strings.Repeat("1,", 300_000), ",") + `]`
	h := newHarness(t, testSettings(), calls(
		call("b0", "Bash", `{"command":"make"}`),
		call("b1", "Bash", `{"command":"make","items":`+items+`}`),
		call("b2", "Bash", `{"command":"make","items":[1,2,3]}`),
	))
	in := userTurn("go")
	in.Grants = []Grant{
		// Saved before scopes had a cost limit: it would hold the workflow
		// task for seconds, past the SDK's deadlock detector.
		{ID: "g-costly", Tool: "Bash", Decision: DecisionApprove, When: nestedAll(7)},
		// Cheap on small arguments, past the limit on 300,000 items.
		{ID: "g-items", Tool: "Bash", Decision: DecisionApprove, When: `args.items.all(x, x > 0)`},
	}
	var refused *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		for _, e := range ofType(h.events(), EventApprovalRequest) {
			refused = h.decide(ApprovalDecision{RequestID: e.RequestID, Decision: DecisionApprove, Remember: RememberConversation, RememberWhen: nestedAll(6)})
			h.decide(ApprovalDecision{RequestID: e.RequestID, Decision: DecisionDecline})
		}
	}, time.Minute)

	out := h.runTurn(in)

	used := grantDecisions(out.Events)
	require.Len(t, used, 1)
	require.Equal(t, "b2", used[0].ToolCallID, "only the cheap scope on small arguments answers")
	asked := ofType(out.Events, EventApprovalRequest)
	require.Len(t, asked, 2)
	require.Equal(t, []string{"b0", "b1"}, []string{asked[0].ToolCallID, asked[1].ToolCallID})
	require.Equal(t, RejectInvalid, RejectionReason(refused.rejected))
	require.ErrorContains(t, refused.rejected, "past the limit of 500000 that one call may cost")
}
