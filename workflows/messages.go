package workflows

import (
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/activities"
)

// ApprovalDecision is the payload of the approval Update and signal, and the
// body of POST /chat/approval.
type ApprovalDecision struct {
	RequestID string `json:"requestId"`
	// Decision is "approve" or "decline"; any other value is rejected.
	Decision string `json:"decision"`
	// Reason is shown to the model with a decline.
	Reason string `json:"reason,omitempty"`
	// Arguments, when set with an approve, replaces the call's arguments: it
	// must be a JSON object.
	Arguments string `json:"arguments,omitempty"`
	// Remember, "conversation", makes this decision for every later call of
	// the same tool in the conversation; with SameArguments, only for calls
	// with the same arguments.
	Remember      string `json:"remember,omitempty"`
	SameArguments bool   `json:"sameArguments,omitempty"`
	// Principal names who decided. The API sets it from the caller's bearer
	// token and overwrites whatever a body said; a client with Temporal
	// access (the CLI's signal or Update) is trusted to say who it is, and a
	// signal without one is recorded as PrincipalTemporal.
	Principal string `json:"principal,omitempty"`
	// Role is the role of the API token the principal decided with
	// (approve or admin); empty for a decision by an API without tokens.
	// A signal's is what its sender wrote, trusted like its Principal.
	Role string `json:"role,omitempty"`
}

// Check says what is wrong with d itself, whatever request it names: a
// decision other than approve or decline, edited arguments that are not a
// JSON object, a remember other than conversation. The API and the gate
// both ask it.
func (d ApprovalDecision) Check() error {
	switch d.Decision {
	case DecisionApprove:
		if d.Arguments != "" && !isJSONObject(d.Arguments) {
			return errors.New("edited arguments are not a JSON object")
		}
	case DecisionDecline:
	default:
		return fmt.Errorf("decision %q is neither %q nor %q", d.Decision, DecisionApprove, DecisionDecline)
	}
	if d.Remember != "" && d.Remember != RememberConversation {
		return fmt.Errorf("remember %q is not %q", d.Remember, RememberConversation)
	}
	return nil
}

// ApprovalResult answers the approval Update, and POST /chat/approval.
type ApprovalResult struct {
	Accepted bool `json:"accepted"`
	// Reason says why a decision was not taken (a Reject reason); only the
	// API fills it in, from the validator's refusal.
	Reason string `json:"reason,omitempty"`
}

// Interrupt is the payload of the interrupt signal.
type Interrupt struct {
	Reason string `json:"reason"`
}

// UserMessage is the payload of the conversation's message Update.
type UserMessage struct {
	Query string `json:"query"`
	// Sender is the principal of the API token the message came with
	// (the API sets it; a body cannot), for rules that want a second
	// person to decide.
	Sender         string `json:"sender,omitempty"`
	BypassApproval bool   `json:"bypassApproval,omitempty"`
	// ClientTools are tools the client runs itself, offered to the model
	// for this turn.
	ClientTools []activities.ToolSpec `json:"clientTools,omitempty"`
}

// TurnRef names the turn that runs (or will run) a user message.
type TurnRef struct {
	ConversationID string `json:"conversationId"`
	// Turn numbers the conversation's turns from 1.
	Turn int `json:"turn"`
	// TurnID is the turn's workflow ID; the API streams its events.
	TurnID string `json:"turnId"`
}

// ConversationInput starts (or continues as new) a conversation workflow.
type ConversationInput struct {
	ConversationID string `json:"conversationId"`
	// Messages is the full message log carried across continue-as-new.
	Messages []activities.Message `json:"messages,omitempty"`
	// Turns is how many turns the conversation has started so far.
	Turns int `json:"turns,omitempty"`
	// Queue holds user messages accepted but not yet run, carried across
	// continue-as-new.
	Queue []QueuedMessage `json:"queue,omitempty"`
	// Grants are the conversation's remembered decisions.
	Grants []Grant `json:"grants,omitempty"`
}

// QueuedMessage is a user message waiting for its turn.
type QueuedMessage struct {
	Turn    int         `json:"turn"`
	Message UserMessage `json:"message"`
}

// ConversationState answers the conversation's state query.
type ConversationState struct {
	ConversationID string `json:"conversationId"`
	Turns          int    `json:"turns"`
	// Running is the workflow ID of the turn that runs now, if any.
	Running  string `json:"running,omitempty"`
	Messages int    `json:"messages"`
	Queued   int    `json:"queued"`
}

// TurnInput starts a ChatTurn.
type TurnInput struct {
	ConversationID string `json:"conversationId"`
	Turn           int    `json:"turn"`
	// Messages is the conversation so far, ending with the new user message.
	Messages       []activities.Message `json:"messages"`
	BypassApproval bool                 `json:"bypassApproval,omitempty"`
	// Sender is the principal who sent the message.
	Sender string `json:"sender,omitempty"`
	// Grants are the conversation's remembered decisions when the turn
	// starts.
	Grants []Grant `json:"grants,omitempty"`
	// ClientTools are the tools the client runs itself.
	ClientTools []activities.ToolSpec `json:"clientTools,omitempty"`
}

// TurnOutput is a finished turn: why it finished, its final text, the
// messages it added to the conversation (assistant and tool messages, every
// tool call answered), and its whole event log, so a stream can be resumed
// from the result after the turn has ended.
type TurnOutput struct {
	FinishReason string               `json:"finishReason"`
	Text         string               `json:"text,omitempty"`
	Messages     []activities.Message `json:"messages,omitempty"`
	Events       []Event              `json:"events"`
	// Grants are the decisions remembered during the turn.
	Grants []Grant `json:"grants,omitempty"`
}

// PendingApproval is one approval a turn waits for, as the pending query
// and GET /approvals show it.
type PendingApproval struct {
	RequestID  string `json:"requestId"`
	WorkflowID string `json:"workflowId"`
	// TurnID is the turn the waiting workflow belongs to: WorkflowID for a
	// turn, the turn that started it for a subagent.
	TurnID         string    `json:"turnId"`
	ConversationID string    `json:"conversationId"`
	ToolCallID     string    `json:"toolCallId"`
	ToolName       string    `json:"toolName"`
	Arguments      string    `json:"arguments"`
	RequestedAt    time.Time `json:"requestedAt"`
	ExpiresAt      time.Time `json:"expiresAt"`
	// Preview says what the call will do (see Event.Preview).
	Preview string `json:"preview,omitempty"`
}

// MessagesRequest asks for a page of a conversation's transcript: Limit
// messages from Offset on (Limit 0 means DefaultMessagesPage, and at most
// MaxMessagesPage).
type MessagesRequest struct {
	Offset int `json:"offset"`
	Limit  int `json:"limit"`
}

// Page sizes of the messages query.
const (
	DefaultMessagesPage = 50
	MaxMessagesPage     = 200
)

// MessagesPage is a page of a conversation's transcript: the messages, and
// how many the conversation holds in all.
type MessagesPage struct {
	Offset   int                  `json:"offset"`
	Total    int                  `json:"total"`
	Messages []activities.Message `json:"messages"`
}

// page cuts the page req asks for out of msgs.
func page(msgs []activities.Message, req MessagesRequest) MessagesPage {
	limit := req.Limit
	if limit <= 0 {
		limit = DefaultMessagesPage
	}
	limit = min(limit, MaxMessagesPage)
	from := min(max(req.Offset, 0), len(msgs))
	to := min(from+limit, len(msgs))
	return MessagesPage{Offset: from, Total: len(msgs), Messages: append([]activities.Message{}, msgs[from:to]...)}
}
