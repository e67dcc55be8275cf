package protocol

import (
	"encoding/json"
	"time"
)

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

// PolicyTestRequest is the body of POST /policy/test, which evaluates a
// candidate policy over the audit ledger's rows, and of POST
// /policy/check, which runs its rules' examples alone (and reads only
// Policy).
type PolicyTestRequest struct {
	// Policy is the candidate policy file's text (YAML).
	Policy string `json:"policy"`
	// Since, when set, reads only the rows of calls asked at or after it.
	Since *time.Time `json:"since,omitempty"`
	// ConversationID, when set, reads only that conversation's rows.
	ConversationID string `json:"conversationId,omitempty"`
}

// What the candidate policy does with a ledger row's call
// (PolicyTestCall.Verdict).
const (
	// VerdictDeclinedWouldRun: a person declined the call, and the
	// candidate lets it run without asking. The dangerous ones.
	VerdictDeclinedWouldRun = "declined_would_run"
	// VerdictWouldRun: the call asked (and was approved, timed out, or
	// waits), and the candidate lets it run without asking.
	VerdictWouldRun = "would_run"
	// VerdictDecidersChange: the candidate still asks, and the person who
	// decided could not decide it under the candidate's deciders or
	// second_person.
	VerdictDecidersChange = "deciders_change"
	// VerdictWouldAsk: the candidate asks, as the call did.
	VerdictWouldAsk = "would_ask"
	// VerdictRefused: today's normalization refuses the call's arguments
	// (a path that leaves the workspace now, say): it would never run.
	VerdictRefused = "refused"
)

// PolicyReport answers POST /policy/test and POST /policy/check.
type PolicyReport struct {
	// ExampleFailures are the rules' examples that the candidate does not
	// decide as they say; the worker would refuse to start with it.
	ExampleFailures []PolicyExampleFailure `json:"exampleFailures"`
	// Examples is how many examples were checked.
	Examples int `json:"examples"`
	// Rows is how many ledger rows were evaluated (POST /policy/test).
	Rows int `json:"rows"`
	// Groups count the rows by the candidate's rule and tool, in the
	// order of the tool's name.
	Groups []PolicyTestGroup `json:"groups"`
	// Calls list the rows whose verdict is not VerdictWouldAsk, those a
	// person declined first, at most MaxListedCalls; Unlisted is how many
	// more there are.
	Calls    []PolicyTestCall `json:"calls"`
	Unlisted int              `json:"unlisted,omitempty"`
}

// MaxListedCalls bounds PolicyReport.Calls.
const MaxListedCalls = 200

// PolicyExampleFailure is an example a rule does not decide as it says.
type PolicyExampleFailure struct {
	// Tool is the rule's tool; Kind is ask or allow; Arguments the
	// example's.
	Tool      string `json:"tool"`
	Kind      string `json:"kind"`
	Arguments string `json:"arguments"`
	// Problem says what the rule did instead.
	Problem string `json:"problem"`
}

// PolicyTestGroup counts the ledger rows of one tool that one rule of the
// candidate decides, by verdict.
type PolicyTestGroup struct {
	Tool string `json:"tool"`
	// Rule is the candidate's rule ("rule Bash: when …", "rule Write:
	// never"), or the default ("default: Write is a protected tool",
	// "default: Read is not protected").
	Rule             string `json:"rule"`
	Rows             int    `json:"rows"`
	DeclinedWouldRun int    `json:"declinedWouldRun"`
	WouldRun         int    `json:"wouldRun"`
	DecidersChange   int    `json:"decidersChange"`
	WouldAsk         int    `json:"wouldAsk"`
	Refused          int    `json:"refused"`
}

// PolicyTestCall is one ledger row and what the candidate does with it.
type PolicyTestCall struct {
	Verdict string `json:"verdict"`
	Rule    string `json:"rule"`
	// Why says why the deciders change, or why the arguments are refused.
	Why string `json:"why,omitempty"`
	// The row's: its request, call, and what was decided, by whom.
	RequestID      string    `json:"requestId"`
	ConversationID string    `json:"conversationId"`
	TurnID         string    `json:"turnId"`
	Tool           string    `json:"tool"`
	Arguments      string    `json:"arguments"`
	RequestedAt    time.Time `json:"requestedAt"`
	// Asked is what made the call ask when it was made.
	Asked     string `json:"asked,omitempty"`
	Decision  string `json:"decision,omitempty"`
	DecidedBy string `json:"decidedBy,omitempty"`
	Principal string `json:"principal,omitempty"`
	Role      string `json:"role,omitempty"`
}
