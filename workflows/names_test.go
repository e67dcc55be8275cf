package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTurnWorkflowIDReadsWhatTurnWorkflowIDMakesAndNothingElse(t *testing.T) {
	for _, conv := range []string{"c", "7f0c-turn-2", "a.b:c_d", "x-sub-1"} {
		for _, n := range []int{1, 2, 10} {
			got, m, ok := ParseTurnWorkflowID(TurnWorkflowID(conv, n))
			require.True(t, ok, "%s turn %d", conv, n)
			require.Equal(t, conv, got)
			require.Equal(t, n, m)
		}
	}
	for _, id := range []string{
		"", "tollgate-conv-c", "tollgate-conv--turn-1", "tollgate-conv-c-turn-0", "tollgate-conv-c-turn-01",
		"tollgate-conv-c-turn-+1", "tollgate-conv-c-turn-1-sub-1", "someone-conv-c-turn-1", "tollgate-conv-c-turn-",
	} {
		_, _, ok := ParseTurnWorkflowID(id)
		require.False(t, ok, "%q is no turn's id", id)
	}
}
