package workflows

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// grantDecisions are the approval_decision events a grant made, in order.
func grantDecisions(events []protocol.Event) []protocol.Event {
	var out []protocol.Event
	for _, e := range events {
		if e.Type == protocol.EventApprovalDecision && e.Grant != "" {
			out = append(out, e)
		}
	}
	return out
}

func bashCalls(commands ...string) activities.ModelOutput {
	var cs []protocol.ToolCall
	for i, c := range commands {
		cs = append(cs, call("b"+string(rune('0'+i)), "Bash", `{"command":"`+c+`"}`))
	}
	return calls(cs...)
}

func TestAGrantWithUsesDecidesThatManyCallsThenTheCallAsks(t *testing.T) {
	h := newHarness(t, testSettings(), bashCalls("make", "make", "make"))
	in := userTurn("go")
	in.Grants = []contract.Grant{{ID: "g1", Tool: "Bash", Decision: protocol.DecisionApprove, Uses: 3, Used: 1}}
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove})
	}, time.Minute)

	out := h.runTurn(in)

	used := grantDecisions(out.Events)
	require.Len(t, used, 2, "two uses were left")
	require.Equal(t, 1, *used[0].GrantUsesLeft)
	require.Equal(t, 0, *used[1].GrantUsesLeft)
	require.Nil(t, used[0].GrantExpiresAt)
	require.Len(t, ofType(out.Events, protocol.EventApprovalRequest), 1, "the third call asks")
	require.Equal(t, map[string]int{"g1": 2}, out.GrantsUsed)
	require.Equal(t, []string{"Bash", "Bash", "Bash"}, h.ranTools())
}

func TestAGrantEndsAtItsExpiry(t *testing.T) {
	first := calls(call("b", "Bash", `{"command":"make"}`), call("w", "Write", `{"file_path":"a","content":"b"}`))
	h := newHarness(t, testSettings(), first, bashCalls("make"))
	in := userTurn("go")
	ends := h.env.Now().Add(90 * time.Second)
	in.Grants = []contract.Grant{{ID: "g1", Tool: "Bash", Decision: protocol.DecisionApprove, ExpiresAt: &ends}}
	// The Write is decided after the grant has ended; the next Bash asks.
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionApprove})
	}, 2*time.Minute)
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionDecline})
	}, 3*time.Minute)

	out := h.runTurn(in)

	used := grantDecisions(out.Events)
	require.Len(t, used, 1)
	require.True(t, ends.Equal(*used[0].GrantExpiresAt))
	require.Nil(t, used[0].GrantUsesLeft)
	asked := ofType(out.Events, protocol.EventApprovalRequest)
	require.Len(t, asked, 2)
	require.Equal(t, "Bash", asked[1].ToolName, "past its expiry the grant's tool asks")
}

func TestAGrantWithAScopeDecidesOnlyTheCallsItAccepts(t *testing.T) {
	h := newHarness(t, testSettings(), bashCalls("git status", "rm -rf build"))
	in := userTurn("go")
	in.Grants = []contract.Grant{{ID: "g1", Tool: "Bash", Decision: protocol.DecisionApprove, When: `args.command.startsWith("git ")`}}
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionDecline})
	}, time.Minute)

	out := h.runTurn(in)

	used := grantDecisions(out.Events)
	require.Len(t, used, 1)
	require.Equal(t, "b0", used[0].ToolCallID, "git status")
	asked := ofType(out.Events, protocol.EventApprovalRequest)
	require.Len(t, asked, 1)
	require.Equal(t, `{"command":"rm -rf build"}`, asked[0].Arguments)
	require.Equal(t, []string{"Bash"}, h.ranTools())
}

func TestADecisionMakesALimitedGrantAndABadScopeIsRefused(t *testing.T) {
	h := newHarness(t, testSettings(), bashCalls("git status"))
	var bad, good *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		id := h.requestID("Bash")
		bad = h.decide(protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Remember: protocol.RememberConversation, RememberWhen: `args.command.startsWith(`})
		good = h.decide(protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Remember: protocol.RememberConversation,
			RememberFor: "8h", RememberUses: 5, RememberWhen: `args.command.startsWith("git ")`})
	}, time.Minute)

	out := h.runTurn(userTurn("go"))

	require.ErrorContains(t, bad.rejected, "rememberWhen")
	require.Equal(t, protocol.RejectInvalid, contract.RejectionReason(bad.rejected))
	require.NoError(t, good.rejected)
	require.Len(t, out.Grants, 1)
	g := out.Grants[0]
	require.Equal(t, 5, g.Uses)
	require.Equal(t, `args.command.startsWith("git ")`, g.When)
	require.NotNil(t, g.ExpiresAt)
	require.Equal(t, 8*time.Hour, g.ExpiresAt.Sub(g.CreatedAt))
}

