// Package activities knows the outside world: the model server, the files of
// the workspace and the shell. Every activity is a method on a small
// dependency struct and takes one struct in and returns one struct out.
package activities

import (
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/protocol"
)

// TokenTarget names where streamed answer text is delivered while the model
// is still answering: a signal to the turn workflow that called the model,
// or, with Heartbeat, the activity's own heartbeat details.
type TokenTarget struct {
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
	// Step is the model call's number within the turn, so the workflow can
	// tell the text of one call from the next.
	Step int `json:"step"`
	// Heartbeat asks for the answer's token events in the activity's
	// heartbeat details (a TokenProgress) and its result (ModelOutput.Pieces)
	// instead of signals: they cost the turn's history nothing while the
	// answer streams, and the API reads them with the activity's details.
	Heartbeat bool `json:"heartbeat,omitempty"`
}

// ModelInput is the input of the model activity.
type ModelInput struct {
	Messages []protocol.Message  `json:"messages"`
	Tools    []protocol.ToolSpec `json:"tools,omitempty"`
	// Model overrides the configured model name when set.
	Model string `json:"model,omitempty"`
	// Tokens, when set, receives the answer's text in batches while it streams.
	Tokens *TokenTarget `json:"tokens,omitempty"`
	// WantUsage asks the server for the call's token usage (the stream's
	// include_usage option), for a token budget. Some servers refuse the
	// option, so it is sent only when a budget needs it.
	WantUsage bool `json:"wantUsage,omitempty"`
	// Ledger are rows of the audit ledger that the activity writes while
	// the model answers, for its turn (carry).
	Ledger []audit.Record `json:"ledger,omitempty"`
}

// ModelOutput is the model's complete answer to one call.
type ModelOutput struct {
	Content      string              `json:"content,omitempty"`
	ToolCalls    []protocol.ToolCall `json:"toolCalls,omitempty"`
	FinishReason string              `json:"finishReason,omitempty"`
	// Tokens is the call's total token usage as the server reported it
	// (prompt and completion), 0 when it reported none.
	Tokens int `json:"tokens,omitempty"`
	// Pieces are the call's token events when it streamed by heartbeat:
	// the ones its heartbeats carried, then the rest of Content.
	Pieces []protocol.TokenPiece `json:"pieces,omitempty"`
	// LedgerRows is how many of the input's Ledger rows the ledger took:
	// all or none.
	LedgerRows int `json:"ledgerRows,omitempty"`
}

// TokenBatch is the payload of the tokens signal the model activity sends to
// its turn workflow: Text is the answer's text from byte Offset on, as
// produced by the given Attempt of model call Step.
type TokenBatch struct {
	Step    int    `json:"step"`
	Attempt int32  `json:"attempt"`
	Offset  int    `json:"offset"`
	Text    string `json:"text"`
}

// ToolInput is the input of every tool activity: the call as the model made
// it (or as a person edited it before approving).
type ToolInput struct {
	Call protocol.ToolCall `json:"call"`
	// Ledger are rows of the audit ledger that the activity writes while
	// the tool runs, for its turn (carry).
	Ledger []audit.Record `json:"ledger,omitempty"`
}

// ToolOutput is what a tool answers the model. A tool that fails answers
// with Status error and a Result that says why; it does not fail the activity.
type ToolOutput struct {
	Result string `json:"result"`
	Status string `json:"status"`
	// LedgerRows is how many of the input's Ledger rows the ledger took:
	// all or none, or LedgerStillWriting.
	LedgerRows int `json:"ledgerRows,omitempty"`
	// Applied is what ApplySandbox applied of a sandboxed run, and what
	// it refused.
	Applied *protocol.SandboxApplied `json:"applied,omitempty"`
}
