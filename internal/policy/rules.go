package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/tollgate/tollgate/protocol"
)

// What a policy rule requires of a tool's calls.
const (
	RequireAlways = "always"
	RequireNever  = "never"
	RequireWhen   = "when"
)

// Rule is the approval policy of one tool. A tool without a rule follows
// the worker's required tools. Turns record the rules they start with (in
// their settings), as JSON, and follow them to the end.
type Rule struct {
	Tool string `json:"tool"`
	// Require is always, never or when.
	Require string `json:"require"`
	// When is a CEL expression over the call's arguments (args), for
	// Require when: true requires approval.
	When string `json:"when,omitempty"`
	// Timeout, when set, replaces the approval timeout for this tool.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Deciders, when set, are who may decide this tool's calls: principals
	// (an API token's, or the one a Temporal client names), and roles
	// written role:NAME (the permission of the API token decided with, or
	// one of its team roles). Anyone else's decision is refused as
	// forbidden.
	Deciders []string `json:"deciders,omitempty"`
	// SecondPerson, true, refuses a decision by the principal who sent the
	// message that led to the call, and one by nobody in particular (an
	// API without tokens): a second person must decide.
	SecondPerson bool `json:"secondPerson,omitempty"`
	// Quorum, past 1, is how many approvals from distinct principals a
	// call needs before it runs: each vote is a decision that MayDecide
	// allows, and a principal votes once. Edited arguments and remembered
	// decisions are refused on its calls (docs/policy.md, Quorum).
	Quorum int `json:"quorum,omitempty"`
	// Declines is how many declines from distinct principals decline a
	// call of a rule with a quorum; 0 is one.
	Declines int `json:"declines,omitempty"`
	// Escalate are the steps, in order, that widen who may decide a call
	// that waits: when a step's time has passed with no decision, its
	// principals and roles may decide too, and are told (docs/policy.md,
	// Escalation).
	Escalate []Escalation `json:"escalate,omitempty"`
	// Sandbox, SandboxAuto on Bash's rule, lets a call the rule would ask
	// about go on without a person when, run in the sandbox first
	// (TOLLGATE_BASH_SANDBOX=preview), it touched no file that the policy
	// protects: its changes apply at once.
	Sandbox string `json:"sandbox,omitempty"`
	// Shadow, true, marks a rule that is evaluated on live calls and never
	// acts: the tool follows its live rule (a tool has at most one of
	// each), or without one the worker's required tools, and the ledger
	// records what the shadow rule would have done (docs/policy.md, Shadow
	// rules).
	Shadow bool `json:"shadow,omitempty"`
	// Examples are calls the rule must ask about and calls it must let
	// through, checked when the worker starts (and by POST /policy/check):
	// the policy file's, never recorded by a turn.
	Examples Examples `json:"-"`
}

// Escalation is one step of a rule's escalation: after a share of the
// call's timeout (AfterPercent) or a time (After) with no decision, To may
// decide too.
type Escalation struct {
	After        time.Duration `json:"after,omitempty"`
	AfterPercent int           `json:"afterPercent,omitempty"`
	To           []string      `json:"to"`
}

// Offset is how long after a call asks the step escalates, for a call
// whose timeout is timeout.
func (e Escalation) Offset(timeout time.Duration) time.Duration {
	if e.AfterPercent > 0 {
		return timeout * time.Duration(e.AfterPercent) / 100
	}
	return e.After
}

// Voting reports whether r's calls are decided by votes (a quorum past
// one, or more than one decline needed) rather than by one decision.
func (r *Rule) Voting() bool {
	return r != nil && (r.Quorum > 1 || r.Declines > 1)
}

// Needed is how many approvals and how many declines decide a call of r.
func (r *Rule) Needed() (approvals, declines int) {
	if r == nil {
		return 1, 1
	}
	return max(r.Quorum, 1), max(r.Declines, 1)
}

// Examples are a rule's examples: each a call's arguments, a JSON object.
type Examples struct {
	// Ask are calls the rule must ask a person about.
	Ask []string
	// Allow are calls the rule must let through without a person.
	Allow []string
}

// SandboxAuto is the Sandbox of a Bash rule whose contained calls need no
// person.
const SandboxAuto = "auto"

// DeciderRolePrefix starts a Deciders entry that names a role.
const DeciderRolePrefix = "role:"

// MayDecide says why principal, deciding with role and in teams (its team
// roles), may not decide a call of this rule's tool that sender's message
// led to, or nil when they may. A role:NAME decider names role or one of
// teams.
func (r *Rule) MayDecide(principal, role string, teams []string, sender string) error {
	if r == nil {
		return nil
	}
	if len(r.Deciders) > 0 && !slices.ContainsFunc(r.Deciders, func(d string) bool {
		name, isRole := strings.CutPrefix(d, DeciderRolePrefix)
		return (principal != "" && d == principal) || (role != "" && d == DeciderRolePrefix+role) ||
			(isRole && name != "" && slices.Contains(teams, name))
	}) {
		return fmt.Errorf("%s calls are decided only by %s, not by %q", r.Tool, strings.Join(r.Deciders, ", "), cmp.Or(principal, "an unnamed caller"))
	}
	if r.SecondPerson && (principal == "" || principal == sender) {
		if principal == "" {
			return fmt.Errorf("%s calls need a second person's decision, and this one names nobody: decide with an API token", r.Tool)
		}
		return fmt.Errorf("%s calls need a second person: %q sent the message that led to this call", r.Tool, principal)
	}
	return nil
}

