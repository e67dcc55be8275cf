package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

// nestedAll is n comprehensions over ten numbers, one inside the other:
// 10^n iterations. cel-go's checker accepts any n; six take about half a
// second, seven several.
func nestedAll(n int) string {
	expr := "true"
	for i := n; i > 0; i-- {
		expr = "[0,1,2,3,4,5,6,7,8,9].all(x" + string(rune('0'+i)) + ", " + expr + ")"
	}
	return expr
}

// items are the arguments {"items": [1, 1, …]} with n items.
func items(n int) string {
	return `{"items":[` + strings.TrimSuffix(strings.Repeat("1,", n), ",") + `]}`
}

func TestAnExpressionThatMayCostTooMuchIsRefusedNamingTheLimit(t *testing.T) {
	for _, expr := range []string{
		nestedAll(6),
		`args.items.all(x, args.items.all(y, x != y))`,
		`args.command.matches(args.pattern)`, // the model's pattern
	} {
		err := CheckWhen(expr)
		require.ErrorContains(t, err, "past the limit of 500000 that one call may cost", expr)
		require.ErrorContains(t, err, "comprehensions (all, exists, map, filter) inside one another")
	}
	_, err := Parse([]byte("tools:\n  Bash:\n    when: '" + nestedAll(6) + "'\n"))
	require.ErrorContains(t, err, `tool Bash: when "[0,1,2`)
	require.ErrorContains(t, err, "past the limit of 500000")

	long := strings.Repeat(`args.command.contains("x") || `, 70) + "false"
	require.ErrorContains(t, CheckWhen(long), "it is 2105 bytes long, past the limit of 2048 that an expression may be")

	// What a rule usually does stays well within it.
	for _, expr := range []string{
		nestedAll(5),
		`args.command.startsWith("rm ") || args.command.contains("sudo")`,
		`args.command.matches("^git (status|diff|log)( |$)")`,
		`args.items.all(x, x > 0)`,
		`!args.file_path.startsWith("docs/") && !annotations.readOnlyHint`,
	} {
		require.NoError(t, CheckWhen(expr), expr)
	}
}

func TestAnEvaluationThatWouldPassTheCostLimitOnItsArgumentsDoesNotRun(t *testing.T) {
	const expr = `args.items.all(x, x > 0)`
	require.NoError(t, CheckWhen(expr), "within the limit on arguments of ordinary size")

	start := time.Now()
	ok, err := EvalWhen(expr, items(300_000), protocol.ToolAnnotations{}, nil)
	t.Logf("refused in %s", time.Since(start))

	require.False(t, ok)
	require.ErrorContains(t, err, "on these arguments (a value 300000 long) the expression may cost up to 1500003, past the limit of 500000 that one call may cost")

	ok, err = EvalWhen(expr, items(50_000), protocol.ToolAnnotations{}, nil)
	require.NoError(t, err)
	require.True(t, ok, "arguments within the limit are evaluated")

	// cel-go puts this at 60,000 on 200 KB, and Go's regexp takes more
	// than a second: the cost counts the compiled pattern's size.
	const pattern = `args.s.matches("[a-z]{1000}c")`
	require.NoError(t, CheckWhen(pattern))
	_, err = EvalWhen(pattern, `{"s":"`+strings.Repeat("ab", 100_000)+`"}`, protocol.ToolAnnotations{}, nil)
	require.ErrorContains(t, err, "on these arguments (a value 200000 long) the expression may cost up to 20060002, past the limit")
}

func TestTheEvaluationsOfABatchShareOneBudget(t *testing.T) {
	// Each evaluation may cost 250,003: a batch's budget takes three.
	args := items(50_000)
	const expr = `args.items.all(x, x > 0)`
	budget := NewBudget()
	var evaluated int
	var err error
	for range 10 {
		if _, err = EvalWhen(expr, args, protocol.ToolAnnotations{}, budget); err != nil {
			break
		}
		evaluated++
	}
	require.ErrorContains(t, err, "the calls of this batch have spent the 1000000 that their rules and grant scopes may cost together")
	require.Equal(t, 3, evaluated)
	_, err = EvalWhen(expr, `{"items":[1]}`, protocol.ToolAnnotations{}, budget)
	require.NoError(t, err, "a cheaper evaluation still fits what is left")
}

// BenchmarkTheCostliestBatchTheLimitsLetThrough measures what the limits
// are for: the worst a batch's rules and scopes may do in a workflow task,
// which the SDK fails past a second. An op spends a whole batch's budget
// on one expression; measured on two shared cores, busy: 30 to 100 ms
// (`go test -run '^$' -bench Costliest ./internal/policy`).
func BenchmarkTheCostliestBatchTheLimitsLetThrough(b *testing.B) {
	for _, c := range []struct{ name, expr, args string }{
		{"nested-comprehensions", nestedAll(5), `{}`},
		{"long-list", `args.items.all(x, x > 0)`, items(99_000)},
		{"regexp", `args.s.matches("^(a|b)+c")`, `{"s":"` + strings.Repeat("ab", 100_000) + `"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				budget := NewBudget()
				for {
					if _, err := EvalWhen(c.expr, c.args, protocol.ToolAnnotations{}, budget); err != nil {
						if !strings.Contains(err.Error(), "spent the") {
							b.Fatal(err)
						}
						break
					}
				}
			}
		})
	}
}
