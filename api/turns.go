package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"go.temporal.io/sdk/converter"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// Sizes of GET /conversations/:conversationId/turns.
const (
	defaultListedTurns = 10
	maxTurnsListed     = 50
	// describedAtOnce bounds the turns described in parallel.
	describedAtOnce = 10
)

// conversationTurns handles GET /conversations/:conversationId/turns: the
// conversation's last turns (?limit=, 10 by default), oldest first, each
// with the start of its user's message, so a console opens a conversation
// started elsewhere (by curl, the terminal client, another browser) with
// every turn and what was asked.
func (s *Server) conversationTurns(c *gin.Context) {
	conv := c.Param("conversationId")
	if err := s.checkConversation(c.Request.Context(), conv); err != nil {
		writeError(c, s.log, err)
		return
	}
	limit := defaultListedTurns
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxTurnsListed {
			writeError(c, s.log, badRequest("limit %q is not a whole number from 1 to %d", v, maxTurnsListed))
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), queryTimeout)
	defer cancel()
	state, err := temporalSource{client: s.client}.Conversation(ctx, conv)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	// One description a turn, asked at once: the answer waits for the
	// slowest, not for their sum.
	first := max(1, state.Turns-limit+1)
	turns := make([]protocol.TurnSummary, state.Turns-first+1)
	dc := s.converter()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(describedAtOnce)
	for i := range turns {
		t := &turns[i]
		t.TurnID = contract.TurnWorkflowID(conv, first+i)
		g.Go(func() error {
			d, err := s.client.DescribeWorkflow(gctx, t.TurnID, "")
			switch {
			case isNotFound(err):
				// Queued behind a running turn, or past retention.
				return nil
			case err != nil:
				return fmt.Errorf("turn %s: %w", t.TurnID, err)
			}
			if p := d.RawResponse.GetExecutionConfig().GetUserMetadata().GetSummary(); p != nil {
				if err := dc.FromPayload(p, &t.Message); err != nil {
					s.log.Debug("decode a turn's summary", "turnId", t.TurnID, "error", err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		writeError(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, protocol.TurnList{ConversationID: conv, Turns: turns})
}

// converter decodes payloads as the worker encoded them: through the
// payload store's codec when there is one.
func (s *Server) converter() converter.DataConverter {
	return temporalSource{codec: s.codec}.converter()
}
