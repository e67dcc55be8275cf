// Package activities knows the outside world: the model server, the files of
// the workspace and the shell. Every activity is a method on a small
// dependency struct and takes one struct in and returns one struct out.
package activities

import "encoding/json"

// Message roles, as OpenAI-compatible servers spell them.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one entry of a conversation's message log. It is tollgate's own
// type, not go-openai's, so that workflow histories do not depend on a client
// library's JSON encoding.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"toolCalls,omitempty"`
	ToolCallID string     `json:"toolCallId,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is one call the model asked for. Arguments is the JSON text the
// model produced, kept verbatim (it may not be valid JSON).
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolSpec describes a tool to the model: its name, what it does and the JSON
// schema of its arguments.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	// WorkspacePaths are the arguments that name a file in the workspace:
	// NormalizeArguments cleans them and makes them relative to it. The
	// model is not shown them.
	WorkspacePaths []string `json:"workspacePaths,omitempty"`
	// Annotations are what the tool says of itself, as MCP's tool
	// annotations say it; the policy reads them. Nil says nothing, which
	// means MCP's defaults (Hints).
	Annotations *ToolAnnotations `json:"annotations,omitempty"`
	// MCP names the server and the tool behind an MCP tool; nil for every
	// other tool.
	MCP *MCPTool `json:"mcp,omitempty"`
}

// ToolAnnotations are MCP's hints about a tool's effects. They are the
// word of whoever wrote the tool, not a guarantee: a policy may trust them
// for a server it trusts.
type ToolAnnotations struct {
	// ReadOnly is true when the tool does not modify its environment.
	ReadOnly bool `json:"readOnlyHint"`
	// Destructive is true when it may change or delete what exists, not
	// only add; never for a ReadOnly tool.
	Destructive bool `json:"destructiveHint"`
	// Idempotent is true when calling it again with the same arguments
	// has no further effect.
	Idempotent bool `json:"idempotentHint"`
	// OpenWorld is true when it reaches beyond a closed domain (the web,
	// other people).
	OpenWorld bool `json:"openWorldHint"`
	// Title is a human-readable name of the tool.
	Title string `json:"title,omitempty"`
}

// Hints are the annotations of spec, or MCP's defaults for a tool that
// says nothing: not read-only, destructive, not idempotent, open world.
func (spec ToolSpec) Hints() ToolAnnotations {
	if spec.Annotations != nil {
		return *spec.Annotations
	}
	return ToolAnnotations{Destructive: true, OpenWorld: true}
}

// MCPTool is the MCP server and the tool's own name behind an MCP tool.
type MCPTool struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
}

// TokenTarget names where streamed answer text is delivered while the model
// is still answering: a signal to the turn workflow that called the model.
type TokenTarget struct {
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
	// Step is the model call's number within the turn, so the workflow can
	// tell the text of one call from the next.
	Step int `json:"step"`
}

// ModelInput is the input of the model activity.
type ModelInput struct {
	Messages []Message  `json:"messages"`
	Tools    []ToolSpec `json:"tools,omitempty"`
	// Model overrides the configured model name when set.
	Model string `json:"model,omitempty"`
	// Tokens, when set, receives the answer's text in batches while it streams.
	Tokens *TokenTarget `json:"tokens,omitempty"`
}

// ModelOutput is the model's complete answer to one call.
type ModelOutput struct {
	Content      string     `json:"content,omitempty"`
	ToolCalls    []ToolCall `json:"toolCalls,omitempty"`
	FinishReason string     `json:"finishReason,omitempty"`
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

// Tool result statuses, as the tool_result event reports them.
const (
	StatusOK       = "ok"
	StatusError    = "error"
	StatusDeclined = "declined"
	StatusTimeout  = "timeout"
)

// ToolInput is the input of every tool activity: the call as the model made
// it (or as a person edited it before approving).
type ToolInput struct {
	Call ToolCall `json:"call"`
}

// ToolOutput is what a tool answers the model. A tool that fails answers
// with Status error and a Result that says why; it does not fail the activity.
type ToolOutput struct {
	Result string `json:"result"`
	Status string `json:"status"`
}
