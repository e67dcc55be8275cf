package protocol

import "encoding/json"

// Headers of the API's answers to POST /chat/stream: they name the turn the
// message runs as, so a client can resume the stream before the turn_start
// event arrives.
const (
	HeaderConversationID = "X-Tollgate-Conversation-Id"
	HeaderTurnID         = "X-Tollgate-Turn-Id"
)

// HeaderLastEventID asks a stream for the events after the given id, as
// Server-Sent Events clients send it when they reconnect.
const HeaderLastEventID = "Last-Event-ID"

// HeaderIdempotencyKey names a message of POST /chat/stream: a retry with
// the same key (same principal, same conversation, same message) gets the
// same turn's stream, never a second turn.
const HeaderIdempotencyKey = "Idempotency-Key"

// ChatRequest is the body of POST /chat/stream.
type ChatRequest struct {
	Query          string `json:"query"`
	ConversationID string `json:"conversationId,omitempty"`
	BypassApproval bool   `json:"bypassApproval,omitempty"`
	// ClientTools are tools the client runs itself; the turn asks for
	// their results with client_tool_call events.
	ClientTools []ToolSpec `json:"clientTools,omitempty"`
}

// DecisionRequest is the body of POST /chat/approval as a client sends it:
// an ApprovalDecision less what the API sets (principal, role). Arguments
// may be sent as a JSON object or as a string holding one.
type DecisionRequest struct {
	RequestID     string          `json:"requestId"`
	Decision      string          `json:"decision"`
	Reason        string          `json:"reason,omitempty"`
	Arguments     json.RawMessage `json:"arguments,omitempty"`
	Remember      string          `json:"remember,omitempty"`
	SameArguments bool            `json:"sameArguments,omitempty"`
	RememberFor   string          `json:"rememberFor,omitempty"`
	RememberUses  int             `json:"rememberUses,omitempty"`
	RememberWhen  string          `json:"rememberWhen,omitempty"`
	Unconfined    bool            `json:"unconfined,omitempty"`
}

// BatchDecisionRequest is the body of POST /chat/approvals: decisions, as
// POST /chat/approval takes them, on requests of one turn (one
// workflow), taken all or none.
type BatchDecisionRequest struct {
	Decisions []DecisionRequest `json:"decisions"`
}

// ToolResultRequest is the body of POST /chat/tool-result: a client's answer
// to a client_tool_call, named by its requestId, or by its toolCallId (with
// the turnId, or alone).
type ToolResultRequest struct {
	RequestID  string          `json:"requestId,omitempty"`
	ToolCallID string          `json:"toolCallId,omitempty"`
	TurnID     string          `json:"turnId,omitempty"`
	Result     json.RawMessage `json:"result"`
	IsError    bool            `json:"isError,omitempty"`
}

// ErrorBody is what the API answers a request it refuses, with a status
// that says whose fault it is.
type ErrorBody struct {
	Error string `json:"error"`
}

// MaxCompactInstructions bounds the instructions of a CompactRequest, in
// bytes: they go into every summary request of the compaction.
const MaxCompactInstructions = 4000

// CompactRequest is the body of POST /conversations/{id}/compact.
type CompactRequest struct {
	// Instructions say what the summary must keep ("keep the decisions
	// about the schema"); optional.
	Instructions string `json:"instructions,omitempty"`
}

// CompactResult answers POST /conversations/{id}/compact.
type CompactResult struct {
	// Compacted is true when the conversation now reads a new summary;
	// Queued when a turn runs, and the compaction follows it before the
	// next message's turn.
	Compacted bool `json:"compacted"`
	Queued    bool `json:"queued,omitempty"`
	// Summarized is how many of the conversation's first messages the
	// summary stands for, Kept how many after them its next turn reads
	// whole (GET /conversations/{id}/messages has them all).
	Summarized int `json:"summarized"`
	Kept       int `json:"kept"`
	// BytesBefore and BytesAfter are the bytes of text the next turn
	// would read before and after.
	BytesBefore int `json:"bytesBefore,omitempty"`
	BytesAfter  int `json:"bytesAfter,omitempty"`
	// Reason says why nothing was compacted.
	Reason string `json:"reason,omitempty"`
}
