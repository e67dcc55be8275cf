// Package protocol is tollgate's wire contract: the events a turn streams,
// the decisions a person sends, the bodies and headers of the API, and the
// Server-Sent Events encoding. The worker, the API and the terminal client
// share it; it imports nothing of tollgate's and nothing of Temporal's, so
// a client that speaks HTTP and JSON links no more than that.
// docs/protocol.md describes it.
package protocol

import "time"

// Event types of a turn's stream.
const (
	EventTurnStart        = "turn_start"
	EventToken            = "token"
	EventToolCall         = "tool_call"
	EventApprovalRequest  = "approval_request"
	EventApprovalDecision = "approval_decision"
	EventToolResult       = "tool_result"
	EventHeartbeat        = "heartbeat"
	EventFinish           = "finish"
	EventError            = "error"
	// EventClientToolCall asks the client to run one of its own tools and
	// answer with POST /chat/tool-result.
	EventClientToolCall = "client_tool_call"
	// EventContextCompacted says the turn left tool outputs out of the
	// model's view, or summarized earlier messages, to fit its budget.
	EventContextCompacted = "context_compacted"
	// EventApprovalVote is one person's vote on a request of a rule with a
	// quorum (Decision, By, Role, Reason, Votes); the request is decided
	// by an approval_decision once the votes decide it.
	EventApprovalVote = "approval_vote"
	// EventApprovalEscalated says a request waited past a step of its
	// rule's escalation: Escalated may decide too, and Deciders are who
	// may decide now.
	EventApprovalEscalated = "approval_escalated"
	// EventQueued is the API's own, with no id, not part of the turn's
	// log: the turn does not exist yet, as its message waits in its
	// conversation behind another turn (ConversationID, TurnID). The
	// stream waits, with keep-alives, for as long as it stays queued.
	EventQueued = "queued"
	// EventGateFrozen and EventGateThawed are the API's own, with no id,
	// sent on every open stream when an admin freezes or thaws the gate
	// (Freeze: By, Reason, BlockNewTurns). Like queued, they are not part
	// of the turn's log: a stream resumed with Last-Event-ID does not
	// replay them; GET /admin/freeze says the state.
	EventGateFrozen = "gate_frozen"
	EventGateThawed = "gate_thawed"

	// Events of a subagent as its parent's stream shows them, with Name.
	EventSubagentStart  = "subagent_start"
	EventSubagentFinish = "subagent_finish"
	EventSubagentPrefix = "subagent_"
)

// Finish reasons.
const (
	FinishStop      = "stop"
	FinishMaxSteps  = "max_steps"
	FinishCancelled = "cancelled"
	FinishError     = "error"
	// FinishBudget ends a turn whose budget a person did not raise.
	FinishBudget = "budget"
)

// BudgetTool is the tool name of a budget's approval request: its kind is
// KindBudget, and its arguments say which budget, its limit and what is
// spent.
const (
	BudgetTool = "budget"
	KindBudget = "budget"
)

// Tool result statuses, as the tool_result event reports them.
const (
	StatusOK       = "ok"
	StatusError    = "error"
	StatusDeclined = "declined"
	StatusTimeout  = "timeout"
)

// Tool results of calls that did not run, as the model and tool_result
// events read them (a decline's reason follows DeclinedResponse).
const (
	DeclinedResponse = "The user declined this tool. It was not executed."
	TimeoutResponse  = "No decision came in time, so this tool was not executed."
)

// Tool results of calls that did not run, from the plain-not-run patch on
// (docs/versioning.md): each starts with NotExecuted and ends with
// DoNotRetry, and a person's decline with their reason follows
// TheirReason.
const (
	NotExecuted    = "Not executed: "
	PersonDeclined = NotExecuted + "a person declined this call."
	NoDecision     = NotExecuted + "nobody decided on this call in time, so it did not run."
	DoNotRetry     = " Do not call it again unless the user asks you to."
	TheirReason    = " Their reason: "
)

// TaskTool is the tool that starts a subagent.
const TaskTool = "Task"