func TestARememberLimitWithoutRememberIsBadInput(t *testing.T) {
	for _, d := range []protocol.ApprovalDecision{
		{RequestID: "r", Decision: protocol.DecisionApprove, RememberUses: 2},
		{RequestID: "r", Decision: protocol.DecisionApprove, Remember: protocol.RememberConversation, RememberFor: "soon"},
		{RequestID: "r", Decision: protocol.DecisionApprove, Remember: protocol.RememberConversation, RememberFor: "-1h"},
		{RequestID: "r", Decision: protocol.DecisionApprove, Remember: protocol.RememberConversation, RememberUses: -1},
	} {
		require.Error(t, d.Check(), "%+v", d)
	}
}

// narrowingTurn is a turn sent by bob under rules that say who decides,
// with grants made before: bob's own for Write (second_person), alice's
// older one for Write, dev's for any Bash (made before Bash gained
// deciders), and ops's, in the admin role, for one Bash command.
func narrowingTurn(t *testing.T, level int) (*harness, TurnInput) {
	settings := testSettings()
	settings.beginAt = level
	settings.Rules = []Rule{
		{Tool: protocol.ToolWrite, Require: RequireAlways, SecondPerson: true},
		{Tool: protocol.ToolBash, Require: RequireAlways, Deciders: []string{"lead", DeciderRolePrefix + "admin"}},
	}
	h := newHarness(t, settings, calls(
		call("w", "Write", `{"file_path":"a","content":"b"}`),
		call("b0", "Bash", `{"command":"make"}`),
		call("b1", "Bash", `{"command":"make deploy"}`),
	))
	in := userTurn("ship it")
	in.Sender = "bob"
	in.Grants = []contract.Grant{
		{ID: "g-alice", Tool: "Write", Decision: protocol.DecisionApprove, By: "alice", Role: "approve"},
		{ID: "g-bob", Tool: "Write", Decision: protocol.DecisionApprove, By: "bob", Role: "approve"},
		{ID: "g-ops", Tool: "Bash", Decision: protocol.DecisionApprove, By: "ops", Role: "admin", Arguments: canonicalJSON(`{"command":"make"}`)},
		{ID: "g-dev", Tool: "Bash", Decision: protocol.DecisionApprove, By: "dev", Role: "approve"},
	}
	return h, in
}

func TestAGrantAnswersOnlyACallItsMakerMayDecideUnderTheRuleInForce(t *testing.T) {
	h, in := narrowingTurn(t, 0)
	var bobsOwn *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		bobsOwn = h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove, Principal: "dev", Role: "approve"})
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove, Principal: "lead", Role: "approve"})
	}, time.Minute)

	out := h.runTurn(in)

	by := map[string]string{}
	for _, e := range grantDecisions(out.Events) {
		by[e.ToolCallID] = e.Grant + " by " + e.By
	}
	require.Equal(t, map[string]string{"w": "g-alice by alice", "b0": "g-ops by ops"}, by,
		"bob's own grant may not answer his Write (second person), dev's may not answer a Bash (deciders); older grants whose makers may still decide do")
	asked := ofType(out.Events, protocol.EventApprovalRequest)
	require.Len(t, asked, 1)
	require.Equal(t, "b1", asked[0].ToolCallID, "no grant left answers make deploy")
	require.Equal(t, protocol.RejectForbidden, contract.RejectionReason(bobsOwn.rejected), "as dev's direct decision is refused")
	require.Equal(t, map[string]int{"g-alice": 1, "g-ops": 1}, out.GrantsUsed)
	require.Equal(t, []string{"Write", "Bash", "Bash"}, h.ranTools())
}

func TestATurnRecordedBeforeGrantsWereNarrowedLetsEveryGrantAnswer(t *testing.T) {
	h, in := narrowingTurn(t, 2) // grant-narrowed came after level 2
	h.env.OnGetVersion(patchGrantNarrowed, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)

	out := h.runTurn(in)

	by := map[string]string{}
	for _, e := range grantDecisions(out.Events) {
		by[e.ToolCallID] = e.Grant
	}
	require.Equal(t, map[string]string{"w": "g-bob", "b0": "g-dev", "b1": "g-dev"}, by, "the newest grant of each tool answered, as it did")
	require.Empty(t, ofType(out.Events, protocol.EventApprovalRequest))
}

func TestAGrantWhoseMakerMayStillDecideAsksForNoPatch(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{{Tool: protocol.ToolWrite, Require: RequireAlways, SecondPerson: true}}
	// A turn of level 3 or later asks for no patch at all; one of level 2
	// asks for this one only where it may change the answer.
	settings.beginAt = 2
	h := newHarness(t, settings, calls(call("w", "Write", `{"file_path":"a","content":"b"}`)))
	in := userTurn("write")
	in.Sender = "alice"
	in.Grants = []contract.Grant{{ID: "g-bob", Tool: "Write", Decision: protocol.DecisionApprove, By: "bob"}}
	h.env.OnGetVersion(patchGrantNarrowed, workflow.DefaultVersion, 1).Panic("asked for the grant-narrowed patch")

	out := h.runTurn(in)

	require.Len(t, grantDecisions(out.Events), 1, "bob's grant answers alice's call")
}

