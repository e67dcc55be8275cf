// Package contract is the workflows' side of the contract: what a client
// of tollgate's workflows (the API, the Temporal CLI, tests) names and
// sends over Temporal. It holds the workflow, query, update, signal and
// search attribute names, the workflow IDs, and the bodies of the queries
// and updates. It imports nothing of what the workflows run (the model
// client, MCP, the policy's CEL), so the API, which speaks to the
// workflows through it alone, links none of that.
package contract

import (
	"fmt"
	"strconv"
	"strings"
)

// Workflow type names.
const (
	// ChatTurnWorkflow runs one chat turn: model calls, the approval gate and
	// tool calls, until the model answers without tool calls.
	ChatTurnWorkflow = "ChatTurn"
	// ConversationWorkflow owns a conversation's message log and runs each user
	// message as a child ChatTurn, one at a time.
	ConversationWorkflow = "Conversation"
	// SubagentWorkflow runs a subagent, started by the Task tool, as a child
	// of the turn (or subagent) whose model called Task.
	SubagentWorkflow = "Subagent"
	// SearchAttributesProbeWorkflow sets every search attribute tollgate
	// sets, and nothing else: the worker runs it on a task queue of its
	// own before it takes work (workflows.AwaitSearchAttributes).
	SearchAttributesProbeWorkflow = "TollgateSearchAttributesProbe"
)

// Message names of the turn workflow.
const (
	// EventsQuery returns the turn's events after a cursor (EventsRequest in,
	// EventsResponse out).
	EventsQuery = "events"
	// ApprovalUpdate decides a pending approval (ApprovalDecision in,
	// ApprovalResult out). Its validator rejects unknown, decided and expired
	// requests, so a caller learns whether the decision was taken.
	ApprovalUpdate = "approval"
	// ApprovalsUpdate decides several pending approvals of the workflow at
	// once (ApprovalBatch in, ApprovalBatchResult out), all or none: its
	// validator checks every decision as ApprovalUpdate's does and refuses
	// the whole Update, naming the first request it refuses (see
	// RejectedRequest). One Update costs the turn one set of history events
	// however many calls it decides.
	ApprovalsUpdate = "approvals"
	// ApprovalSignal carries the same ApprovalDecision as ApprovalUpdate, for
	// the Temporal CLI. An invalid one is logged and ignored.
	ApprovalSignal = "approval"
	// TokensSignal carries answer text (activities.TokenBatch) from the model
	// activity to its turn while the model is still answering.
	TokensSignal = "tokens"
	// InterruptSignal asks a running turn to decline its pending approvals and
	// finish at the next step (workflows.Interrupt in). The conversation sends it when a
	// new user message arrives.
	InterruptSignal = "interrupt"
	// SubagentEventsSignal carries a subagent's events to its parent
	// (workflows.SubagentEvents in), which adds them to its own stream.
	SubagentEventsSignal = "subagentEvents"
	// ClientToolResultUpdate answers a client-executed tool's call
	// (ClientToolResult in); its validator rejects unknown, answered and
	// expired calls.
	ClientToolResultUpdate = "toolResult"
	// PendingQuery returns the approvals the turn waits for
	// ([]PendingApproval out).
	PendingQuery = "pending"
)

// Message names of the conversation workflow.
const (
	// SendMessageUpdate adds a user message to a conversation and answers
	// with the turn that will run it (UserMessage in, TurnRef out).
	SendMessageUpdate = "message"
	// StateQuery returns the conversation's state (ConversationState out).
	StateQuery = "state"
	// MessagesQuery returns a page of the conversation's whole transcript
	// (MessagesRequest in, MessagesPage out), compacted or not for the model.
	MessagesQuery = "messages"
	// CompactUpdate summarizes the conversation's earlier messages now
	// (CompactRequest in, CompactResult out): its next turn reads the
	// summary in their place. While a turn runs it is queued behind it.
	CompactUpdate = "compact"
	// GrantsQuery returns the conversation's remembered decisions ([]Grant
	// out).
	GrantsQuery = "grants"
	// RevokeGrantUpdate removes a remembered decision (RevokeGrant in); its
	// validator rejects an unknown grant. A turn that runs keeps the grants
	// it started with; the next turn asks again.
	RevokeGrantUpdate = "revokeGrant"
)

// Search attributes the worker registers when they are missing.
const (
	// ConversationIDAttribute is the conversation a turn belongs to (Keyword).
	ConversationIDAttribute = "TollgateConversationId"
	// PendingApprovalsAttribute lists what a turn waits for (KeywordList):
	// its client tools' calls (tool:<toolCallId>), then its request ids, within 1 KiB
	// (ending "more" when cut); empty when it waits for none.
	PendingApprovalsAttribute = "TollgatePendingApprovals"
	// StatusAttribute says what a turn or a conversation is doing
	// (Keyword): StatusRunning, StatusWaiting or StatusIdle, for saved
	// views in the Web UI ("TollgateStatus = 'waiting'").
	StatusAttribute = "TollgateStatus"
)

