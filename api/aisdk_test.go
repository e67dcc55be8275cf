package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// aisdkDir holds the AI SDK's client, pinned in its package.json, and the
// script that drives it (`make ai-sdk` installs it).
const aisdkDir = "testdata/aisdk"

// aisdkResult is what chat.mjs prints: the SDK's messages at the end.
type aisdkResult struct {
	Status   string           `json:"status"`
	Messages []aisdkMessage   `json:"messages"`
	Log      []map[string]any `json:"log"`
	Errors   []string         `json:"errors"`
}

// aisdkMessage is a UI message as the SDK holds it.
type aisdkMessage struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	Metadata struct {
		Tollgate uiMetadata `json:"tollgate"`
	} `json:"metadata"`
	Parts []aisdkPart `json:"parts"`
}

// aisdkPart is a UI message part as the SDK holds it.
type aisdkPart struct {
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	State            string          `json:"state"`
	ToolCallID       string          `json:"toolCallId"`
	Input            json.RawMessage `json:"input"`
	Output           json.RawMessage `json:"output"`
	ErrorText        string          `json:"errorText"`
	ProviderExecuted bool            `json:"providerExecuted"`
	Approval         *struct {
		ID       string `json:"id"`
		Approved *bool  `json:"approved"`
		Reason   string `json:"reason"`
	} `json:"approval"`
	ToolMetadata map[string]any  `json:"toolMetadata"`
	ID           string          `json:"id"`
	Data         json.RawMessage `json:"data"`
}