func TestAGrantForTheSameArgumentsComparesNumbersAsWritten(t *testing.T) {
	h := newHarness(t, testSettings(),
		calls(call("b0", "Bash", `{"command":"pay","amount":10000000000000000}`)),
		calls(call("b1", "Bash", `{"command":"pay","amount":10000000000000001}`), call("b2", "Bash", `{"amount":10000000000000000, "command":"pay"}`)),
	)
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove, Remember: protocol.RememberConversation, SameArguments: true})
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		var second string
		for _, e := range h.events() {
			if e.Type == protocol.EventApprovalRequest && e.ToolCallID == "b1" {
				second = e.RequestID
			}
		}
		require.NotEmpty(t, second, "10000000000000001 is not the amount approved")
		h.decide(protocol.ApprovalDecision{RequestID: second, Decision: protocol.DecisionDecline})
	}, 2*time.Minute)

	out := h.runTurn(userTurn("pay"))

	require.Equal(t, `{"amount":10000000000000000,"command":"pay"}`, out.Grants[0].Arguments, "the grant keeps the number as written")
	used := grantDecisions(out.Events)
	require.Len(t, used, 1)
	require.Equal(t, "b2", used[0].ToolCallID, "the same amount, keys in another order, is the same arguments")
	require.Len(t, ofType(out.Events, protocol.EventApprovalRequest), 2)
}

func TestCanonicalJSONKeepsNumbersAsWritten(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{`{"n":10000000000000000}`, `{"n":10000000000000001}`},
		{`{"n":1}`, `{"n":1.0}`},
		{`{"n":[1e2]}`, `{"n":[100]}`},
	} {
		require.NotEqual(t, canonicalJSON(c.a), canonicalJSON(c.b), "%s and %s", c.a, c.b)
		require.Equal(t, floatCanonicalJSON(c.a), floatCanonicalJSON(c.b), "before the patch, %s and %s were one", c.a, c.b)
	}
	require.Equal(t, `{"a":{"x":1.50,"y":"z"},"b":2}`, canonicalJSON(` { "b" : 2, "a": {"y":"z", "x": 1.50} }`))
	require.Equal(t, `not json`, canonicalJSON(`not json`))
	require.Equal(t, `{"a":1} {"b":2}`, canonicalJSON(`{"a":1} {"b":2}`), "two values are not one object")
}

func TestAGrantScopeThatCostsTooMuchDecidesNothingAndTheCallAsks(t *testing.T) {
	h := newHarness(t, testSettings(), calls(
		call("b0", "Bash", `{"command":"MAKE"}`),
		call("b1", "Bash", `{"command":"`+strings.Repeat("a", 60_000)+`"}`),
		call("b2", "Bash", `{"command":"make"}`),
	))
	in := userTurn("go")
	in.Grants = []contract.Grant{
		// Saved before scopes had a cost limit: it would hold the workflow
		// task for seconds, past the SDK's deadlock detector.
		{ID: "g-costly", Tool: "Bash", Decision: protocol.DecisionApprove, When: nestedAll(7)},
		// Cheap on a short command, past the limit on 60,000 bytes (Go's
		// regexp takes time in the pattern's compiled size), which it
		// would accept.
		{ID: "g-pattern", Tool: "Bash", Decision: protocol.DecisionApprove, When: `args.command.matches("^[a-z]{1,100}")`},
	}
	var refused *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		for _, e := range ofType(h.events(), protocol.EventApprovalRequest) {
			refused = h.decide(protocol.ApprovalDecision{RequestID: e.RequestID, Decision: protocol.DecisionApprove, Remember: protocol.RememberConversation, RememberWhen: nestedAll(6)})
			h.decide(protocol.ApprovalDecision{RequestID: e.RequestID, Decision: protocol.DecisionDecline})
		}
	}, time.Minute)

	out := h.runTurn(in)

	used := grantDecisions(out.Events)
	require.Len(t, used, 1)
	require.Equal(t, "b2", used[0].ToolCallID, "only the cheap scope on a short command answers")
	asked := ofType(out.Events, protocol.EventApprovalRequest)
	require.Len(t, asked, 2)
	require.Equal(t, []string{"b0", "b1"}, []string{asked[0].ToolCallID, asked[1].ToolCallID})
	require.Equal(t, protocol.RejectInvalid, contract.RejectionReason(refused.rejected))
	require.ErrorContains(t, refused.rejected, "past the limit of 500000 that one call may cost")
}