// Event is one entry of a turn's append-only event log. Seq numbers the
// events of one turn from 1, without gaps; the API sends it as the SSE id.
type Event struct {
	Seq  int    `json:"seq"`
	Type string `json:"type"`
	// Name is the subagent's name on subagent_* events.
	Name string `json:"name,omitempty"`

	// turn_start
	ConversationID string `json:"conversationId,omitempty"`
	TurnID         string `json:"turnId,omitempty"`
	WorkflowID     string `json:"workflowId,omitempty"`
	RunID          string `json:"runId,omitempty"`
	// Bypass is true on turn_start when the turn runs with bypassApproval:
	// no call asks, but those a rule requires always (from strict-gate on;
	// a turn begun before it asks for none).
	Bypass bool `json:"bypass,omitempty"`

	// token. Reset voids the text the call's earlier token events spelled:
	// a retried model call answered otherwise, and Data starts it again.
	Data  string `json:"data,omitempty"`
	Reset bool   `json:"reset,omitempty"`

	// tool_call
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`

	// approval_request and approval_decision
	RequestID  string     `json:"requestId,omitempty"`
	ToolCallID string     `json:"toolCallId,omitempty"`
	ToolName   string     `json:"toolName,omitempty"`
	Arguments  string     `json:"arguments,omitempty"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	Decision   string     `json:"decision,omitempty"`
	// Preview, on approval_request, says what the call will do, read on
	// the worker where the files are: a Write's or an Edit's diff against
	// the file, a Bash command line by line.
	Preview string `json:"preview,omitempty"`
	// Sandbox, on approval_request, is what a Bash call did when it ran
	// in the sandbox before anyone was asked (TOLLGATE_BASH_SANDBOX=
	// preview): how it ended, its output, and the files it changed with
	// their diffs, without their contents. An approve applies exactly
	// those changes; Unconfined, on the approval_decision, says the person
	// chose to run the command for real instead.
	Sandbox    *SandboxRun `json:"sandbox,omitempty"`
	Unconfined bool        `json:"unconfined,omitempty"`
	// Kind, on approval_request, is "budget" for a budget's request
	// (omitted for a tool call's).
	Kind string `json:"kind,omitempty"`
	// Grant names the remembered decision that decided a call;
	// GrantUsesLeft says how many more calls it may decide (omitted when
	// any number) and GrantExpiresAt when it ends (omitted when never).
	Grant          string     `json:"grant,omitempty"`
	GrantUsesLeft  *int       `json:"grantUsesLeft,omitempty"`
	GrantExpiresAt *time.Time `json:"grantExpiresAt,omitempty"`
	// By names who decided: the principal of the API caller's token, a
	// signal's principal (or "temporal"), or a grant's maker; empty for a
	// timeout, a cancellation, or the API without tokens.
	By string `json:"by,omitempty"`
	// Role is the role of the API token By decided with (approve or
	// admin); empty otherwise.
	Role string `json:"role,omitempty"`
	// OnBehalfOf, on approval_decision, names the principal By decided
	// for as their stand-in (PUT /delegations): "bob for alice".
	OnBehalfOf string `json:"onBehalfOf,omitempty"`
	// BlockNewTurns, on gate_frozen, is true when the freeze also refuses
	// new messages.
	BlockNewTurns bool `json:"blockNewTurns,omitempty"`
	// Deciders, on approval_request and approval_escalated, are who may
	// decide the call (omitted when its rule names none: anyone may);
	// Escalated, on approval_escalated, who the step added. Votes, on the
	// approval events of a call whose rule has a quorum, is where its
	// voting stands.
	Deciders  []string `json:"deciders,omitempty"`
	Escalated []string `json:"escalated,omitempty"`
	Votes     *Votes   `json:"votes,omitempty"`

	// tool_result
	ToolResults []ToolResult `json:"toolResults,omitempty"`

	// context_compacted: how many tool outputs were left out of the
	// model's view and how many earlier messages summarized, and the
	// view's size in bytes of text before and after. Kept is how many of
	// the conversation's messages after the summarized ones the view
	// carries (the conversation's first Summarized messages are those the
	// summary stands for), Cut how many messages it cut in the middle.
	Elided      int `json:"elided,omitempty"`
	Summarized  int `json:"summarized,omitempty"`
	Kept        int `json:"kept,omitempty"`
	Cut         int `json:"cut,omitempty"`
	BytesBefore int `json:"bytesBefore,omitempty"`
	BytesAfter  int `json:"bytesAfter,omitempty"`

	// Reason: approval_decision's, approval_request's policy note, and
	// finish's; Text: finish's; Message: error's and finish's.
	Reason  string `json:"reason,omitempty"`
	Text    string `json:"text,omitempty"`
	Message string `json:"message,omitempty"`
}

// ToolResult is one tool response as the tool_result event shows it.
type ToolResult struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Result string `json:"result"`
	Status string `json:"status"`
}

// ToolCall is one call the model asked for. Arguments is the JSON text the
// model produced, kept verbatim (it may not be valid JSON).
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}
