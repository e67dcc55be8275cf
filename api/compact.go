package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// compactTimeout bounds POST /conversations/:id/compact: the summary is
// one or more model calls, longer than a decision's Update.
const compactTimeout = 5 * time.Minute

// compact handles POST /conversations/:conversationId/compact: the
// conversation summarizes its earlier messages now (or after the turn that
// runs), and its next turn reads the summary in their place.
func (s *Server) compact(c *gin.Context) {
	conv := c.Param("conversationId")
	if err := s.checkConversation(c.Request.Context(), conv); err != nil {
		writeError(c, s.log, err)
		return
	}
	var req protocol.CompactRequest
	if err := decodeBody(c, &req); err != nil {
		writeError(c, s.log, err)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), compactTimeout)
	defer cancel()
	h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   contract.ConversationWorkflowID(conv),
		UpdateName:   contract.CompactUpdate,
		Args:         []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res protocol.CompactResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	var app *temporal.ApplicationError
	switch {
	case err == nil:
		c.JSON(http.StatusOK, res)
	case contract.RejectionReason(err) == protocol.RejectInvalid && errors.As(err, &app):
		writeError(c, s.log, badRequest("%s", app.Message()))
	default:
		writeError(c, s.log, fmt.Errorf("compact conversation %s: %w", conv, err))
	}
}