// Values of StatusAttribute.
const (
	// StatusRunning: a turn calls its model or runs its tools; a
	// conversation runs a turn.
	StatusRunning = "running"
	// StatusWaiting: a turn (or subagent) waits for a person's decision or
	// a client's tool result.
	StatusWaiting = "waiting"
	// StatusIdle: a conversation waits for its next message.
	StatusIdle = "idle"
)

// ClientToolSearchValue is how PendingApprovalsAttribute lists a client
// tool call that waits for its result.
func ClientToolSearchValue(toolCallID string) string {
	return "tool:" + toolCallID
}

// workflowIDPrefix starts every workflow ID tollgate makes, so the API never
// sends a message to a workflow that is not one of its own.
const workflowIDPrefix = "tollgate-"

// ConversationWorkflowID is the workflow ID of a conversation.
func ConversationWorkflowID(conversationID string) string {
	return workflowIDPrefix + "conv-" + conversationID
}

// TurnWorkflowID is the workflow ID of turn n (from 1) of a conversation.
func TurnWorkflowID(conversationID string, n int) string {
	return fmt.Sprintf("%sconv-%s%s%d", workflowIDPrefix, conversationID, TurnIDSeparator, n)
}

// TurnIDSeparator joins a turn's number to its conversation's id in the
// turn's workflow ID. Every workflow ID of a turn or a subagent holds it
// after its conversation's id, so a conversation id without it can name no
// other conversation's turn or subagent: the workflow ID of conversation
// "a-turn-2" would be that of conversation "a"'s second turn.
const TurnIDSeparator = "-turn-"

// MayNameAnotherTurn reports whether a conversation's workflow ID could be
// the workflow ID of another conversation's turn or subagent: the
// conversation id holds TurnIDSeparator. The API starts no conversation
// under such an id.
func MayNameAnotherTurn(conversationID string) bool {
	return strings.Contains(conversationID, TurnIDSeparator)
}

// ParseTurnWorkflowID returns the conversation and the number of the turn
// whose workflow ID is id (a TurnWorkflowID, not a subagent's), or false
// when id is not of that form.
func ParseTurnWorkflowID(id string) (conversationID string, n int, ok bool) {
	rest, found := strings.CutPrefix(id, workflowIDPrefix+"conv-")
	i := strings.LastIndex(rest, TurnIDSeparator)
	if !found || i <= 0 {
		return "", 0, false
	}
	digits := rest[i+len(TurnIDSeparator):]
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 || strconv.Itoa(n) != digits {
		return "", 0, false
	}
	return rest[:i], n, true
}

// SubagentWorkflowID is the workflow ID of the n-th subagent (from 1) that
// the workflow parentID (a turn or a subagent) starts.
func SubagentWorkflowID(parentID string, n int) string {
	return fmt.Sprintf("%s%s%d", parentID, subagentIDSeparator, n)
}

// subagentIDSeparator joins a subagent's number to its parent's ID. A turn's
// ID ends in -turn-<n>, so what follows it can only be subagents'.
const subagentIDSeparator = "-sub-"

// TurnOfWorkflowID returns the turn a workflow ID belongs to: the ID
// itself for a turn, the turn that started it for a subagent.
func TurnOfWorkflowID(id string) string {
	for {
		i := strings.LastIndex(id, subagentIDSeparator)
		if i < 0 {
			return id
		}
		if _, err := strconv.Atoi(id[i+len(subagentIDSeparator):]); err != nil {
			return id
		}
		id = id[:i]
	}
}

// IsTollgateWorkflowID reports whether id is one that tollgate makes.
func IsTollgateWorkflowID(id string) bool {
	return strings.HasPrefix(id, workflowIDPrefix)
}

// requestIDSeparator splits an approval request id into the workflow that
// waits for it and the random part that only that workflow knows.
const requestIDSeparator = "/apr-"

// NewRequestID builds an approval request id from the waiting workflow's ID
// and a random secret.
func NewRequestID(workflowID, secret string) string {
	return workflowID + requestIDSeparator + secret
}

// RequestSecret returns the part of a request id after its workflow's ID.
func RequestSecret(requestID string) string {
	return requestID[strings.LastIndex(requestID, requestIDSeparator)+len(requestIDSeparator):]
}

// RequestWorkflowID returns the workflow that waits for an approval request
// id, or false when the id is not of tollgate's form. It does not prove the
// id is genuine: only the workflow's validator can.
func RequestWorkflowID(requestID string) (string, bool) {
	i := strings.LastIndex(requestID, requestIDSeparator)
	if i <= 0 || i+len(requestIDSeparator) == len(requestID) {
		return "", false
	}
	wid := requestID[:i]
	if !IsTollgateWorkflowID(wid) {
		return "", false
	}
	return wid, true
}
