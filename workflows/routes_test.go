package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// TestEveryRouteTakesItsCalls walks the route table: each case is a call
// and what the turn knows of it, and the route it takes. Each route has a
// case of its own, and the cases where an earlier route wins show the
// order. A new route is a new entry in routes and a case here.
func TestEveryRouteTakesItsCalls(t *testing.T) {
	protected := vetting{Check: check{Required: true}}
	always := vetting{Check: check{Required: true, Always: true}}
	call := protocol.ToolCall{ID: "c1", Name: protocol.ToolBash, Arguments: `{"command":"ls"}`}
	notObject := protocol.ToolCall{ID: "c1", Name: protocol.ToolBash, Arguments: `["ls"]`}
	grant := &contract.Grant{ID: "grant-1", Tool: protocol.ToolBash, Decision: protocol.DecisionApprove}
	// base is a call of an offered tool, the policy protects it, in a
	// batch of the strict gate, of a turn not stopped or bypassed.
	base := routeInput{call: call, vetting: protected, offered: true}
	with := func(change func(*routeInput)) routeInput {
		in := base
		change(&in)
		return in
	}
	cases := []struct {
		name  string
		in    routeInput
		route *route
	}{
		{"a stopped turn's call", with(func(in *routeInput) { in.interrupted = true }), routeInterrupted},
		{"a stopped turn's call of no tool", with(func(in *routeInput) { in.interrupted, in.offered = true, false }), routeInterrupted},
		{"a call of a tool the loop does not offer", with(func(in *routeInput) { in.offered = false }), routeUnknownTool},
		{"a call whose arguments vetting refused", with(func(in *routeInput) { in.vetting.Refused = "the path leaves the workspace" }), routeRefused},
		{"a call whose arguments are no JSON object", with(func(in *routeInput) { in.call = notObject }), routeNotObject},
		{"a refused call whose arguments are no JSON object", with(func(in *routeInput) { in.call, in.vetting.Refused = notObject, "not an object" }), routeRefused},
		{"a bypassed call", with(func(in *routeInput) { in.bypass = true }), routeBypassed},
		{"a bypassed call with a grant", with(func(in *routeInput) { in.bypass, in.grant = true, grant }), routeBypassed},
		{"a call no rule protects", with(func(in *routeInput) { in.vetting = vetting{} }), routeNoRule},
		{"a bypassed call no rule protects", with(func(in *routeInput) { in.bypass, in.vetting = true, vetting{} }), routeBypassed},
		{"a client tool's call no rule protects", with(func(in *routeInput) { in.clientTool, in.vetting = true, vetting{} }), routeNoRule},
		{"a protected call a grant answers", with(func(in *routeInput) { in.grant = grant }), routeGranted},
		{"a protected call contained in the sandbox", with(func(in *routeInput) { in.contained = true }), routeContained},
		{"a contained call a grant answers", with(func(in *routeInput) { in.contained, in.grant = true, grant }), routeGranted},
		{"a bypassed contained call", with(func(in *routeInput) { in.contained, in.bypass = true, true }), routeBypassed},
		{"a protected call", base, routeAsk},
		{"a bypassed call a rule protects always", with(func(in *routeInput) { in.bypass, in.vetting = true, always }), routeAsk},
		{"a protected call of a client tool", with(func(in *routeInput) { in.clientTool = true }), routeAsk},
		{"a call the policy could not decide", with(func(in *routeInput) { in.vetting.Check.Problem = "the rule failed" }), routeAsk},
		{"a frozen bypassed call", with(func(in *routeInput) { in.bypass, in.vetting.Frozen = true, true }), routeAsk},
		{"a frozen call with a grant", with(func(in *routeInput) { in.grant, in.vetting.Frozen = grant, true }), routeAsk},
		{"a frozen contained call", with(func(in *routeInput) { in.contained, in.vetting.Frozen = true, true }), routeAsk},
		{"a frozen bypassed call no rule protects", with(func(in *routeInput) { in.bypass, in.vetting = true, vetting{Frozen: true} }), routeNoRule},
	}
	tested := map[*route]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.route.name, routeOf(c.in).name)
		})
		tested[c.route] = true
	}
	for _, r := range routes {
		require.True(t, tested[r], "route %q has no case", r.name)
	}
}

// TestOnlyTheAskingRoutesLookForAGrant: looking for a grant uses it (and
// may record a SideEffect), so the gate does so only for a call that
// would ask, or that its sandboxed run would let through (a remembered
// decline holds for it), and a grant found takes the call to routeGranted.
func TestOnlyTheAskingRoutesLookForAGrant(t *testing.T) {
	for _, r := range routes {
		require.Equal(t, r == routeAsk || r == routeContained, r.grantable, "route %q", r.name)
	}
	in := routeInput{call: protocol.ToolCall{Name: protocol.ToolBash, Arguments: `{}`}, vetting: vetting{Check: check{Required: true}}, offered: true}
	require.Equal(t, routeAsk.name, routeOf(in).name)
	in.grant = &contract.Grant{ID: "grant-1", Decision: protocol.DecisionDecline}
	require.Equal(t, routeGranted.name, routeOf(in).name)
}
