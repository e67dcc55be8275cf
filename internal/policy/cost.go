package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp/syntax"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/overloads"
)

// What the expressions evaluated for a call may cost, in cel-go's cost
// units: about one per comparison, variable or list element visited, and
// one per ten characters of a string searched. They are evaluated inside a
// workflow task (their answers are recorded in a SideEffect), which the SDK
// fails as deadlocked past a second and retries for ever, so a rule or a
// grant's scope must not be able to take long, whatever a person wrote or
// the model sent. Measured on two shared cores, a million units of
// comprehensions take about 0.1 s, a million of matches 0.15 s.
//
// The cost is cel-go's estimate (its checker), an upper bound, made twice:
// when the expression is compiled, with every argument
// EstimatedArgumentSize long, and before each evaluation, with every
// argument as long as the call's largest value. cel-go's own run-time
// tracker (cel.CostLimit) is not used: in cel-go v0.31 it costs time
// quadratic in a comprehension's length (20,000 list items took a second
// to count up to 100,000 units), so the limit it enforces would itself
// wedge the task.
const (
	// CostLimit bounds one evaluation. An expression whose estimate passes
	// it is refused when its rule is loaded or its grant made; one whose
	// estimate on a call's arguments passes it (larger arguments than
	// that) is not evaluated and decides nothing: the rule's call asks,
	// the grant does not answer.
	CostLimit = 500_000
	// BatchCostLimit bounds the evaluations of one batch of calls
	// together, its rules and its grants' scopes (a Budget): past it, the
	// rest decide nothing, as above.
	BatchCostLimit = 1_000_000
	// EstimatedArgumentSize is the size (a string's bytes, a list's or a
	// map's entries) every argument is taken to have when an expression
	// is compiled.
	EstimatedArgumentSize = 4096
	// MaxExpressionBytes bounds an expression's length: compiling one
	// takes time too, in the workflow task that first evaluates it on a
	// worker (a grant's scope, or a rule a turn recorded; a worker's own
	// rules are compiled at its start), and cel-go took a second for 60 KB
	// and about 20 ms for 2 KB.
	MaxExpressionBytes = 2048
)

// Budget is what the evaluations of one batch of calls may still cost
// together (BatchCostLimit). A nil *Budget bounds each evaluation by
// CostLimit alone.
type Budget struct {
	left uint64
	// arguments were decoded into args, whose largest value has size:
	// the expressions evaluated on one call (its rule, every scoped grant
	// of its tool) decode its arguments once.
	arguments string
	args      map[string]any
	size      uint64
}

// NewBudget returns the budget of one batch: BatchCostLimit.
func NewBudget() *Budget { return &Budget{left: BatchCostLimit} }

// decode reads a call's arguments, and the size of their largest value;
// once for the same arguments in a row, when b is not nil. CEL never
// changes what it reads, so they can be shared.
func (b *Budget) decode(arguments string) (map[string]any, uint64, error) {
	if b != nil && b.args != nil && b.arguments == arguments {
		return b.args, b.size, nil
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return nil, 0, fmt.Errorf("arguments: %w", err)
	}
	size := largest(args)
	if b != nil && args != nil {
		b.arguments, b.args, b.size = arguments, args, size
	}
	return args, size, nil
}

// take says why c may not be evaluated on arguments whose largest value
// has size n, or takes its estimated cost from b (when not nil).
func (b *Budget) take(c *compiled, n uint64) error {
	env, err := env()
	if err != nil {
		return err
	}
	cost, err := estimate(env, c.ast, n)
	if err != nil {
		return err
	}
	if cost > CostLimit {
		return fmt.Errorf("on these arguments (a value %d long) the expression may cost up to %s, past the limit of %d that one call may cost (cel-go's cost units), so it was not evaluated",
			n, costText(cost), CostLimit)
	}
	if b == nil {
		return nil
	}
	if cost > b.left {
		return fmt.Errorf("the calls of this batch have spent the %d that their rules and grant scopes may cost together, so it was not evaluated", BatchCostLimit)
	}
	b.left -= cost
	return nil
}

// estimate is the most ast may cost when no value it reads is longer than
// n.
func estimate(env *cel.Env, ast *cel.Ast, n uint64) (uint64, error) {
	cost, err := env.EstimateCost(ast, sizeBound(n))
	if err != nil {
		return 0, fmt.Errorf("its cost cannot be estimated: %w", err)
	}
	return cost.Max, nil
}

// sizeBound is the cost estimator of every expression: each value whose
// size the expression does not itself fix (an argument, an annotation) is
// at most this long, and functions cost what cel-go says they do, but for
// matches (see matchesCost).
type sizeBound uint64

func (b sizeBound) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: uint64(b)}
}

func (b sizeBound) EstimateCallCost(function, _ string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	if function != overloads.Matches {
		return nil
	}
	subject, pattern := target, args
	if subject == nil && len(args) == 2 {
		subject, pattern = &args[0], args[1:]
	}
	if subject == nil || len(pattern) != 1 {
		return nil
	}
	size := uint64(b)
	if s := (*subject).ComputedSize(); s != nil {
		size = s.Max
	}
	return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: matchesCost(size, pattern[0].Expr())}}
}

// matchesCost is what matching a string of size bytes against pattern may
// cost. cel-go estimates it from the pattern's length, but Go's regexp
// takes time in the length times the size of the compiled program, which a
// short pattern can make large: [a-z]{1000}c took 1.4 s on 200 KB that
// cel-go put at 60,000 units. So the cost is a tenth of a unit per byte
// and instruction (about 7 ns each, measured), and a pattern that is not a
// literal, which the model could write, has no bound: it is refused.
func matchesCost(size uint64, pattern ast.Expr) uint64 {
	if pattern.Kind() != ast.LiteralKind {
		return math.MaxUint64
	}
	text, ok := pattern.AsLiteral().Value().(string)
	if !ok {
		return math.MaxUint64
	}
	re, err := syntax.Parse(text, syntax.Perl)
	if err != nil {
		return 1 // cel-go refuses it when it compiles the program
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 1
	}
	insts := uint64(len(prog.Inst))
	if size > 0 && insts > math.MaxUint64/size {
		return math.MaxUint64
	}
	return max(size*insts/10, 1)
}

// largest is the size of the largest value in v, as decoded from JSON: a
// string's bytes (at least its characters, which CEL counts), a list's
// items, a map's entries, itself included.
func largest(v any) uint64 {
	switch v := v.(type) {
	case string:
		return uint64(len(v))
	case []any:
		n := uint64(len(v))
		for _, x := range v {
			n = max(n, largest(x))
		}
		return n
	case map[string]any:
		n := uint64(len(v))
		for k, x := range v {
			n = max(n, uint64(len(k)), largest(x))
		}
		return n
	default:
		return 0
	}
}
