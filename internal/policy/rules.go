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
	// written role:NAME (the role of the API token decided with). Anyone
	// else's decision is refused as forbidden.
	Deciders []string `json:"deciders,omitempty"`
	// SecondPerson, true, refuses a decision by the principal who sent the
	// message that led to the call, and one by nobody in particular (an
	// API without tokens): a second person must decide.
	SecondPerson bool `json:"secondPerson,omitempty"`
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

// MayDecide says why principal, deciding with role, may not decide a call
// of this rule's tool that sender's message led to, or nil when they may.
func (r *Rule) MayDecide(principal, role, sender string) error {
	if r == nil {
		return nil
	}
	if len(r.Deciders) > 0 && !slices.ContainsFunc(r.Deciders, func(d string) bool {
		return (principal != "" && d == principal) || (role != "" && d == DeciderRolePrefix+role)
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
// principal; roles are the stand-in's own), may. A rule that needs a
// second person refuses the decision when either sent the message: the
// stand-in counts as the one stood in for.
func (r *Rule) MayDecideFor(principal, role, onBehalfOf, sender string) error {
	if r == nil || onBehalfOf == "" {
		return r.MayDecide(principal, role, sender)
	}
	if r.SecondPerson && (onBehalfOf == sender || principal == sender) {
		return fmt.Errorf("%s calls need a second person: %q sent the message that led to this call, and %q decides for %q", r.Tool, sender, principal, onBehalfOf)
	}
	own := r.MayDecide(principal, role, sender)
	if own == nil || r.MayDecide(onBehalfOf, "", sender) == nil {
		return nil
	}
	return fmt.Errorf("%w (nor by %q, for whom they stand in)", own, onBehalfOf)
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
	switch {
	case r.Sandbox != "" && r.Sandbox != SandboxAuto:
		return fmt.Errorf("tool %s: sandbox %q is not %q", r.Tool, r.Sandbox, SandboxAuto)
	case r.Sandbox != "" && r.Tool != "Bash":
		return fmt.Errorf("tool %s: sandbox: %s is for Bash's rule only: only Bash runs in the sandbox", r.Tool, r.Sandbox)
	}
	return nil
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
