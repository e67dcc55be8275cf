package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The built-in tools' names. Each is both the name the model calls the tool
// by and the name of the Temporal activity that runs it; a policy's rules and
// a client's events name them so.
const (
	// ToolRead reads a file of the workspace.
	ToolRead = "Read"
	// ToolWrite writes a file of the workspace.
	ToolWrite = "Write"
	// ToolEdit replaces text in a file of the workspace.
	ToolEdit = "Edit"
	// ToolBash runs a shell command in the workspace.
	ToolBash = "Bash"
)

// MCPToolPrefix starts the name of every MCP tool: mcp__<server>__<tool>,
// the names Claude Code gives them, which policies and subagent
// definitions use.
const MCPToolPrefix = "mcp__"

// Message roles, as OpenAI-compatible servers spell them.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one entry of a conversation's message log, as GET
// /conversations/:conversationId/messages pages it. It is tollgate's own
// type, not a client library's, so that workflow histories do not depend on
// a library's JSON encoding.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"toolCalls,omitempty"`
	ToolCallID string     `json:"toolCallId,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolSpec describes a tool to the model: its name, what it does and the JSON
// schema of its arguments. A client sends its own tools this way.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	// WorkspacePaths are the arguments that name a file in the workspace:
	// they are cleaned and made relative to it. The model is not shown
	// them.
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

// ArgumentLines shows a call's arguments for a person, a key a line and a
// string with newlines as its lines (a multi-line command is never
// flattened into one); arguments that are not a JSON object come back as
// they are. A notice and the decision links' page show calls so.
func ArgumentLines(args string) string {
	var v map[string]any
	if json.Unmarshal([]byte(args), &v) != nil {
		return args
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(v)) {
		if s, ok := v[k].(string); ok && strings.Contains(s, "\n") {
			fmt.Fprintf(&b, "%s:\n%s\n", k, indentLines(s, "  "))
			continue
		}
		var j bytes.Buffer
		enc := json.NewEncoder(&j)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v[k]) // a value json.Unmarshal made: cannot fail
		fmt.Fprintf(&b, "%s: %s\n", k, strings.TrimSuffix(j.String(), "\n"))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// indentLines puts prefix before every line of s.
func indentLines(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+prefix)
}