// runAISDK runs scenario of chat.mjs in Node against the API at api, in
// conversation conv.
func runAISDK(t *testing.T, api, scenario, conv string) aisdkResult {
	t.Helper()
	if _, err := os.Stat(filepath.Join(aisdkDir, "node_modules", "ai", "package.json")); err != nil {
		require.NoError(t, err, "the AI SDK is missing: `make ai-sdk` installs it (it needs Node 20 and npm)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "chat.mjs", scenario, api, conv)
	cmd.Dir = aisdkDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "chat.mjs %s: %s", scenario, stderr.String())
	var out aisdkResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	require.Empty(t, out.Errors, "the SDK's onError")
	require.Equal(t, "ready", out.Status)
	return out
}

// assistant returns the result's only assistant message, which must be the
// conversation's turn n.
func (r aisdkResult) assistant(t *testing.T, conv string, n int) aisdkMessage {
	t.Helper()
	var got []aisdkMessage
	for _, m := range r.Messages {
		if m.Role == "assistant" {
			got = append(got, m)
		}
	}
	require.Len(t, got, 1, "one assistant message per turn: %+v", r.Messages)
	require.Equal(t, contract.TurnWorkflowID(conv, n), got[0].ID, "the message's id is its turn's")
	return got[0]
}

// tools returns m's tool parts by type.
func (m aisdkMessage) tools() map[string]aisdkPart {
	out := map[string]aisdkPart{}
	for _, p := range m.Parts {
		if strings.HasPrefix(p.Type, "tool-") {
			out[p.Type] = p
		}
	}
	return out
}

// text is m's text, its parts' in order.
func (m aisdkMessage) text() string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// aisdkModel answers "hello" with text alone, "paint it" with the client
// tool PickColor, and anything else as the demo model does.
func aisdkModel() scripted.Script {
	demo := scripted.Demo()
	return func(req openai.ChatCompletionRequest) scripted.Reply {
		var query string
		for _, m := range req.Messages {
			if m.Role == openai.ChatMessageRoleUser {
				query = m.Content
			}
		}
		switch query {
		case "hello":
			return scripted.Reply{Content: "Hello from tollgate, through the AI SDK."}
		case "paint it":
			return pickColor(req)
		}
		return demo(req)
	}
}

// TestTheAISDKsChatDrivesTurnsThroughTheGate drives the `ai` package's own
// chat, in Node, against a running tollgate: a turn of text, calls that ask
// answered with addToolApprovalResponse, a page reloaded while calls wait,
// a client tool answered with addToolOutput, and a subagent's call.
func TestTheAISDKsChatDrivesTurnsThroughTheGate(t *testing.T) {
	t.Parallel()
	st := newStack(t, withScript(aisdkModel()), withSettings(func(s *workflows.Settings) { s.Agents = []workflows.AgentDef{notetaker} }))

	t.Run("a turn's tokens are its message's text", func(t *testing.T) {
		t.Parallel()
		out := runAISDK(t, st.api.URL, "tokens", "aisdk-tokens")
		m := out.assistant(t, "aisdk-tokens", 1)
		require.Equal(t, "Hello from tollgate, through the AI SDK.", m.text())
		require.Equal(t, protocol.FinishStop, m.Metadata.Tollgate.FinishReason)
		require.Equal(t, "aisdk-tokens", m.Metadata.Tollgate.ConversationID)
		require.Equal(t, "step-start", m.Parts[0].Type)

		// Nothing runs: nothing to resume, as for a conversation that
		// does not exist.
		for _, conv := range []string{"aisdk-tokens", "aisdk-none"} {
			resp, err := http.Get(st.api.URL + "/ai-sdk/chat/" + conv + "/stream")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusNoContent, resp.StatusCode, conv)
		}
	})

	t.Run("an approval response approves a call and a declined one says why", func(t *testing.T) {
		t.Parallel()
		out := runAISDK(t, st.api.URL, "decide", "aisdk-decide")
		m := out.assistant(t, "aisdk-decide", 1)
		tools := m.tools()
		require.Equal(t, "output-available", tools["tool-Read"].State, "%+v", tools)
		require.True(t, tools["tool-Read"].ProviderExecuted, "tollgate runs its own tools")
		write, bash := tools["tool-Write"], tools["tool-Bash"]
		require.Equal(t, "output-denied", write.State)
		require.Equal(t, "no notes today", write.Approval.Reason)
		require.Equal(t, "output-available", bash.State)
		require.Contains(t, string(bash.Output), "README.md", "ls ran")
		require.Equal(t, protocol.FinishStop, m.Metadata.Tollgate.FinishReason)
		require.NotEmpty(t, m.text())

		// The decisions went through the gate, into the ledger, as the
		// SDK sent them.
		for tool, want := range map[string]struct{ decision, reason string }{
			protocol.ToolWrite: {protocol.DecisionDecline, "no notes today"},
			protocol.ToolBash:  {protocol.DecisionApprove, ""},
		} {
			rec := auditOf(t, st, "aisdk-decide", tool)
			require.Equal(t, want.decision, rec.Decision, tool)
			require.Equal(t, want.reason, rec.Reason, tool)
		}
	})

	t.Run("a reloaded chat resumes the turn while its calls wait", func(t *testing.T) {
		t.Parallel()
		out := runAISDK(t, st.api.URL, "resume", "aisdk-resume")
		require.Contains(t, out.Log, map[string]any{"resumed": []any{"tool-Write", "tool-Bash"}})
		m := out.assistant(t, "aisdk-resume", 1)
		tools := m.tools()
		require.Equal(t, "output-available", tools["tool-Write"].State, "%+v", tools)
		require.Equal(t, "output-available", tools["tool-Bash"].State)
		require.Equal(t, protocol.FinishStop, m.Metadata.Tollgate.FinishReason)
		for _, tool := range []string{protocol.ToolWrite, protocol.ToolBash} {
			require.Equal(t, protocol.DecisionApprove, auditOf(t, st, "aisdk-resume", tool).Decision, tool)
		}
	})

	t.Run("a client tool runs in onToolCall and its addToolOutput is the result", func(t *testing.T) {
		t.Parallel()
		out := runAISDK(t, st.api.URL, "client", "aisdk-client")
		var calls int
		for _, l := range out.Log {
			if l["onToolCall"] == "PickColor" {
				calls++
			}
		}
		require.Equal(t, 1, calls, "the client runs its tool once: %v", out.Log)
		m := out.assistant(t, "aisdk-client", 1)
		require.Equal(t, "You picked blue.", m.text())
		require.Equal(t, "output-available", m.tools()["tool-PickColor"].State)
	})

	t.Run("a subagent's call is approved in the chat", func(t *testing.T) {
		t.Parallel()
		out := runAISDK(t, st.api.URL, "subagent", "aisdk-subagent")
		require.Contains(t, out.Log, map[string]any{"asked": []any{"tool-Write"}, "subagent": []any{"notetaker"}})
		m := out.assistant(t, "aisdk-subagent", 1)
		tools := m.tools()
		require.Equal(t, "output-available", tools["tool-Write"].State, "%+v", tools)
		require.Equal(t, "output-available", tools["tool-Task"].State)
		require.Equal(t, protocol.FinishStop, m.Metadata.Tollgate.FinishReason)
		var subagent bool
		for _, p := range m.Parts {
			subagent = subagent || (p.Type == "data-tollgate-subagent" && strings.Contains(string(p.Data), `"state":"finished"`))
		}
		require.True(t, subagent, "the subagent's run is a data part: %+v", m.Parts)
	})
}

