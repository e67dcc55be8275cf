package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// reasonRemembered is the reason shown for a decision a grant made.
const reasonRemembered = "remembered decision"

// grantLive reports whether g may still decide a call at now: not
// expired, and not used up.
func grantLive(g *contract.Grant, now time.Time) bool {
	return (g.ExpiresAt == nil || now.Before(*g.ExpiresAt)) && (g.Uses == 0 || g.Used < g.Uses)
}

// grantUsesLeft is how many more calls g may decide, or nil for any
// number.
func grantUsesLeft(g *contract.Grant) *int {
	if g.Uses == 0 {
		return nil
	}
	n := max(g.Uses-g.Used, 0)
	return &n
}

// grantFor returns the newest grant that covers call at now, or nil: one
// for its tool, live, for its arguments when the grant names them (as same
// compares them), and whose scope, when it has one, inScope says holds.
func grantFor(grants []contract.Grant, call protocol.ToolCall, now time.Time, same, inScope func(*contract.Grant) bool) *contract.Grant {
	for i := len(grants) - 1; i >= 0; i-- {
		g := &grants[i]
		if g.Tool == call.Name && (g.Arguments == "" || same(g)) && grantLive(g, now) &&
			(g.When == "" || (inScope != nil && inScope(g))) {
			return g
		}
	}
	return nil
}

// callArguments are a call's arguments as grants compare them: canonical
// with numbers as written (exact), and with numbers read as float64
// (float), as turns before patchGrantNarrowed compared them.
type callArguments struct{ exact, float string }

// argumentsOf reads call's arguments as grants compare them.
func argumentsOf(call protocol.ToolCall) callArguments {
	return callArguments{exact: canonicalJSON(call.Arguments), float: floatCanonicalJSON(call.Arguments)}
}

// sameArguments returns how a grant that names arguments compares them
// with args: exactly, or as float64 (where 10000000000000000 and
// 10000000000000001 are one number). A grant's Arguments were made by
// canonicalJSON, or by floatCanonicalJSON before it, and canonicalJSON
// gives either back unchanged, so the exact comparison reads no JSON; the
// float64 one reads each grant's once a turn (t.floats).
func (t *turn) sameArguments(args callArguments, exact bool) func(*contract.Grant) bool {
	if exact {
		return func(g *contract.Grant) bool { return g.Arguments == args.exact }
	}
	return func(g *contract.Grant) bool {
		f, ok := t.floats[g.ID]
		if !ok {
			f = floatCanonicalJSON(g.Arguments)
			if t.floats == nil {
				t.floats = map[string]string{}
			}
			t.floats[g.ID] = f
		}
		return f == args.float
	}
}

// grantsFor returns the grants that may answer call now, and how their
// arguments compare with args (see sameArguments).
//
// From patchGrantNarrowed on, a grant answers only a call that its maker
// may decide under the rule in force now (deciders, second person: the
// turn's rules and sender, as for a decision made now), and its arguments
// compare with numbers as written. A turn recorded before the patch lets
// every grant answer and compares numbers as float64, as it did. The patch
// is asked only when it changes something: when a live grant of call's
// tool is one that the new way leaves out.
func (t *turn) grantsFor(ctx workflow.Context, call protocol.ToolCall, args callArguments, now time.Time) ([]contract.Grant, func(*contract.Grant) bool) {
	rule := t.settings.rule(call.Name)
	exactly, asFloats := t.sameArguments(args, true), t.sameArguments(args, false)
	var narrowed []contract.Grant
	for _, g := range t.grants {
		leftOut := g.Tool == call.Name && grantLive(&g, now) &&
			(rule.MayDecide(g.By, g.Role, g.Teams, t.sender) != nil ||
				(g.Arguments != "" && !exactly(&g) && asFloats(&g)))
		if !leftOut {
			narrowed = append(narrowed, g)
		}
	}
	if len(narrowed) == len(t.grants) {
		// Every grant compares the same either way.
		return t.grants, exactly
	}
	if !patched(ctx, t.settings, patchGrantNarrowed) {
		return t.grants, asFloats
	}
	return narrowed, exactly
}

