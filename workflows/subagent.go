package workflows

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/agents"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// AgentDef is a subagent definition (package agents reads them).
type AgentDef = agents.Def

// SubagentInput starts a Subagent workflow.
type SubagentInput struct {
	ParentWorkflowID string   `json:"parentWorkflowId"`
	ConversationID   string   `json:"conversationId"`
	Agent            AgentDef `json:"agent"`
	Description      string   `json:"description"`
	Prompt           string   `json:"prompt"`
	BypassApproval   bool     `json:"bypassApproval,omitempty"`
	// Sender is the principal who sent the message the parent runs for.
	Sender string `json:"sender,omitempty"`
	// Depth is 1 for a subagent of a turn, 2 for one of a subagent, ...
	Depth int `json:"depth"`
	// Settings are the parent's: the same policy, timeouts and limits.
	Settings Settings `json:"settings"`
	// Grants are the conversation's remembered decisions.
	Grants []contract.Grant `json:"grants,omitempty"`
	// UserMessage is the user's message the turn runs for, which people
	// deciding the subagent's calls are shown.
	UserMessage string `json:"userMessage,omitempty"`
}

// SubagentOutput is a finished subagent.
type SubagentOutput struct {
	FinishReason string `json:"finishReason"`
	Text         string `json:"text,omitempty"`
	Message      string `json:"message,omitempty"`
	// Forwarded is how many events the subagent sent its parent; the parent
	// waits until it has them all before it goes on.
	Forwarded int `json:"forwarded"`
	// Grants are the decisions remembered in the subagent; GrantsUsed the
	// calls each grant decided in it.
	Grants     []contract.Grant `json:"grants,omitempty"`
	GrantsUsed map[string]int   `json:"grantsUsed,omitempty"`
	// Usage is what the subagent spent (tokens and tool calls), which its
	// parent counts.
	Usage contract.Usage `json:"usage,omitempty,omitzero"`
}

// SubagentEvents is the payload of the subagentEvents signal.
type SubagentEvents struct {
	WorkflowID string           `json:"workflowId"`
	Name       string           `json:"name"`
	Events     []protocol.Event `json:"events"`
}

// subagentState is what a loop knows of the subagents it started.
type subagentState struct {
	started int
	// running is the subagent that runs now, if any.
	running workflow.ChildWorkflowFuture
	// received counts the events each subagent (by workflow ID) forwarded.
	received map[string]int
}

// interrupt passes an interrupt on to the running subagent, if any.
func (s *subagentState) interrupt(ctx workflow.Context, reason string) {
	if s.running != nil {
		s.running.SignalChildWorkflow(ctx, contract.InterruptSignal, Interrupt{Reason: reason})
	}
}

// toolsFor lists the tools offered to a loop: a turn (def nil, depth 0)
// gets every tool, and Task when there are subagents; a subagent gets those
// its definition allows (all when it names none) less the disallowed ones,
// and Task only when its definition names Task and the depth limit allows.
func (s Settings) toolsFor(def *AgentDef, depth int) []protocol.ToolSpec {
	var tools []protocol.ToolSpec
	for _, t := range s.Tools {
		if def == nil || allowed(def, t.Name, s.mcpServerName(t.Name)) {
			tools = append(tools, t)
		}
	}
	canNest := len(s.Agents) > 0 && depth < s.MaxSubagentDepth
	if canNest && (def == nil || (slices.Contains(def.Tools, protocol.TaskTool) && allowed(def, protocol.TaskTool, ""))) {
		tools = append(tools, taskSpec(s.Agents))
	}
	return tools
}

// allowed reports whether def lets its subagent call tool. server, for an
// MCP tool, is the name that stands for all its server's tools
// (mcp__<server>), which a definition may list instead of each tool.
func allowed(def *AgentDef, tool, server string) bool {
	names := func(list []string) bool {
		return slices.Contains(list, tool) || (server != "" && slices.Contains(list, server))
	}
	if names(def.DisallowedTools) {
		return false
	}
	return len(def.Tools) == 0 || names(def.Tools)
}