// auditRow is what these tests read of a GET /audit record.
type auditRow struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
}

// auditOf is the ledger's row of conv's call of tool.
func auditOf(t *testing.T, st *stack, conv, tool string) auditRow {
	t.Helper()
	resp, err := http.Get(st.api.URL + "/audit?conversationId=" + conv + "&tool=" + tool)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Records []auditRow `json:"records"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Len(t, out.Records, 1, "%s's rows of %s", conv, tool)
	return out.Records[0]
}

// TestAISDKChatObeysTheAPIsRules sends POST /ai-sdk/chat what the rest of
// the API refuses, an approval response with a token that may chat but
// not approve, and a message with one that may approve but not chat (as
// POST /chat/approval and POST /chat/stream need): each is refused before
// anything reaches Temporal.
func TestAISDKChatObeysTheAPIsRules(t *testing.T) {
	t.Parallel()
	tokens := []config.APIToken{
		{Token: "chat-token-0123456789", Principal: "dev", Roles: []string{config.RoleChat}},
		{Token: "both-token-0123456789", Principal: "lead", Roles: []string{config.RoleChat, config.RoleApprove}},
		{Token: "approve-token-0123456", Principal: "rev", Roles: []string{config.RoleApprove}},
		{Token: "bypass-token-01234567", Principal: "bot", Roles: []string{config.RoleBypass}},
	}
	h := docServer(t, tokens).Handler()
	answer := `{"id":"c1","trigger":"submit-message","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"go"}]},` +
		`{"id":"tollgate-conv-c1-turn-1","role":"assistant","parts":[{"type":"tool-Write","toolCallId":"call_0_1","state":"approval-responded",` +
		`"input":{},"approval":{"id":"tollgate-conv-c1-turn-1/apr-0123","approved":true}}]}]}`
	for name, tc := range map[string]struct {
		token, contentType, origin, body string
		status                           int
		says                             string
	}{
		"no token":                        {"", "application/json", "", answer, http.StatusUnauthorized, "authorization required"},
		"an approval with a chat token":   {"chat-token-0123456789", "application/json", "", answer, http.StatusForbidden, "role approve"},
		"a message with an approve token": {"approve-token-0123456", "application/json", "", `{"id":"c1","messages":[{"id":"m","role":"user","parts":[{"type":"text","text":"go"}]}]}`, http.StatusForbidden, "role chat"},
		"a token that may neither":        {"bypass-token-01234567", "application/json", "", answer, http.StatusForbidden, "role chat or approve"},
		"a foreign origin":                {"both-token-0123456789", "application/json", "https://evil.example", answer, http.StatusForbidden, "may not change anything"},
		"a body that is not JSON":         {"both-token-0123456789", "text/plain", "", answer, http.StatusUnsupportedMediaType, ""},
		"a body past the limit":           {"both-token-0123456789", "application/json", "", `{"id":"c1","messages":["` + strings.Repeat("x", maxBodyBytes) + `"]}`, http.StatusRequestEntityTooLarge, "64 KiB"},
		"no id":                           {"both-token-0123456789", "application/json", "", `{"messages":[{"role":"user","parts":[]}]}`, http.StatusBadRequest, "id is missing"},
		"a last message of the system":    {"both-token-0123456789", "application/json", "", `{"id":"c1","messages":[{"role":"system","parts":[]}]}`, http.StatusBadRequest, "role"},
		"a user message with no text":     {"both-token-0123456789", "application/json", "", `{"id":"c1","messages":[{"id":"m","role":"user","parts":[]}]}`, http.StatusBadRequest, "query is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/ai-sdk/chat", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.contentType)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tc.says)
		})
	}
}
