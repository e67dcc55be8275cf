package workflows

import (
	"cmp"
	"slices"
	"time"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// DefaultSystemPrompt tells the model where it works and what a declined
// call means.
const DefaultSystemPrompt = "You are an agent working in a workspace folder with the tools you are given. " +
	"Some tool calls need a person's approval before they run; a declined call was not executed, " +
	"so do not assume its effect happened. Answer briefly when you are done."

// Heartbeat timeouts of the tool and model activities when Settings leave
// them zero (as the settings recorded by turns of older workers do).
const (
	DefaultToolHeartbeatTimeout  = 30 * time.Second
	DefaultModelHeartbeatTimeout = time.Minute
)

// Settings are the worker's choices that a turn follows. A turn records them
// in its history once, at its start (SideEffect), so a turn that a worker
// with other settings replays or resumes keeps the settings it began with.
type Settings struct {
	// RequiredTools are the tools whose calls wait for a person's approval,
	// unless Rules has a rule for the tool.
	RequiredTools []string `json:"requiredTools"`
	// Rules are the policy file's rules, at most one live rule and one
	// shadow rule (Rule.Shadow) a tool.
	Rules []Rule `json:"rules,omitempty"`
	// Notify is true when the worker sends notices of approval requests
	// (the notify activity knows where to).
	Notify bool `json:"notify,omitempty"`
	// ReminderBefore is how long before a call's timeout its reminder
	// notice goes out; zero (and settings recorded before it existed) is
	// a fifth of the timeout. One at least as long as the timeout is
	// ignored.
	ReminderBefore time.Duration `json:"reminderBefore,omitempty"`
	// Budgets bound what a turn and a conversation may spend before a
	// person is asked whether they may go on (budget.go); zero is none.
	Budgets contract.Budgets `json:"budgets,omitempty,omitzero"`
	// Audit is true when the worker writes the audit ledger: every call the
	// gate asks about or a grant answers gets a row (audit.go).
	Audit bool `json:"audit,omitempty"`
	// ApprovalTimeout is how long a call waits for a decision before it is
	// declined as timed out.
	ApprovalTimeout time.Duration `json:"approvalTimeout"`
	// MaxSteps bounds the model calls of one turn.
	MaxSteps int `json:"maxSteps"`
	// Model overrides the model activity's default model name when set.
	Model string `json:"model,omitempty"`
	// SystemPrompt starts every model call.
	SystemPrompt string `json:"systemPrompt"`
	// Tools are the tools offered to the model; each is an activity of the
	// same name.
	Tools []protocol.ToolSpec `json:"tools"`
	// WorkspaceRoots are the spellings of the tools' workspace folder (as
	// configured, and as resolved), for paths the model sends absolute
	// (activities.WorkspaceRoots).
	WorkspaceRoots []string `json:"workspaceRoots,omitempty"`
	// ToolTimeout bounds one tool activity (the Bash time limit plus margin).
	ToolTimeout time.Duration `json:"toolTimeout"`
	// ToolHeartbeatTimeout is how long a running tool may go without a
	// heartbeat (Bash sends them while its command runs) before its worker
	// counts as lost and the call answers the model with an error.
	ToolHeartbeatTimeout time.Duration `json:"toolHeartbeatTimeout,omitempty"`
	// ModelHeartbeatTimeout is how long a model call may go without a chunk
	// from the model server, or without its worker, before the attempt is
	// given up and retried.
	ModelHeartbeatTimeout time.Duration `json:"modelHeartbeatTimeout,omitempty"`
	// SearchAttributes is true when the worker made sure the custom search
	// attributes exist, so workflows may set them.
	SearchAttributes bool `json:"searchAttributes"`
	// StatusAttribute is true when StatusAttribute exists too, so workflows
	// keep it current. Settings recorded by workers before it existed lack
	// it, so a workflow begun on one never sets it: no patch needed.
	StatusAttribute bool `json:"statusAttribute,omitempty"`
	// TurnsPerRun bounds the turns one run of a conversation starts before it
	// continues as new, whatever the server suggests.
	TurnsPerRun int `json:"turnsPerRun"`
	// Agents are the subagents the Task tool can start, in the order their
	// definitions were read.
	Agents []AgentDef `json:"agents,omitempty"`
	// MaxSubagentDepth bounds how deep subagents may nest: 1 lets a turn
	// start subagents that cannot start their own.
	MaxSubagentDepth int `json:"maxSubagentDepth"`
	// ContextBudget is the bytes of message text a model call may carry
	// before the turn compacts its view: protocol.DefaultContextBudget in
	// settings recorded before ContextWindow existed, and otherwise, when
	// set, a bound within the window's (viewBudget).
	ContextBudget int `json:"contextBudget,omitempty"`
	// ContextWindow is the model's context window in tokens
	// (protocol.BytesPerToken bytes of text each); a view takes at most
	// three quarters of it, leaving the rest for the answer.
	ContextWindow int `json:"contextWindow,omitempty"`
	// ContextRecent is the share of the view, in percent, that the newest
	// whole turns may take before older ones are summarized.
	ContextRecent int `json:"contextRecent,omitempty"`
	// BashSandbox is protocol.SandboxPreview when a protected Bash call
	// first runs in the sandbox, before anyone is asked (sandbox.go); empty
	// (settings recorded before it, or a worker whose machine cannot start
	// the sandbox) when it only runs once approved, as it is.
	BashSandbox string `json:"bashSandbox,omitempty"`
	// LinksNotSecondPerson, recorded true by this build (recorded), refuses
	// a signed link's decision of a call whose rule needs a second person:
	// a link names no one, so it cannot show its holder is not the sender.
	// Settings recorded before it take link decisions there, as they did.
	LinksNotSecondPerson bool `json:"linksNotSecondPerson,omitempty"`
	// PatchLevel is the patch level of the build that began the workflow
	// (patches.go): set when its settings are recorded, never by
	// withDefaults, so that settings recorded before levels stay at 0.
	PatchLevel int `json:"patchLevel,omitempty"`
	// beginAt, when set, is the level workflows begin at instead of
	// PatchLevel: only tests set it, to run the branches a workflow of an
	// earlier level takes.
	beginAt int
}

// recorded are the settings a workflow of this build records at its start:
// the worker's, with their defaults and this build's patch level.
func (s Settings) recorded() Settings {
	s = s.withDefaults()
	s.PatchLevel = cmp.Or(s.beginAt, PatchLevel)
	s.LinksNotSecondPerson = true
	return s
}

// withDefaults fills the zero fields of s.
func (s Settings) withDefaults() Settings {
	if s.ApprovalTimeout <= 0 {
		s.ApprovalTimeout = protocol.DefaultApprovalTimeout
	}
	if s.MaxSteps <= 0 {
		s.MaxSteps = protocol.DefaultMaxSteps
	}
	if s.SystemPrompt == "" {
		s.SystemPrompt = DefaultSystemPrompt
	}
	if s.MaxSubagentDepth <= 0 {
		s.MaxSubagentDepth = 2
	}
	if s.TurnsPerRun <= 0 {
		s.TurnsPerRun = 100
	}
	if s.ToolTimeout <= 0 {
		s.ToolTimeout = 3 * time.Minute
	}
	if s.ToolHeartbeatTimeout <= 0 {
		s.ToolHeartbeatTimeout = DefaultToolHeartbeatTimeout
	}
	if s.ModelHeartbeatTimeout <= 0 {
		s.ModelHeartbeatTimeout = DefaultModelHeartbeatTimeout
	}
	if s.ContextBudget <= 0 && s.ContextWindow <= 0 {
		// Settings recorded before the window: the frozen budget.
		s.ContextBudget = protocol.DefaultContextBudget
	}
	if s.ContextWindow <= 0 {
		s.ContextWindow = protocol.DefaultContextWindow
	}
	if s.ContextRecent <= 0 || s.ContextRecent > 90 {
		s.ContextRecent = protocol.DefaultContextRecent
	}
	return s
}

// requires reports whether a call of the named tool waits for approval
// when no rule speaks of it: a tool of RequiredTools does, and so does an
// MCP tool that its server does not mark read-only.
func (s Settings) requires(tool string) bool {
	if slices.Contains(s.RequiredTools, tool) {
		return true
	}
	spec, ok := s.spec(tool)
	return ok && spec.MCP != nil && !spec.Hints().ReadOnly
}

// spec is the worker tool of that name.
func (s Settings) spec(tool string) (protocol.ToolSpec, bool) {
	i := slices.IndexFunc(s.Tools, func(t protocol.ToolSpec) bool { return t.Name == tool })
	if i < 0 {
		return protocol.ToolSpec{}, false
	}
	return s.Tools[i], true
}

// mcpServerName is the name that stands for every tool of an MCP tool's
// server (mcp__<server>), as Claude Code's permissions write it: a policy
// rule or a subagent's tool list may name the server instead of each
// tool. It is "" for other tools.
func (s Settings) mcpServerName(tool string) string {
	if spec, ok := s.spec(tool); ok && spec.MCP != nil {
		return protocol.MCPToolPrefix + spec.MCP.Server
	}
	return ""
}

// offers reports whether the named tool is among tools.
func offers(tools []protocol.ToolSpec, name string) bool {
	return slices.ContainsFunc(tools, func(t protocol.ToolSpec) bool { return t.Name == name })
}

// Workflows holds the workflow implementations and the settings they start
// turns with. Register its methods with a worker through Register.
type Workflows struct {
	Settings Settings
	// Admin, when set, is what the worker read of the control workflow:
	// while it says the gate is frozen, every call a rule protects asks
	// (turn.vetBatch records it). Nil: never frozen.
	Admin *contract.ControlWatcher
}
