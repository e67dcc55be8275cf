package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/gin-gonic/gin"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// toolCallIDPattern is what a tool call id may look like when it is used
// alone to find its turn through visibility.
var toolCallIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// toolResultLookup bounds how long POST /chat/tool-result looks for the turn
// of a tool call id: visibility may lag the event by a moment.
const toolResultLookup = 3 * time.Second

// toolResult handles POST /chat/tool-result: a client's answer to a
// client_tool_call. The call is named by the event's requestId, or by its
// toolCallId (with the turnId, or alone: then visibility finds the turn).
func (s *Server) toolResult(c *gin.Context) {
	var b protocol.ToolResultRequest
	if err := decodeBody(c, &b); err != nil {
		writeError(c, s.log, err)
		return
	}
	if b.RequestID == "" && b.ToolCallID == "" {
		writeError(c, s.log, badRequest("toolCallId (or requestId) is missing"))
		return
	}
	if len(b.Result) == 0 {
		writeError(c, s.log, badRequest("result is missing"))
		return
	}
	r := clientToolResult(b)

	wid, err := s.clientToolWorkflow(c.Request.Context(), b)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if wid == "" {
		c.JSON(http.StatusOK, gin.H{"accepted": false, "reason": protocol.RejectUnknown})
		return
	}
	var none struct{}
	reason, err := s.offer(c.Request.Context(), wid, contract.ClientToolResultUpdate, "", r, &none)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if reason != "" {
		c.JSON(http.StatusOK, gin.H{"accepted": false, "reason": reason})
		return
	}
	c.JSON(http.StatusOK, gin.H{"accepted": true})
}

// clientToolResult is the Update's form of a client's result: a JSON
// string is the result's text; any other JSON value is passed on as JSON
// text.
func clientToolResult(b protocol.ToolResultRequest) contract.ClientToolResult {
	r := contract.ClientToolResult{RequestID: b.RequestID, ToolCallID: b.ToolCallID, IsError: b.IsError}
	if err := json.Unmarshal(b.Result, &r.Result); err != nil {
		r.Result = compactJSON(b.Result)
	}
	return r
}

// clientToolWorkflow finds the workflow waiting for a client tool's result,
// or "" when none does.
func (s *Server) clientToolWorkflow(ctx context.Context, b protocol.ToolResultRequest) (string, error) {
	switch {
	case b.RequestID != "":
		wid, _ := contract.RequestWorkflowID(b.RequestID)
		return wid, nil
	case b.TurnID != "":
		if !contract.IsTollgateWorkflowID(b.TurnID) {
			return "", nil
		}
		return b.TurnID, nil
	case !toolCallIDPattern.MatchString(b.ToolCallID):
		return "", badRequest("toolCallId %.80q is not valid: use up to 128 letters, digits, '.', '_', ':' or '-', or send requestId", b.ToolCallID)
	}
	query := fmt.Sprintf("%s = '%s' AND ExecutionStatus = 'Running'",
		contract.PendingApprovalsAttribute, contract.ClientToolSearchValue(b.ToolCallID))
	ctx, cancel := context.WithTimeout(ctx, toolResultLookup)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait *= 2 {
		resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 2})
		if err != nil {
			return "", fmt.Errorf("find the turn of tool call %s: %w", b.ToolCallID, err)
		}
		switch n := len(resp.GetExecutions()); {
		case n == 1:
			return resp.GetExecutions()[0].GetExecution().GetWorkflowId(), nil
		case n > 1:
			return "", badRequest("toolCallId %q waits in more than one turn: send requestId or turnId as well", b.ToolCallID)
		}
		select {
		case <-ctx.Done():
			return "", nil // no turn waits for it
		case <-time.After(wait):
		}
	}
}
