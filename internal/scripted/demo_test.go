package scripted_test

import (
	"encoding/json"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
)

func userTurn(query string) []openai.ChatCompletionMessage {
	return []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You are tollgate."},
		{Role: openai.ChatMessageRoleUser, Content: query},
	}
}

func TestDemoAnswersUserWithThreeToolCalls(t *testing.T) {
	demo := scripted.Demo()
	req := openai.ChatCompletionRequest{Messages: userTurn("what is <this> & that?")}
	reply := demo(req)

	require.Equal(t, scripted.DemoIntro, reply.Content)
	require.Len(t, reply.ToolCalls, 3)
	var names, ids []string
	for _, c := range reply.ToolCalls {
		names = append(names, c.Name)
		ids = append(ids, c.ID)
		require.True(t, json.Valid([]byte(c.Arguments)), c.Arguments)
	}
	require.Equal(t, []string{"Read", "Write", "Bash"}, names)
	require.Equal(t, []string{"call_0_0", "call_0_1", "call_0_2"}, ids)
	require.JSONEq(t, `{"file_path":"README.md"}`, reply.ToolCalls[0].Arguments)
	require.JSONEq(t, `{"command":"ls -la"}`, reply.ToolCalls[2].Arguments)

	var write struct {
		FilePath string `json:"file_path"`
		Content  string `json:"content"`
	}
	require.NoError(t, json.Unmarshal([]byte(reply.ToolCalls[1].Arguments), &write))
	require.Equal(t, scripted.DemoNotePath, write.FilePath)
	require.Contains(t, write.Content, "what is <this> & that?")
	require.Contains(t, reply.ToolCalls[1].Arguments, "<this> &", "arguments are not HTML-escaped")

	require.Equal(t, reply, demo(req), "the same request gets the same reply")
}

func TestDemoToolCallIDsFollowTheConversation(t *testing.T) {
	msgs := append(userTurn("first"),
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "x"},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "y"},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: "second"},
	)
	reply := scripted.Demo()(openai.ChatCompletionRequest{Messages: msgs})
	require.Equal(t, "call_2_0", reply.ToolCalls[0].ID)
}

func TestDemoSummarizesEachToolResult(t *testing.T) {
	first := scripted.Demo()(openai.ChatCompletionRequest{Messages: userTurn("hello")})
	assistant := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: first.Content}
	for _, c := range first.ToolCalls {
		assistant.ToolCalls = append(assistant.ToolCalls, openai.ToolCall{
			ID: c.ID, Type: openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments},
		})
	}
	// The words of turns begun before the plain-not-run patch, and after.
	for _, notRun := range [][2]string{
		{protocol.DeclinedResponse + " Reason: not in my repo", protocol.TimeoutResponse},
		{protocol.PersonDeclined + protocol.DoNotRetry + protocol.TheirReason + "not in my repo", protocol.NoDecision + protocol.DoNotRetry},
	} {
		msgs := append(userTurn("hello"), assistant,
			openai.ChatCompletionMessage{Role: "tool", ToolCallID: "call_0_0", Name: "Read", Content: "# tollgate\n\nRuns agents."},
			openai.ChatCompletionMessage{Role: "tool", ToolCallID: "call_0_1", Content: notRun[0]},
			openai.ChatCompletionMessage{Role: "tool", ToolCallID: "call_0_2", Name: "Bash", Content: notRun[1]},
		)
		req := openai.ChatCompletionRequest{Messages: msgs}
		reply := scripted.Demo()(req)

		require.Empty(t, reply.ToolCalls)
		require.Contains(t, reply.Content, "3 tool calls")
		require.Contains(t, reply.Content, `Read ran and returned 3 lines starting with "# tollgate"`)
		require.Contains(t, reply.Content, `Write was declined, with the reason "not in my repo"`, "the name comes from the assistant's call")
		require.Contains(t, reply.Content, "Bash got no decision in time")
		require.Contains(t, reply.Content, "So 2 calls did not run")
		require.Equal(t, reply, scripted.Demo()(req), "the same request gets the same reply")
	}
}

func TestDemoSummaryStreamsInManyChunks(t *testing.T) {
	msgs := append(userTurn("hello"),
		openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "c", Type: "function", Function: openai.FunctionCall{Name: "Bash"}}}},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: "c", Content: "total 0"},
	)
	s := scripted.New(func(req openai.ChatCompletionRequest) scripted.Reply {
		return scripted.Demo()(openai.ChatCompletionRequest{Messages: msgs})
	})
	chunks := receive(t, start(t, s))
	text, pieces := contentOf(chunks)
	require.Contains(t, text, `Bash ran and returned "total 0".`)
	require.Contains(t, text, "Everything I asked for ran.")
	require.Greater(t, pieces, 10)
}
