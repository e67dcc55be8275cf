package contract

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/protocol"
)

// ClientToolResult is the payload of the toolResult Update: the answer of
// a client-executed tool. RequestID (from the client_tool_call event) names
// the call; ToolCallID alone does too, within one turn.
type ClientToolResult struct {
	RequestID  string `json:"requestId,omitempty"`
	ToolCallID string `json:"toolCallId,omitempty"`
	Result     string `json:"result"`
	// IsError marks a result that reports the tool's failure.
	IsError bool `json:"isError,omitempty"`
}

// CheckClientTools checks what can be checked of a request's
// client-executed tools without the worker's settings, so the API refuses
// them before it sends the message (and so before it starts a
// conversation for it): each is named, once, not like a built-in tool or
// an MCP tool (mcp__…), and says nothing that only a worker tool may say.
//
// workspacePaths and mcp are refused: a client tool runs on the client,
// so its arguments never name a file of the worker's workspace, and it is
// no MCP server's. Honoured, workspacePaths would have the worker rewrite
// the client's paths against its own workspace (refusing or reshaping
// them) and a path rule match them as if the worker's files were touched:
// a client's word changing what the policy and the approver read.
func CheckClientTools(tools []protocol.ToolSpec) error {
	var seen []string
	for _, t := range tools {
		switch {
		case t.Name == "":
			return fmt.Errorf("a client tool has no name")
		case slices.Contains(builtinTools, t.Name) || strings.HasPrefix(t.Name, protocol.MCPToolPrefix):
			return fmt.Errorf("client tool %q has the name of a tool the worker runs (%s, or %s…)", t.Name, strings.Join(builtinTools, ", "), protocol.MCPToolPrefix)
		case slices.Contains(seen, t.Name):
			return fmt.Errorf("client tool %q is declared twice", t.Name)
		case len(t.WorkspacePaths) > 0:
			return fmt.Errorf("client tool %q declares workspacePaths: a client tool runs on the client, so none of its arguments names a file of the worker's workspace; leave the field out", t.Name)
		case t.MCP != nil:
			return fmt.Errorf("client tool %q declares mcp: a client tool is the client's, not an MCP server's; leave the field out", t.Name)
		}
		seen = append(seen, t.Name)
	}
	return nil
}

// builtinTools are the names of the tools every worker runs.
var builtinTools = []string{protocol.ToolRead, protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash, protocol.TaskTool}
