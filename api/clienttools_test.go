package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// pickColor is a model that calls the client tool PickColor, then says what
// the client answered.
func pickColor(req openai.ChatCompletionRequest) scripted.Reply {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == openai.ChatMessageRoleTool {
		return scripted.Reply{Content: "You picked " + last.Content + "."}
	}
	return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: "call_pick_1", Name: "PickColor", Arguments: `{"palette":"warm"}`}}}
}

func TestClientToolIsAnsweredByToolCallIDAloneOverHTTP(t *testing.T) {
	t.Parallel()
	st := newStack(t, withScript(pickColor))
	_, msgs := st.chat(t, `{"query":"paint it","clientTools":[{"name":"PickColor","description":"asks the user for a color","parameters":{"type":"object"}}]}`)
	seq := 0
	call := untilEvent(t, msgs, &seq, protocol.EventClientToolCall, 1)
	require.Equal(t, "call_pick_1", call[len(call)-1].ToolCallID)

	status, body := st.postJSON(t, "/chat/tool-result", `{"toolCallId":"call_pick_1","result":"blue"}`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, true, body["accepted"])
	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, "You picked blue.", rest[len(rest)-1].Text)

	_, body = st.postJSON(t, "/chat/tool-result", `{"toolCallId":"call_pick_1","result":"red"}`)
	require.Equal(t, false, body["accepted"], "nothing waits for it any more")
	status, body = st.postJSON(t, "/chat/tool-result", `{"result":"red"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body["error"], "toolCallId")
}

func TestBadClientToolsAreRefusedBeforeTheConversationStarts(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	for name, c := range map[string]struct{ tools, want string }{
		"named like a worker tool": {`[{"name":"Bash","parameters":{"type":"object"}}]`, `"Bash"`},
		"named like an MCP tool":   {`[{"name":"mcp__files__write","parameters":{"type":"object"}}]`, "mcp__"},
		"declared twice":           {`[{"name":"Pick"},{"name":"Pick"}]`, "twice"},
		"workspace paths":          {`[{"name":"Upload","parameters":{"type":"object","properties":{"file_path":{"type":"string"}}},"workspacePaths":["file_path"]}]`, "workspacePaths"},
		"an MCP server":            {`[{"name":"Upload","mcp":{"server":"files","tool":"write"}}]`, "mcp"},
	} {
		t.Run(name, func(t *testing.T) {
			conv := "bad-tools-" + strings.ReplaceAll(name, " ", "-")
			status, body := st.postJSON(t, "/chat/stream", `{"query":"go","conversationId":"`+conv+`","clientTools":`+c.tools+`}`)
			require.Equal(t, http.StatusBadRequest, status, "%v", body)
			require.Contains(t, body["error"], "clientTools")
			require.Contains(t, body["error"], c.want)
			_, err := st.client.DescribeWorkflow(context.Background(), contract.ConversationWorkflowID(conv), "")
			var notFound *serviceerror.NotFound
			require.ErrorAs(t, err, &notFound, "a refused message starts no conversation")
		})
	}
}
