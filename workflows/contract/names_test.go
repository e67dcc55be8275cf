package contract

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
func TestParseTurnWorkflowIDReadsTheTurnFromItsEnd(t *testing.T) {
	for _, conv := range []string{"demo", "a-sub-5", "notes-turn-over", "x-turn-2"} {
		conv2, n, ok := ParseTurnWorkflowID(TurnWorkflowID(conv, 12))
		require.True(t, ok, conv)
		require.Equal(t, conv, conv2)
		require.Equal(t, 12, n)
	}
	for _, id := range []string{
		ConversationWorkflowID("demo"), SubagentWorkflowID(TurnWorkflowID("demo", 1), 1),
		"tollgate-conv-demo-turn-01", "tollgate-conv-demo-turn-0", "tollgate-conv--turn-1", "other-conv-demo-turn-1",
	} {
		_, _, ok := ParseTurnWorkflowID(id)
		require.False(t, ok, id)
	}
}

func TestOnlyAConversationIDWithTheTurnSeparatorMayNameAnotherTurn(t *testing.T) {
	require.True(t, MayNameAnotherTurn("victim-turn-2"))
	require.True(t, MayNameAnotherTurn("victim-turn-2-sub-1"))
	require.False(t, MayNameAnotherTurn("victim-turn"))
	require.False(t, MayNameAnotherTurn("a-sub-5"))
	require.Equal(t, ConversationWorkflowID("victim-turn-2"), TurnWorkflowID("victim", 2), "why it may")
}
