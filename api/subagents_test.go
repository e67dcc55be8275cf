package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

func TestSubagentEventsReachTheParentStreamAndItsApprovalIsDecidedByRequestIDAlone(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) { s.Agents = []workflows.AgentDef{notetaker} }))
	_, msgs := st.chat(t, `{"query":"use a subagent to take notes"}`)
	seq := 0

	events := untilEvent(t, msgs, &seq, "subagent_approval_request", 1)
	req := events[len(events)-1]
	var sub []string
	for _, e := range events {
		if strings.HasPrefix(e.Type, protocol.EventSubagentPrefix) {
			require.Equal(t, "notetaker", e.Name, e.Type)
			sub = append(sub, e.Type)
		}
	}
	require.Equal(t, []string{"subagent_start", "subagent_token", "subagent_tool_call", "subagent_approval_request"}, dedupe(sub))
	require.Equal(t, protocol.ToolWrite, req.ToolName)
	turnID := findType(events, protocol.EventTurnStart).TurnID
	require.NotEqual(t, turnID, req.WorkflowID, "the subagent waits in its own workflow")
	// GET /approvals names the subagent's turn, for the inbox's link.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pending := approvalsAt(c, st.api.URL, "")
		require.Len(c, pending, 1)
		require.Equal(c, req.WorkflowID, pending[0].WorkflowID)
		require.Equal(c, turnID, pending[0].TurnID)
	}, waitFor, 20*time.Millisecond)

	postDecision(t, st.api, req.RequestID, protocol.DecisionApprove, "", true)

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, "notetaker", findType(rest, "subagent_finish").Name)
	task := findType(rest, protocol.EventToolResult).ToolResults[0]
	require.Equal(t, protocol.TaskTool, task.Name)
	require.Equal(t, protocol.StatusOK, task.Status)
	require.Contains(t, task.Result, "Write ran", "the Task result is the subagent's final answer")
	require.Equal(t, protocol.FinishStop, rest[len(rest)-1].Reason)
	_, err := os.Stat(filepath.Join(st.workspace, scripted.DemoNotePath))
	require.NoError(t, err, "the subagent's approved Write ran")
}

func findType(events []protocol.Event, typ string) protocol.Event {
	for _, e := range events {
		if e.Type == typ {
			return e
		}
	}
	return protocol.Event{}
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
