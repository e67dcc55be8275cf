package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// parseBatch reads and checks the decisions of POST /chat/approvals, each
// as POST /chat/approval checks one, and says which workflow waits for
// them all. Its errors are badRequestErrors that name the decision and
// what is wrong with it.
func parseBatch(c *gin.Context) ([]protocol.ApprovalDecision, string, error) {
	var b protocol.BatchDecisionRequest
	if err := decodeBody(c, &b); err != nil {
		return nil, "", err
	}
	switch n := len(b.Decisions); {
	case n == 0:
		return nil, "", badRequest("decisions is missing or empty: send one decision or more")
	case n > protocol.MaxBatchDecisions:
		return nil, "", badRequest("decisions holds %d decisions, more than the limit of %d: send them in several requests", n, protocol.MaxBatchDecisions)
	}
	out := make([]protocol.ApprovalDecision, 0, len(b.Decisions))
	seen := make(map[string]int, len(b.Decisions))
	var wid string
	for i, req := range b.Decisions {
		d, err := decisionOf(req)
		if err != nil {
			return nil, "", badRequest("decisions[%d]: %s", i, err)
		}
		if j, ok := seen[d.RequestID]; ok {
			return nil, "", badRequest("decisions[%d] and decisions[%d] both decide request %s: decide it once", j, i, d.RequestID)
		}
		seen[d.RequestID] = i
		w, ok := contract.RequestWorkflowID(d.RequestID)
		switch {
		case !ok:
			return nil, "", badRequest("decisions[%d]: requestId %q is not a tollgate request id", i, d.RequestID)
		case i == 0:
			wid = w
		case w != wid:
			return nil, "", badRequest("decisions[%d]: request %s is not of the same turn as decisions[0] (%s): one request decides the calls of one turn", i, d.RequestID, wid)
		}
		out = append(out, d)
	}
	return out, wid, nil
}

// approveAll handles POST /chat/approvals: it sends the decisions, each
// made by the caller as POST /chat/approval makes one, to the turn that
// waits for them, as one approvals Update. The turn takes all or none; the
// answer is {"accepted": true, "decided": n}, or {"accepted": false,
// "reason": ..., "requestId": ..., "message": ...} naming the first
// decision it refused and why.
func (s *Server) approveAll(c *gin.Context) {
	ds, wid, err := parseBatch(c)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	for i := range ds {
		ds[i] = s.decidedBy(c, ds[i])
	}
	batch := protocol.ApprovalBatch{Decisions: ds}
	var res protocol.ApprovalBatchResult
	refused, err := s.sendUpdate(c.Request.Context(), wid, contract.ApprovalsUpdate, batchUpdateID(batch), batch, &res)
	if err == nil && refused != nil {
		res, err = s.batchRefusal(c, wid, refused)
	}
	if err != nil {
		s.countBatch(ds, outcomeError)
		writeError(c, s.log, err)
		return
	}
	if !res.Accepted {
		s.countBatch(ds, outcomeRejected)
	} else {
		s.countBatch(ds, outcomeAccepted)
	}
	s.log.Info("approvals", "workflowId", wid, "decisions", len(ds), "by", ds[0].Principal, "role", ds[0].Role,
		"accepted", res.Accepted, "reason", res.Reason, "requestId", res.RequestID)
	c.JSON(http.StatusOK, res)
}

// batchRefusal is the answer to a batch the turn refused: the reason and
// request whose decision it refused (none when the turn is gone), and why
// in words. An invalid
// decision is a badRequestError, as POST /chat/approval answers one.
func (s *Server) batchRefusal(c *gin.Context, wid string, refused error) (protocol.ApprovalBatchResult, error) {
	reason, err := refusalReason(refused)
	if err != nil {
		return protocol.ApprovalBatchResult{}, err
	}
	res := protocol.ApprovalBatchResult{Reason: reason, RequestID: contract.RejectedRequest(refused), Message: refused.Error()}
	var app *temporal.ApplicationError
	if errors.As(refused, &app) {
		res.Message = app.Message()
	}
	if res.RequestID == "" && reason == protocol.RejectUnknown {
		// No validator named a request: the turn is gone or closed, or
		// ended for a payload its history names (say so, as
		// POST /chat/approval does).
		if lost := closedLost(c.Request.Context(), s.client, wid); lost != nil {
			res.Message = lost.Error()
		}
	}
	return res, nil
}

// countBatch counts each decision of a batch with outcome.
func (s *Server) countBatch(ds []protocol.ApprovalDecision, outcome string) {
	for _, d := range ds {
		s.metrics.decision(d.Decision, outcome)
	}
}

// batchUpdateID names the Update that carries b, as decisionUpdateID
// names one decision's: the same decisions by the same caller always get
// the same id, so a retried request is told the first one's outcome.
func batchUpdateID(b protocol.ApprovalBatch) string {
	j, _ := json.Marshal(b) // strings, bools and numbers: cannot fail
	sum := sha256.Sum256(j)
	return "decisions-" + hex.EncodeToString(sum[:16])
}