// grantFrom makes the grant a remembered decision on a asks for.
func grantFrom(a *approval, turnID string) contract.Grant {
	g := contract.Grant{
		ID:        grantID(a.RequestID),
		Tool:      a.Call.Name,
		Decision:  a.decision,
		Reason:    a.reason,
		TurnID:    turnID,
		CreatedAt: a.decidedAt,
		By:        a.by,
		Role:      a.role,
		Teams:     a.teams,
	}
	if a.rememberFor > 0 {
		expires := a.decidedAt.Add(a.rememberFor)
		g.ExpiresAt = &expires
	}
	g.Uses, g.When = a.rememberUses, a.rememberWhen
	if a.sameArguments {
		args := a.Call.Arguments
		if a.arguments != "" {
			args = a.arguments
		}
		g.Arguments = canonicalJSON(args)
	}
	return g
}

// grantID is the id of the grant that the decision of request requestID
// makes.
func grantID(requestID string) string {
	return "grant-" + contract.RequestSecret(requestID)
}

// canonicalJSON re-encodes a JSON text with sorted keys and no spaces, so
// that equal arguments compare equal however the model spaced them. Numbers
// stay as written: 10000000000000001 is not 10000000000000000, nor 1.0 1.
func canonicalJSON(s string) string {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return s
	}
	return string(b)
}

// floatCanonicalJSON is canonicalJSON as it was before patchGrantNarrowed:
// numbers read as float64, so ones that differ past float64's precision
// compare equal.
func floatCanonicalJSON(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return s
	}
	return string(b)
}

// revoke removes the grant with id from grants.
func revoke(grants []contract.Grant, id string) ([]contract.Grant, error) {
	i := slices.IndexFunc(grants, func(g contract.Grant) bool { return g.ID == id })
	if i < 0 {
		return grants, fmt.Errorf("grant %q: %w", id, errUnknownGrant)
	}
	return slices.Delete(grants, i, i+1), nil
}

// useGrant returns the grant that decides call now, counting the use, or
// nil. A grant with a scope (When) is evaluated in a SideEffect, recorded
// once, as the policy's checks are (see turn.vetBatch): a later cel-go
// must never change which grant answered. Only grants made by this build
// have a scope, so a turn recorded before it never records one; scopeless
// grants need nothing recorded (tool, arguments, the workflow's clock and
// counts replay the same). A scope that fails, or passes its cost limit
// (policy.CostLimit), decides nothing: the call asks.
//
// A call of a rule with a quorum is never answered by a grant: a grant is
// one person's decision, and the rule asks for several (no vote may make
// one either: gate.checkVote).
func (t *turn) useGrant(ctx workflow.Context, call protocol.ToolCall) *contract.Grant {
	if t.settings.rule(call.Name).Voting() {
		return nil
	}
	if !slices.ContainsFunc(t.grants, func(g contract.Grant) bool { return g.Tool == call.Name }) {
		return nil // no grant to read the arguments for
	}
	now := workflow.Now(ctx)
	grants, same := t.grantsFor(ctx, call, argumentsOf(call), now)
	scoped := slices.ContainsFunc(grants, func(g contract.Grant) bool { return g.When != "" && g.Tool == call.Name && grantLive(&g, now) })
	var id string
	if !scoped {
		if g := grantFor(grants, call, now, same, nil); g != nil {
			id = g.ID
		}
	} else {
		spec, _ := t.settings.spec(call.Name)
		if err := workflow.SideEffect(ctx, func(ctx workflow.Context) any {
			g := grantFor(grants, call, now, same, func(g *contract.Grant) bool {
				ok, err := policy.EvalWhen(g.When, call.Arguments, spec.Hints(), t.cost)
				if err != nil {
					workflow.GetLogger(ctx).Warn("grant scope decides nothing: the call asks", "grantId", g.ID, "toolCallId", call.ID, "error", err)
				}
				return err == nil && ok
			})
			if g == nil {
				return ""
			}
			return g.ID
		}).Get(&id); err != nil {
			// A SideEffect result only fails to decode on a corrupt history.
			panic(fmt.Errorf("grant for call %s: %w", call.ID, err))
		}
	}
	i := slices.IndexFunc(t.grants, func(g contract.Grant) bool { return g.ID == id })
	if id == "" || i < 0 {
		return nil
	}
	t.countGrantUse(id, 1)
	return &t.grants[i]
}

// countGrantUse counts n calls decided by grant id, in the loop's grants
// and in what it reports to its parent.
func (t *turn) countGrantUse(id string, n int) {
	if i := slices.IndexFunc(t.grants, func(g contract.Grant) bool { return g.ID == id }); i >= 0 {
		t.grants[i].Used += n
	}
	if t.grantsUsed == nil {
		t.grantsUsed = map[string]int{}
	}
	t.grantsUsed[id] += n
}