// taskSpec describes the Task tool with the defined subagents.
func taskSpec(agents []AgentDef) protocol.ToolSpec {
	var names []string
	var list strings.Builder
	for _, a := range agents {
		names = append(names, a.Name)
		fmt.Fprintf(&list, "\n- %s: %s", a.Name, a.Description)
	}
	params, _ := json.Marshal(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"subagent_type": map[string]any{"type": "string", "enum": names, "description": "The subagent to run."},
			"description":   map[string]any{"type": "string", "description": "A short (3-5 word) description of the task."},
			"prompt":        map[string]any{"type": "string", "description": "The task for the subagent to perform."},
		},
		"required":             []string{"subagent_type", "description", "prompt"},
		"additionalProperties": false,
	})
	return protocol.ToolSpec{
		Name:        protocol.TaskTool,
		Description: "Start a subagent to handle a task on its own; its final answer is this tool's result. Subagents:" + list.String(),
		Parameters:  params,
	}
}

// taskArgs are the Task tool's arguments.
type taskArgs struct {
	SubagentType string `json:"subagent_type"`
	Description  string `json:"description"`
	Prompt       string `json:"prompt"`
}

// runSubagent runs a Task call as a child Subagent workflow and answers the
// model with the subagent's final text.
func (t *turn) runSubagent(ctx workflow.Context, call protocol.ToolCall) activities.ToolOutput {
	fail := func(format string, args ...any) activities.ToolOutput {
		return activities.ToolOutput{Status: protocol.StatusError, Result: "Task: " + fmt.Sprintf(format, args...)}
	}
	var args taskArgs
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil {
		return fail("bad arguments: %v", err)
	}
	if args.SubagentType == "" || strings.TrimSpace(args.Prompt) == "" {
		return fail("subagent_type and prompt are required")
	}
	i := slices.IndexFunc(t.settings.Agents, func(a AgentDef) bool { return a.Name == args.SubagentType })
	if i < 0 {
		var names []string
		for _, a := range t.settings.Agents {
			names = append(names, a.Name)
		}
		return fail("unknown subagent_type %q; the subagents are: %s", args.SubagentType, strings.Join(names, ", "))
	}
	def := t.settings.Agents[i]
	if def.Error != "" {
		return fail("the definition of subagent %q is invalid: %s", def.Name, def.Error)
	}

	t.subagents.started++
	parentID := workflow.GetInfo(ctx).WorkflowExecution.ID
	opts := workflow.ChildWorkflowOptions{
		WorkflowID:        contract.SubagentWorkflowID(parentID, t.subagents.started),
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		StaticSummary:     text.Truncate("subagent "+def.Name+": "+args.Description, 200),
		// A cancelled parent waits for the subagent to decline its pending
		// approvals and forward how it ended.
		WaitForCancellation: true,
	}
	if t.settings.SearchAttributes {
		opts.TypedSearchAttributes = temporal.NewSearchAttributes(startAttributes(t.conversationID, t.settings)...)
	}
	child := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), contract.SubagentWorkflow, SubagentInput{
		ParentWorkflowID: parentID,
		ConversationID:   t.conversationID,
		Agent:            def,
		Description:      args.Description,
		Prompt:           args.Prompt,
		BypassApproval:   t.bypass,
		Sender:           t.sender,
		Depth:            t.depth + 1,
		Settings:         t.settings,
		Grants:           t.grants,
		UserMessage:      t.userMessage,
	})
	t.subagents.running = child
	var out SubagentOutput
	err := child.Get(ctx, &out)
	t.subagents.running = nil
	if err != nil {
		return fail("subagent %q did not finish: %s", def.Name, activityErrorMessage(err))
	}
	// The subagent's events reach this workflow as signals before its
	// result; wait until all are in the log, so they precede tool_result.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.Await(dctx, func() bool { return t.subagents.received[opts.WorkflowID] >= out.Forwarded })
	for _, id := range slices.Sorted(maps.Keys(out.GrantsUsed)) {
		t.countGrantUse(id, out.GrantsUsed[id])
	}
	t.used = t.used.Add(contract.Usage{Tokens: out.Usage.Tokens, ToolCalls: out.Usage.ToolCalls})
	for _, g := range out.Grants {
		t.remember(g)
	}

	switch out.FinishReason {
	case protocol.FinishStop:
		return activities.ToolOutput{Status: protocol.StatusOK, Result: out.Text}
	case protocol.FinishMaxSteps:
		return fail("subagent %q stopped after %d steps without a final answer", def.Name, t.settings.MaxSteps)
	case protocol.FinishCancelled:
		return fail("subagent %q was cancelled", def.Name)
	default:
		return fail("subagent %q failed: %s", def.Name, out.Message)
	}
}

