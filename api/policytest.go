package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// policyTestTimeout bounds POST /policy/test and /policy/check: a worker
// reads the window of the ledger asked and evaluates every row.
const policyTestTimeout = 2 * time.Minute

// testPolicy handles POST /policy/test: a worker evaluates the candidate
// policy on the audit ledger's rows (contract.PolicyTestWorkflow), and the
// report says what it would have done differently.
func (s *Server) testPolicy(c *gin.Context) { s.runPolicyTest(c, true) }

// checkPolicy handles POST /policy/check: a worker checks the candidate's
// examples alone.
func (s *Server) checkPolicy(c *gin.Context) { s.runPolicyTest(c, false) }

// runPolicyTest runs a policy test on a worker of the task queue: the API
// links no CEL, so only a worker can compile the candidate. One that does
// not parse answers 400, naming the rule.
func (s *Server) runPolicyTest(c *gin.Context, backtest bool) {
	var req protocol.PolicyTestRequest
	if err := decodeBody(c, &req); err != nil {
		writeError(c, s.log, err)
		return
	}
	switch {
	case strings.TrimSpace(req.Policy) == "":
		writeError(c, s.log, badRequest("policy is empty: send the text of the policy file"))
		return
	case req.ConversationID != "":
		if err := checkConversationID(req.ConversationID); err != nil {
			writeError(c, s.log, err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), policyTestTimeout)
	defer cancel()
	run, err := s.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       contract.PolicyTestWorkflowID(uuid.NewString()),
		TaskQueue:                s.taskQueue,
		WorkflowExecutionTimeout: policyTestTimeout,
	}, contract.PolicyTestWorkflow, contract.PolicyTestInput{Request: req, Backtest: backtest})
	var report protocol.PolicyReport
	if err == nil {
		err = run.Get(ctx, &report)
	}
	var app *temporal.ApplicationError
	switch {
	case err == nil:
		c.JSON(http.StatusOK, report)
	case errors.As(err, &app) && app.Type() == contract.ErrBadPolicy:
		writeError(c, s.log, badRequest("%s", app.Message()))
	case errors.As(err, &app) && app.Type() == contract.ErrNoLedger:
		c.JSON(http.StatusNotFound, gin.H{"error": app.Message()})
	default:
		writeError(c, s.log, fmt.Errorf("policy test: %w", err))
	}
}
