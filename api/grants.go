package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/workflows/contract"
)

// grants handles GET /conversations/:conversationId/grants.
func (s *Server) grants(c *gin.Context) {
	conv := c.Param("conversationId")
	if err := s.checkConversation(c.Request.Context(), conv); err != nil {
		writeError(c, s.log, err)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), queryTimeout)
	defer cancel()
	v, err := s.client.QueryWorkflow(ctx, contract.ConversationWorkflowID(conv), "", contract.GrantsQuery)
	var grants []contract.Grant
	if err == nil {
		err = v.Get(&grants)
	}
	if err != nil {
		writeError(c, s.log, fmt.Errorf("grants of conversation %s: %w", conv, err))
		return
	}
	if grants == nil {
		grants = []contract.Grant{}
	}
	c.JSON(http.StatusOK, gin.H{"grants": grants})
}

// messages handles GET /conversations/:conversationId/messages?offset=&limit=:
// a page of the conversation's whole transcript, as the model's view never
// is once compacted.
func (s *Server) messages(c *gin.Context) {
	conv := c.Param("conversationId")
	if err := s.checkConversation(c.Request.Context(), conv); err != nil {
		writeError(c, s.log, err)
		return
	}
	var req contract.MessagesRequest
	for name, dst := range map[string]*int{"offset": &req.Offset, "limit": &req.Limit} {
		if v := c.Query(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				writeError(c, s.log, badRequest("%s %q is not a whole number of 0 or more", name, v))
				return
			}
			*dst = n
		}
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), queryTimeout)
	defer cancel()
	v, err := s.client.QueryWorkflow(ctx, contract.ConversationWorkflowID(conv), "", contract.MessagesQuery, req)
	var page contract.MessagesPage
	if err == nil {
		err = v.Get(&page)
	}
	if err != nil {
		writeError(c, s.log, fmt.Errorf("messages of conversation %s: %w", conv, err))
		return
	}
	c.JSON(http.StatusOK, page)
}

// revokeGrant handles DELETE /conversations/:conversationId/grants/:grantId.
func (s *Server) revokeGrant(c *gin.Context) {
	conv := c.Param("conversationId")
	if err := s.checkConversation(c.Request.Context(), conv); err != nil {
		writeError(c, s.log, err)
		return
	}
	var none struct{}
	reason, err := s.offer(c.Request.Context(), contract.ConversationWorkflowID(conv), contract.RevokeGrantUpdate, "",
		contract.RevokeGrant{GrantID: c.Param("grantId")}, &none)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if reason != "" {
		writeError(c, s.log, fmt.Errorf("grant %q of conversation %s: %w", c.Param("grantId"), conv, errUnknownGrant))
		return
	}
	c.JSON(http.StatusOK, gin.H{"revoked": true})
}

// errUnknownGrant answers a revoke of a grant the conversation does not have.
var errUnknownGrant = errors.New("no such grant")