// onSubagentEvents adds a subagent's forwarded events to this loop's log,
// typed subagent_* and tagged with the subagent's name. Heartbeats stay
// plain heartbeats; a subagent's error is told by its subagent_finish.
func (t *turn) onSubagentEvents(in SubagentEvents) {
	if t.subagents.received == nil {
		t.subagents.received = map[string]int{}
	}
	t.subagents.received[in.WorkflowID] += len(in.Events)
	for _, e := range in.Events {
		e.Seq = 0
		switch {
		case e.Type == protocol.EventError:
			continue
		case e.Type == protocol.EventHeartbeat:
		case e.Type == protocol.EventTurnStart:
			e.Type = protocol.EventSubagentStart
		case e.Type == protocol.EventFinish:
			e.Type = protocol.EventSubagentFinish
		case strings.HasPrefix(e.Type, protocol.EventSubagentPrefix):
			// A nested subagent's event keeps its own type and name.
			t.log.append(e)
			continue
		default:
			e.Type = protocol.EventSubagentPrefix + e.Type
		}
		e.Name = in.Name
		t.log.append(e)
	}
}

// Subagent runs a subagent: the same model/tool loop as a turn, with the
// definition's prompt and allowed tools, the parent's approval policy and
// limits, and its events forwarded to the parent's stream.
func (w *Workflows) Subagent(ctx workflow.Context, in SubagentInput) (SubagentOutput, error) {
	def := in.Agent
	model := cmp.Or(def.Model, in.Settings.Model)
	t := &turn{
		settings:       in.Settings.withDefaults(), // an older parent's may lack newer fields
		conversationID: in.ConversationID,
		input:          []protocol.Message{{Role: protocol.RoleUser, Content: in.Prompt}},
		system:         def.Prompt,
		tools:          in.Settings.toolsFor(&def, in.Depth),
		model:          model,
		bypass:         in.BypassApproval,
		frozen:         w.Admin.Frozen,
		sender:         in.Sender,
		depth:          in.Depth,
		agent:          def.Name,
		userMessage:    in.UserMessage,
		grants:         slices.Clone(in.Grants),
	}
	f := newForwarder(ctx, in.ParentWorkflowID, def.Name)
	t.log.onAppend = f.add
	if err := t.start(ctx); err != nil {
		return SubagentOutput{}, err
	}
	reason, text := t.run(ctx)
	t.flushAudit(ctx)
	t.finish(reason, text)
	last := t.log.events[len(t.log.events)-1]
	return SubagentOutput{FinishReason: reason, Text: text, Message: last.Message, Forwarded: f.drain(ctx), Grants: t.newGrants, GrantsUsed: t.grantsUsed, Usage: t.used}, nil
}

// forwarder sends a subagent's events to its parent in order: one signal at
// a time, each carrying every event added since the last one.
type forwarder struct {
	parentID, name string
	outbox         []protocol.Event
	added, sent    int
}

func newForwarder(ctx workflow.Context, parentID, name string) *forwarder {
	f := &forwarder{parentID: parentID, name: name}
	self := workflow.GetInfo(ctx).WorkflowExecution.ID
	// Forwarding goes on after the subagent is cancelled, so the parent's
	// stream shows how it ended.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, func(ctx workflow.Context) {
		for {
			_ = workflow.Await(ctx, func() bool { return len(f.outbox) > 0 })
			batch := f.outbox
			f.outbox = nil
			err := workflow.SignalExternalWorkflow(ctx, f.parentID, "", contract.SubagentEventsSignal,
				SubagentEvents{WorkflowID: self, Name: f.name, Events: batch}).Get(ctx, nil)
			if err != nil {
				workflow.GetLogger(ctx).Warn("forward subagent events", "parent", f.parentID, "error", err)
			}
			f.sent += len(batch)
		}
	})
	return f
}

func (f *forwarder) add(e protocol.Event) {
	f.outbox = append(f.outbox, e)
	f.added++
}

// drain waits until every event added so far has been sent and returns how
// many were.
func (f *forwarder) drain(ctx workflow.Context) int {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.Await(dctx, func() bool { return f.sent == f.added })
	return f.sent
}