// MayDecideFor is MayDecide for principal deciding as the stand-in of
// onBehalfOf (empty: in their own name): they may when they may as
// themself, or when onBehalfOf, named (a Deciders entry that is a
// principal; role and teams are the stand-in's own), may. A rule that
// needs a second person refuses the decision when either sent the
// message: the stand-in counts as the one stood in for.
func (r *Rule) MayDecideFor(principal, role string, teams []string, onBehalfOf, sender string) error {
	if r == nil || onBehalfOf == "" {
		return r.MayDecide(principal, role, teams, sender)
	}
	if r.SecondPerson && (onBehalfOf == sender || principal == sender) {
		return fmt.Errorf("%s calls need a second person: %q sent the message that led to this call, and %q decides for %q", r.Tool, sender, principal, onBehalfOf)
	}
	own := r.MayDecide(principal, role, teams, sender)
	if own == nil || r.MayDecide(onBehalfOf, "", nil, sender) == nil {
		return nil
	}
	return fmt.Errorf("%w (nor by %q, for whom they stand in)", own, onBehalfOf)
}

// WithDeciders is r with more deciders (an escalation's), or r itself when
// r names no deciders, since then anyone may decide already, or when
// there are none to add.
func (r *Rule) WithDeciders(more []string) *Rule {
	if r == nil || len(r.Deciders) == 0 || len(more) == 0 {
		return r
	}
	c := *r
	c.Deciders = append(slices.Clip(r.Deciders), more...)
	return &c
}

// Validate checks r, compiling its expression; the error names the tool
// and the expression.
func (r Rule) Validate() error {
	switch r.Require {
	case RequireAlways, RequireNever:
		if r.When != "" {
			return fmt.Errorf("tool %s: require: %s takes no when expression", r.Tool, r.Require)
		}
	case RequireWhen:
		if _, err := compileWhen(r.When); err != nil {
			return fmt.Errorf("tool %s: when %q: %w", r.Tool, r.When, err)
		}
	default:
		return fmt.Errorf("tool %s: require %q is not one of always, never, when", r.Tool, r.Require)
	}
	if r.Timeout < 0 {
		return fmt.Errorf("tool %s: timeout %s is negative", r.Tool, r.Timeout)
	}
	if err := r.validateVoting(); err != nil {
		return err
	}
	switch {
	case r.Sandbox != "" && r.Sandbox != SandboxAuto:
		return fmt.Errorf("tool %s: sandbox %q is not %q", r.Tool, r.Sandbox, SandboxAuto)
	case r.Sandbox != "" && r.Tool != "Bash":
		return fmt.Errorf("tool %s: sandbox: %s is for Bash's rule only: only Bash runs in the sandbox", r.Tool, r.Sandbox)
	}
	return nil
}

// validateVoting checks r's quorum, declines and escalation steps.
func (r Rule) validateVoting() error {
	switch {
	case r.Quorum < 0:
		return fmt.Errorf("tool %s: quorum %d is negative", r.Tool, r.Quorum)
	case r.Declines < 0:
		return fmt.Errorf("tool %s: declines %d is negative", r.Tool, r.Declines)
	case r.Voting() && slices.ContainsFunc(r.Deciders, namesNobody):
		return fmt.Errorf("tool %s: deciders lists %s or %s, who name no person and cannot vote on a quorum: list the people", r.Tool, protocol.PrincipalLink, protocol.PrincipalTemporal)
	case r.Quorum > 1 && len(r.Deciders) > 0 && !slices.ContainsFunc(r.Deciders, isRole) && len(r.Deciders) < r.Quorum:
		return fmt.Errorf("tool %s: quorum %d needs as many deciders, and only %d are named (%s)", r.Tool, r.Quorum, len(r.Deciders), strings.Join(r.Deciders, ", "))
	case (r.Quorum > 1 || r.Declines > 1) && r.Require == RequireNever:
		return fmt.Errorf("tool %s: quorum and declines need a rule that asks, not require: never", r.Tool)
	}
	for i, e := range r.Escalate {
		step := fmt.Sprintf("tool %s: escalate step %d", r.Tool, i+1)
		switch {
		case len(e.To) == 0:
			return fmt.Errorf("%s: to names nobody: list principals or role:NAME", step)
		case r.Voting() && slices.ContainsFunc(e.To, namesNobody):
			return fmt.Errorf("%s: to lists %s or %s, who name no person and cannot vote on a quorum: list the people", step, protocol.PrincipalLink, protocol.PrincipalTemporal)
		case (e.After > 0) == (e.AfterPercent > 0):
			return fmt.Errorf("%s: after is a percent of the timeout (50%%) or a duration (10m), and must be set", step)
		case e.AfterPercent >= 100:
			return fmt.Errorf("%s: after %d%% is not before the timeout", step, e.AfterPercent)
		case r.Timeout > 0 && e.After >= r.Timeout:
			return fmt.Errorf("%s: after %s is not before the rule's timeout %s", step, e.After, r.Timeout)
		}
		if i == 0 {
			continue
		}
		// Steps come in order; a percent and a duration compare only
		// against the rule's own timeout (the default one may change).
		prev, inOrder := r.Escalate[i-1], true
		switch {
		case r.Timeout > 0:
			inOrder = prev.Offset(r.Timeout) < e.Offset(r.Timeout)
		case prev.AfterPercent > 0 && e.AfterPercent > 0:
			inOrder = prev.AfterPercent < e.AfterPercent
		case prev.After > 0 && e.After > 0:
			inOrder = prev.After < e.After
		}
		if !inOrder {
			return fmt.Errorf("%s: it comes no later than the step before it: list the steps in order", step)
		}
	}
	return nil
}

