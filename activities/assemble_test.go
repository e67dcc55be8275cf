package activities_test

import (
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
)

func idx(i int) *int { return &i }

func delta(index *int, id, name, args string) openai.ToolCall {
	return openai.ToolCall{Index: index, ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: name, Arguments: args}}
}

func assemble(chunks ...[]openai.ToolCall) []protocol.ToolCall {
	var a activities.ToolCallAssembler
	for _, c := range chunks {
		a.Add(c)
	}
	return a.Calls()
}

var wantCalls = []protocol.ToolCall{
	{ID: "call_r", Name: "Read", Arguments: `{"file_path":"a.txt"}`},
	{ID: "call_b", Name: "Bash", Arguments: `{"command":"ls"}`},
}

func TestAssemblerJoinsInterleavedOpenAIFragmentsByIndex(t *testing.T) {
	got := assemble(
		[]openai.ToolCall{delta(idx(0), "call_r", "Read", "")},
		[]openai.ToolCall{delta(idx(0), "", "", `{"file_`)},
		[]openai.ToolCall{delta(idx(1), "call_b", "Bash", "")},
		[]openai.ToolCall{delta(idx(1), "", "", `{"comm`)},
		[]openai.ToolCall{delta(idx(0), "", "", `path":"a.txt"}`)},
		[]openai.ToolCall{delta(idx(1), "", "", `and":"ls"}`)},
	)
	require.Equal(t, wantCalls, got)
}

func TestAssemblerJoinsVLLMFragmentsWithRepeatedID(t *testing.T) {
	var chunks [][]openai.ToolCall
	for i, c := range wantCalls {
		for j, r := range c.Arguments {
			name := ""
			if j == 0 {
				name = c.Name
			}
			chunks = append(chunks, []openai.ToolCall{delta(idx(i), c.ID, name, string(r))})
		}
	}
	require.Equal(t, wantCalls, assemble(chunks...))
}

func TestAssemblerTakesWholeOllamaCallsWithoutIndex(t *testing.T) {
	got := assemble([]openai.ToolCall{
		delta(nil, "call_r", "Read", `{"file_path":"a.txt"}`),
		delta(nil, "call_b", "Bash", `{"command":"ls"}`),
	})
	require.Equal(t, wantCalls, got)
}

func TestAssemblerSplitsCallsThatShareIndexZeroByID(t *testing.T) {
	got := assemble([]openai.ToolCall{
		delta(idx(0), "call_r", "Read", `{"file_path":"a.txt"}`),
		delta(idx(0), "call_b", "Bash", `{"command":"ls"}`),
	})
	require.Equal(t, wantCalls, got)
}

func TestAssemblerSplitsCallsWithoutIDsByName(t *testing.T) {
	got := assemble([]openai.ToolCall{
		delta(nil, "", "Read", `{"file_path":"a.txt"}`),
		delta(nil, "", "Bash", `{"command":"ls"}`),
	}, []openai.ToolCall{
		delta(idx(0), "", "Read", `{}`),
		delta(idx(0), "", "Bash", `{}`),
	})
	require.Equal(t, []string{"Read", "Bash", "Read", "Bash"}, names(got))
}

func TestAssemblerSynthesizesMissingIDsInOrder(t *testing.T) {
	got := assemble([]openai.ToolCall{
		delta(nil, "", "Read", `{}`),
		delta(nil, "call_2", "Write", `{}`),
		delta(nil, "", "Bash", `{}`),
	})
	require.Equal(t, []string{"call_0", "call_2", "call_2_"}, ids(got), "synthesized ids never collide with given ones")

	again := assemble([]openai.ToolCall{
		delta(nil, "", "Read", `{}`),
		delta(nil, "call_2", "Write", `{}`),
		delta(nil, "", "Bash", `{}`),
	})
	require.Equal(t, got, again, "the same deltas give the same ids")
}

func TestAssemblerKeepsArgumentsVerbatimAndFillsEmptyOnes(t *testing.T) {
	got := assemble(
		[]openai.ToolCall{delta(idx(0), "a", "Read", `{ "file_path" :`)},
		[]openai.ToolCall{delta(idx(0), "", "", ` "x" , }`)},
		[]openai.ToolCall{delta(idx(1), "b", "Bash", "")},
	)
	require.Equal(t, `{ "file_path" : "x" , }`, got[0].Arguments, "not re-encoded, even when invalid")
	require.Equal(t, "{}", got[1].Arguments)
}

func TestAssemblerOrdersCallsByFirstAppearance(t *testing.T) {
	got := assemble(
		[]openai.ToolCall{delta(idx(1), "call_b", "Bash", `{"command":"ls"}`)},
		[]openai.ToolCall{delta(idx(0), "call_r", "Read", `{"file_path":"a.txt"}`)},
	)
	require.Equal(t, []string{"call_b", "call_r"}, ids(got))
}

func TestAssemblerWithNoDeltasHasNoCalls(t *testing.T) {
	var a activities.ToolCallAssembler
	a.Add(nil)
	require.Nil(t, a.Calls())
}

func names(calls []protocol.ToolCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Name)
	}
	return out
}

func ids(calls []protocol.ToolCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.ID)
	}
	return out
}
