package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

const childID = "default-test-workflow-id-sub-1"

func subagentSettings() Settings {
	s := testSettings()
	s.Agents = []AgentDef{
		{Name: "writer", Description: "writes files", Tools: []string{"Read", "Write"}, Prompt: "You write files."},
		{Name: "auditor", Description: "reads only", DisallowedTools: []string{"Write", "Edit", "Bash"}, Prompt: "You read."},
		{Name: "broken", Error: "broken.md: front matter: name is missing"},
	}
	return s
}

func task(agent, prompt string) activities.ModelOutput {
	return calls(call("t", protocol.TaskTool, `{"subagent_type":"`+agent+`","description":"a task","prompt":"`+prompt+`"}`))
}

// decideChild sends an approval Update to the subagent's own workflow.
func (h *harness) decideChild(d protocol.ApprovalDecision) {
	require.NoError(h.t, h.env.UpdateWorkflowByID(childID, contract.ApprovalUpdate, "decide-"+d.RequestID, &testsuite.TestUpdateCallback{
		OnAccept: func() {}, OnReject: func(err error) { h.t.Errorf("rejected: %v", err) }, OnComplete: func(any, error) {},
	}, d))
}

// subagentRequestID returns the request id of the subagent's approval as the
// parent's stream shows it.
func (h *harness) subagentRequestID() string {
	h.t.Helper()
	for _, e := range h.events() {
		if e.Type == "subagent_approval_request" {
			require.Equal(h.t, childID, e.WorkflowID)
			return e.RequestID
		}
	}
	h.t.Fatal("no subagent_approval_request in the parent's events")
	return ""
}

func TestSubagentProtectedCallApprovedRunsAndItsAnswerIsTheTaskResult(t *testing.T) {
	h := newHarness(t, subagentSettings(),
		task("writer", "write a note"),
		calls(call("w", "Write", `{"file_path":"n.txt","content":"hi"}`)),
		activities.ModelOutput{Content: "note written"},
		activities.ModelOutput{Content: "all done"},
	)
	h.env.RegisterDelayedCallback(func() {
		h.decideChild(protocol.ApprovalDecision{RequestID: h.subagentRequestID(), Decision: protocol.DecisionApprove})
	}, time.Second)

	out := h.runTurn(userTurn("delegate"))

	require.Equal(t, []string{"Write"}, h.ranTools())
	require.Equal(t, "note written", toolMessages(out.Messages)[0].Content)
	require.Equal(t, "all done", out.Text)
	// The subagent's events sit in the parent's one sequence, in order,
	// named, between the Task call and its result.
	require.Equal(t, []string{
		protocol.EventTurnStart, protocol.EventToolCall,
		"subagent_start", "subagent_tool_call", "subagent_approval_request", protocol.EventHeartbeat,
		"subagent_approval_decision", "subagent_tool_result", "subagent_token", "subagent_finish",
		protocol.EventToolResult, protocol.EventToken, protocol.EventFinish,
	}, eventTypes(out.Events))
	for i, e := range out.Events {
		require.Equal(t, i+1, e.Seq)
		if i >= 2 && i <= 9 && e.Type != protocol.EventHeartbeat {
			require.Equal(t, "writer", e.Name, e.Type)
		}
	}
	// The subagent ran with its own prompt and only the tools it may use.
	sub := h.modelInputs[1]
	require.Equal(t, "You write files.", sub.Messages[0].Content)
	require.Equal(t, "write a note", sub.Messages[1].Content)
	require.Equal(t, []string{"Read", "Write"}, toolNames(sub.Tools))
	require.Equal(t, []string{"Read", "Write", "Edit", "Bash", protocol.TaskTool}, toolNames(h.modelInputs[0].Tools))
}

func TestSubagentProtectedCallDeclinedAnswersItsModel(t *testing.T) {
	h := newHarness(t, subagentSettings(),
		task("writer", "write"),
		calls(call("w", "Write", `{"file_path":"n.txt","content":"hi"}`)),
		activities.ModelOutput{Content: "could not write"},
	)
	h.env.RegisterDelayedCallback(func() {
		h.decideChild(protocol.ApprovalDecision{RequestID: h.subagentRequestID(), Decision: protocol.DecisionDecline, Reason: "no"})
	}, time.Second)

	out := h.runTurn(userTurn("delegate"))

	require.Empty(t, h.ranTools())
	require.Equal(t, "Not executed: a person declined this call. Do not call it again unless the user asks you to. Their reason: no", toolMessages(h.modelInputs[2].Messages)[0].Content)
	require.Equal(t, "could not write", toolMessages(out.Messages)[0].Content)
}