// isRole reports whether a Deciders entry names a role.
func isRole(d string) bool { return strings.HasPrefix(d, DeciderRolePrefix) }

// namesNobody reports whether a Deciders entry is who a signed link's or
// an unnamed signal's decisions are recorded as: no person.
func namesNobody(d string) bool {
	return d == protocol.PrincipalLink || d == protocol.PrincipalTemporal
}

// CheckWhen says why expr is not an expression EvalWhen can evaluate, or
// nil: a grant's scope is checked with it before the grant is made, so a
// scope that does not compile, or whose estimated cost passes CostLimit,
// makes no grant.
func CheckWhen(expr string) error {
	_, err := compileWhen(expr)
	return err
}

// compiled is an expression ready to evaluate.
type compiled struct {
	ast     *cel.Ast
	program cel.Program
}

// programs caches compiled expressions: compiling is pure, so a cache
// shared by all workflows keeps them deterministic. Only expressions
// within CostLimit are kept.
var programs sync.Map // string → *compiled

// env is the environment every expression is compiled in: the call's
// arguments and its tool's annotations.
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("annotations", cel.MapType(cel.StringType, cel.DynType)),
	)
})

// compileWhen compiles expr, and refuses it when it is longer than
// MaxExpressionBytes or its cost, estimated with every argument
// EstimatedArgumentSize long, passes CostLimit.
func compileWhen(expr string) (*compiled, error) {
	if c, ok := programs.Load(expr); ok {
		return c.(*compiled), nil
	}
	if len(expr) > MaxExpressionBytes {
		return nil, fmt.Errorf("it is %d bytes long, past the limit of %d that an expression may be", len(expr), MaxExpressionBytes)
	}
	env, err := env()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("the expression gives %s, not bool", ast.OutputType())
	}
	cost, err := estimate(env, ast, EstimatedArgumentSize)
	if err != nil {
		return nil, err
	}
	if cost > CostLimit {
		return nil, fmt.Errorf("it may cost up to %s to evaluate, past the limit of %d that one call may cost "+
			"(cel-go's cost units, with every argument taken as %d long): it does too much work per call; "+
			"most often that is comprehensions (all, exists, map, filter) inside one another, "+
			"or matches with a large pattern, or one that is not a literal",
			costText(cost), CostLimit, EstimatedArgumentSize)
	}
	p, err := env.Program(ast)
	if err != nil {
		return nil, err
	}
	c := &compiled{ast: ast, program: p}
	programs.Store(expr, c)
	return c, nil
}

// costText writes an estimated cost, which for an unbounded expression is
// math.MaxUint64.
func costText(c uint64) string {
	if c == math.MaxUint64 {
		return "no bound"
	}
	return strconv.FormatUint(c, 10)
}

// EvalWhen evaluates expr on a call's arguments (args) and its tool's
// annotations (annotations.readOnlyHint, .destructiveHint,
// .idempotentHint, .openWorldHint, .title: MCP's defaults for a tool that
// says nothing). Before it runs, its cost on these very arguments is
// estimated: past CostLimit, or past what budget (when not nil) has left,
// it does not run, and the error says so; otherwise its estimate is taken
// from budget.
func EvalWhen(expr, arguments string, hints protocol.ToolAnnotations, budget *Budget) (bool, error) {
	c, err := compileWhen(expr)
	if err != nil {
		return false, err
	}
	args, size, err := budget.decode(arguments)
	if err != nil {
		return false, err
	}
	annotations := map[string]any{
		"readOnlyHint": hints.ReadOnly, "destructiveHint": hints.Destructive,
		"idempotentHint": hints.Idempotent, "openWorldHint": hints.OpenWorld, "title": hints.Title,
	}
	if err := budget.take(c, max(size, largest(annotations))); err != nil {
		return false, err
	}
	out, _, err := c.program.Eval(map[string]any{"args": args, "annotations": annotations})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, errors.New("the expression did not give a bool")
	}
	return b, nil
}
