package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/workflows"
)

func TestSubagentEventsReachTheParentStreamAndItsApprovalIsDecidedByRequestIDAlone(t *testing.T) {
	st := newStack(t, withSettings(func(s *workflows.Settings) { s.Agents = []workflows.AgentDef{notetaker} }))
	_, msgs := st.chat(t, `{"query":"use a subagent to take notes"}`)
	seq := 0

	events := untilEvent(t, msgs, &seq, "subagent_approval_request", 1)
	req := events[len(events)-1]
	var sub []string
	for _, e := range events {
		if strings.HasPrefix(e.Type, workflows.EventSubagentPrefix) {
			require.Equal(t, "notetaker", e.Name, e.Type)
			sub = append(sub, e.Type)
		}
	}
	require.Equal(t, []string{"subagent_start", "subagent_token", "subagent_tool_call", "subagent_approval_request"}, dedupe(sub))
	require.Equal(t, activities.ToolWrite, req.ToolName)
	turnID := findType(events, workflows.EventTurnStart).TurnID
	require.NotEqual(t, turnID, req.WorkflowID, "the subagent waits in its own workflow")
	// GET /approvals names the subagent's turn, for the inbox's link.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pending := approvalsAt(c, st.api.URL, "")
		require.Len(c, pending, 1)
		require.Equal(c, req.WorkflowID, pending[0].WorkflowID)
		require.Equal(c, turnID, pending[0].TurnID)
	}, waitFor, 20*time.Millisecond)

	postDecision(t, st.api, req.RequestID, workflows.DecisionApprove, "", true)

	rest := untilEvent(t, msgs, &seq, workflows.EventFinish, 1)
	require.Equal(t, "notetaker", findType(rest, "subagent_finish").Name)
	task := findType(rest, workflows.EventToolResult).ToolResults[0]
	require.Equal(t, workflows.TaskTool, task.Name)
	require.Equal(t, activities.StatusOK, task.Status)
	require.Contains(t, task.Result, "Write ran", "the Task result is the subagent's final answer")
	require.Equal(t, workflows.FinishStop, rest[len(rest)-1].Reason)
	_, err := os.Stat(filepath.Join(st.workspace, scripted.DemoNotePath))
	require.NoError(t, err, "the subagent's approved Write ran")
}

// pickColor is a model that calls the client tool PickColor, then says what
// the client answered.
func pickColor(req openai.ChatCompletionRequest) scripted.Reply {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == openai.ChatMessageRoleTool {
		return scripted.Reply{Content: "You picked " + last.Content + "."}
	}
	return scripted.Reply{ToolCalls: []activities.ToolCall{{ID: "call_pick_1", Name: "PickColor", Arguments: `{"palette":"warm"}`}}}
}

func TestClientToolIsAnsweredByToolCallIDAloneOverHTTP(t *testing.T) {
	st := newStack(t, withScript(pickColor))
	_, msgs := st.chat(t, `{"query":"paint it","clientTools":[{"name":"PickColor","description":"asks the user for a color","parameters":{"type":"object"}}]}`)
	seq := 0
	call := untilEvent(t, msgs, &seq, workflows.EventClientToolCall, 1)
	require.Equal(t, "call_pick_1", call[len(call)-1].ToolCallID)

	status, body := st.postJSON(t, "/chat/tool-result", `{"toolCallId":"call_pick_1","result":"blue"}`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, true, body["accepted"])
	rest := untilEvent(t, msgs, &seq, workflows.EventFinish, 1)
	require.Equal(t, "You picked blue.", rest[len(rest)-1].Text)

	_, body = st.postJSON(t, "/chat/tool-result", `{"toolCallId":"call_pick_1","result":"red"}`)
	require.Equal(t, false, body["accepted"], "nothing waits for it any more")
	status, body = st.postJSON(t, "/chat/tool-result", `{"result":"red"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body["error"], "toolCallId")
}

func TestRememberedApprovalSkipsTheNextAskUntilRevokedOverHTTP(t *testing.T) {
	st := newStack(t)
	conv := "grants-1"
	decide := func(e workflows.Event, body string) {
		t.Helper()
		_, out := st.postJSON(t, "/chat/approval", `{"requestId":"`+e.RequestID+`",`+body+`}`)
		require.Equal(t, true, out["accepted"])
	}

	// Turn 1: Bash approved and remembered; Write declined.
	_, msgs := st.chat(t, `{"query":"one","conversationId":"`+conv+`"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, workflows.EventApprovalRequest, 2))
	decide(asked["Bash"], `"decision":"approve","remember":"conversation"`)
	decide(asked["Write"], `"decision":"decline"`)
	untilEvent(t, msgs, &seq, workflows.EventFinish, 1)

	// Turn 2: only Write asks; Bash is decided by the grant.
	_, msgs = st.chat(t, `{"query":"two","conversationId":"`+conv+`"}`)
	seq = 0
	events := untilEvent(t, msgs, &seq, workflows.EventHeartbeat, 1)
	require.Len(t, requestsByTool(events), 1)
	write := requestsByTool(events)["Write"]
	grantUsed := findType(events, workflows.EventApprovalDecision)
	require.NotEmpty(t, grantUsed.Grant)
	require.Equal(t, workflows.DecisionApprove, grantUsed.Decision)
	decide(write, `"decision":"decline"`)
	untilEvent(t, msgs, &seq, workflows.EventFinish, 1)

	// Another conversation, while the grant holds: it asks for both.
	_, other := st.chat(t, `{"query":"one","conversationId":"grants-other"}`)
	otherSeq := 0
	require.Len(t, requestsByTool(untilEvent(t, other, &otherSeq, workflows.EventApprovalRequest, 2)), 2)
	require.Empty(t, st.grants(t, "grants-other"), "another conversation has none")

	// The grant is listed, revoked once, and then gone.
	grants := st.grants(t, conv)
	require.Len(t, grants, 1)
	require.Equal(t, grantUsed.Grant, grants[0].ID)
	require.Equal(t, "Bash", grants[0].Tool)
	require.Equal(t, http.StatusOK, st.delete(t, "/conversations/"+conv+"/grants/"+grants[0].ID))
	require.Equal(t, http.StatusNotFound, st.delete(t, "/conversations/"+conv+"/grants/"+grants[0].ID))
	require.Empty(t, st.grants(t, conv))

	// Turn 3: Bash asks again.
	_, msgs = st.chat(t, `{"query":"three","conversationId":"`+conv+`"}`)
	seq = 0
	require.Contains(t, requestsByTool(untilEvent(t, msgs, &seq, workflows.EventApprovalRequest, 2)), "Bash")
}

func (st *stack) grants(t *testing.T, conv string) []workflows.Grant {
	t.Helper()
	resp, err := http.Get(st.api.URL + "/conversations/" + conv + "/grants")
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct {
		Grants []workflows.Grant `json:"grants"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Grants
}

func (st *stack) delete(t *testing.T, path string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, st.api.URL+path, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func findType(events []workflows.Event, typ string) workflows.Event {
	for _, e := range events {
		if e.Type == typ {
			return e
		}
	}
	return workflows.Event{}
}

// dedupe drops repeats that follow each other (a run of token events).
func dedupe(types []string) []string {
	var out []string
	for _, typ := range types {
		if len(out) == 0 || out[len(out)-1] != typ {
			out = append(out, typ)
		}
	}
	return out
}