func TestSubagentProtectedCallTimesOut(t *testing.T) {
	h := newHarness(t, subagentSettings(),
		task("writer", "write"),
		calls(call("w", "Write", `{"file_path":"n.txt","content":"hi"}`)),
	)

	out := h.runTurn(userTurn("delegate"))

	require.Empty(t, h.ranTools())
	require.Equal(t, "Not executed: nobody decided on this call in time, so it did not run. Do not call it again unless the user asks you to.", toolMessages(h.modelInputs[2].Messages)[0].Content)
	decision := findEvent(t, out.Events, "subagent_approval_decision")
	require.Equal(t, protocol.DecisionTimeout, decision.Decision)
	require.Equal(t, "writer", decision.Name)
}

func TestSubagentToolsFollowToolsAndDisallowedTools(t *testing.T) {
	h := newHarness(t, subagentSettings(), task("auditor", "look"), calls(call("b", "Bash", `{"command":"ls"}`)))

	h.runTurn(userTurn("delegate"))

	require.Equal(t, []string{"Read"}, toolNames(h.modelInputs[1].Tools))
	// A tool it was not given is refused even when the model asks for it.
	require.Empty(t, h.ranTools())
	require.Contains(t, toolMessages(h.modelInputs[2].Messages)[0].Content, `there is no tool named "Bash"`)
}

func TestSubagentInheritsBypassApproval(t *testing.T) {
	h := newHarness(t, subagentSettings(),
		task("writer", "write"),
		calls(call("w", "Write", `{"file_path":"n.txt","content":"hi"}`)),
	)
	in := userTurn("delegate")
	in.BypassApproval = true

	out := h.runTurn(in)

	require.Equal(t, []string{"Write"}, h.ranTools())
	require.NotContains(t, eventTypes(out.Events), "subagent_approval_request")
}

func TestUnknownOrBrokenSubagentIsAnErrorTheModelReads(t *testing.T) {
	h := newHarness(t, subagentSettings(), task("nobody", "x"), task("broken", "x"))

	out := h.runTurn(userTurn("delegate"))

	tools := toolMessages(out.Messages)
	require.Contains(t, tools[0].Content, `unknown subagent_type "nobody"; the subagents are: writer, auditor, broken`)
	require.Contains(t, tools[1].Content, "name is missing")
	require.NotContains(t, eventTypes(out.Events), "subagent_start")
}

func TestCancellingParentCancelsSubagentAndDeclinesItsApprovals(t *testing.T) {
	h := newHarness(t, subagentSettings(),
		task("writer", "write"),
		calls(call("w", "Write", `{"file_path":"n.txt","content":"hi"}`)),
	)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute)

	out := h.runTurn(userTurn("delegate"))

	require.Equal(t, protocol.FinishCancelled, out.FinishReason)
	require.Empty(t, h.ranTools())
	d := findEvent(t, out.Events, "subagent_approval_decision")
	require.Equal(t, protocol.DecisionDecline, d.Decision)
	require.Equal(t, reasonCancelled, d.Reason)
	require.Contains(t, eventTypes(out.Events), "subagent_finish")
}

func TestSubagentsNestOnlyWhenAllowedAndWithinDepth(t *testing.T) {
	s := subagentSettings().withDefaults()
	nester := AgentDef{Name: "lead", Tools: []string{"Read", protocol.TaskTool}}
	require.True(t, offers(s.toolsFor(&nester, 1), protocol.TaskTool))
	require.False(t, offers(s.toolsFor(&nester, 2), protocol.TaskTool), "depth limit")
	plain := AgentDef{Name: "any"}
	require.False(t, offers(s.toolsFor(&plain, 1), protocol.TaskTool), "Task only when named")
	s.Agents = nil
	require.False(t, offers(s.toolsFor(nil, 0), protocol.TaskTool), "no subagents, no Task")
}

func toolNames(specs []protocol.ToolSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Name)
	}
	return out
}
