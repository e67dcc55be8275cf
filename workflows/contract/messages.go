package contract

import (
	"time"

	"github.com/tollgate/tollgate/protocol"
)

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
	ClientTools []protocol.ToolSpec `json:"clientTools,omitempty"`
	// IdempotencyKey, when set, names the message (the API makes it from
	// the client's Idempotency-Key and the sender: MessageKey): a message
	// with the key of one the conversation took in the last day (the
	// workflows' messageKeyWindow) is answered with that message's turn,
	// not queued again.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// FirstMessage says the API made the conversation's id from the
	// message's key (the message named no conversation): the message
	// must start its conversation, or be a retry of the message that did.
	// Without it a second person who guessed the key (the id is a
	// version 5 UUID of it and the sender's name) could start that
	// conversation first, and the first person's message would become a
	// turn of theirs, reading their messages.
	FirstMessage bool `json:"firstMessage,omitempty"`
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
	Messages []protocol.Message `json:"messages,omitempty"`
	// Turns is how many turns the conversation has started so far.
	Turns int `json:"turns,omitempty"`
	// Queue holds user messages accepted but not yet run, carried across
	// continue-as-new.
	Queue []QueuedMessage `json:"queue,omitempty"`
	// Grants are the conversation's remembered decisions.
	Grants []Grant `json:"grants,omitempty"`
	// Spent is what the conversation's turns have spent; Raised the
	// conversation budgets people raised.
	Spent  Usage   `json:"spent,omitempty,omitzero"`
	Raised Budgets `json:"raised,omitempty,omitzero"`
	// Compaction is the summary the conversation's turns read in place of
	// its first messages.
	Compaction Compaction `json:"compaction,omitzero"`
	// Keys are the idempotency keys of the messages taken in the last day
	// (the workflows' messageKeyWindow), oldest first.
	Keys []TakenKey `json:"keys,omitempty"`
}

// TakenKey is the idempotency key of a message the conversation took, and
// what it became.
type TakenKey struct {
	Key string `json:"key"`
	// Digest is the message's (UserMessage.Digest): the key of another
	// message is refused.
	Digest string    `json:"digest"`
	Turn   int       `json:"turn"`
	At     time.Time `json:"at"`
}

// Compaction is what a conversation keeps of its compacted past: a summary
// that every later turn reads in place of the conversation's first Covers
// messages (the transcript keeps them whole), and the context window a
// model server said is smaller than the configured one.
type Compaction struct {
	Summary string `json:"summary,omitempty"`
	Covers  int    `json:"covers,omitempty"`
	// Window is the model's context window in tokens, counted as the
	// workflows count them (protocol.BytesPerToken), when a server's
	// refusal showed it smaller than the configured one.
	Window int `json:"window,omitempty"`
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
	// Summarized is how many of the first messages the turns read a
	// summary of instead.
	Summarized int `json:"summarized,omitempty"`
}

// TurnOutput is a finished turn: why it finished, its final text, the
// messages it added to the conversation (assistant and tool messages, every
// tool call answered), and its whole event log, so a stream can be resumed
// from the result after the turn has ended.
type TurnOutput struct {
	FinishReason string             `json:"finishReason"`
	Text         string             `json:"text,omitempty"`
	Messages     []protocol.Message `json:"messages,omitempty"`
	Events       []protocol.Event   `json:"events"`
	// Grants are the decisions remembered during the turn.
	Grants []Grant `json:"grants,omitempty"`
	// GrantsUsed counts, by grant id, the calls each grant decided during
	// the turn (and its subagents).
	GrantsUsed map[string]int `json:"grantsUsed,omitempty"`
	// Usage is what the turn spent, its subagents included; Raised the
	// conversation budgets a person raised during it.
	Usage  Usage   `json:"usage,omitempty,omitzero"`
	Raised Budgets `json:"raised,omitempty,omitzero"`
	// Compaction, when the turn changed it (a new summary, or a smaller
	// window), is what the conversation keeps from now on.
	Compaction *Compaction `json:"compaction,omitempty"`
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
	Offset   int                `json:"offset"`
	Total    int                `json:"total"`
	Messages []protocol.Message `json:"messages"`
}
