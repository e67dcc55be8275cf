package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/gin-gonic/gin"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// maxBodyBytes bounds every request body.
const maxBodyBytes = 64 << 10

// parseApproval reads and checks a decision. Its errors are badRequestErrors
// that name what is wrong.
func parseApproval(r io.Reader) (protocol.ApprovalDecision, error) {
	var b protocol.DecisionRequest
	if err := decodeJSON(r, &b); err != nil {
		return protocol.ApprovalDecision{}, err
	}
	return decisionOf(b)
}

// decisionOf checks a decision as a client sent it and makes it the
// Update's. Its errors are badRequestErrors that name what is wrong.
func decisionOf(b protocol.DecisionRequest) (protocol.ApprovalDecision, error) {
	if b.RequestID == "" {
		return protocol.ApprovalDecision{}, badRequest("requestId is missing")
	}
	if b.Decision == "" {
		return protocol.ApprovalDecision{}, badRequest("decision is missing: use %q or %q", protocol.DecisionApprove, protocol.DecisionDecline)
	}
	args, err := editedArguments(b.Arguments)
	if err != nil {
		return protocol.ApprovalDecision{}, err
	}
	d := protocol.ApprovalDecision{
		RequestID: b.RequestID, Decision: b.Decision, Reason: b.Reason, Arguments: args,
		Remember: b.Remember, SameArguments: b.SameArguments,
		RememberFor: b.RememberFor, RememberUses: b.RememberUses, RememberWhen: b.RememberWhen,
		Unconfined: b.Unconfined,
	}
	if err := d.Check(); err != nil {
		return protocol.ApprovalDecision{}, badRequest("%s", err)
	}
	return d, nil
}

// editedArguments returns the edited tool arguments as compact JSON text, or
// "" when none were sent. They must be a JSON object, sent as one or as a
// string holding one.
func editedArguments(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '{':
		return compactJSON(raw), nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest("arguments is not a valid JSON string: %v", err)
		}
		text := bytes.TrimSpace([]byte(s))
		if len(text) == 0 {
			return "", nil
		}
		if text[0] != '{' || !json.Valid(text) {
			return "", badRequest("arguments must be a JSON object (or a string holding one); the string sent is not: %.80q", s)
		}
		return compactJSON(text), nil
	default:
		return "", badRequest("arguments must be a JSON object (or a string holding one), not %s", jsonKindOf(raw))
	}
}

func compactJSON(valid []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, valid); err != nil {
		return string(valid) // cannot happen: the decoder checked it
	}
	return buf.String()
}

// decodeBody reads a request's body, at most maxBodyBytes, as one JSON
// object into dst (see decodeJSON).
func decodeBody(c *gin.Context, dst any) error {
	return decodeJSON(http.MaxBytesReader(c.Writer, c.Request.Body, maxBodyBytes), dst)
}

// decodeJSON reads exactly one JSON object from r into dst. Its errors are
// badRequestErrors that say what is wrong with the body.
func decodeJSON(r io.Reader, dst any) error {
	dec := json.NewDecoder(r)
	if err := dec.Decode(dst); err != nil {
		return describeJSONError(err)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case isTooLarge(err):
		return describeJSONError(err)
	default:
		return badRequest("body holds more than one JSON value: send one object")
	}
}

// errBodyTooLarge answers a body past maxBodyBytes with 413.
var errBodyTooLarge = fmt.Errorf("body larger than the API's limit of %d KiB: send less (a message's text, a tool result), or split it", maxBodyBytes>>10)

func isTooLarge(err error) bool {
	var tooLarge *http.MaxBytesError
	return errors.As(err, &tooLarge)
}

// describeJSONError turns a decoding error into a message for the client.
func describeJSONError(err error) error {
	var (
		syntax   *json.SyntaxError
		wrongTyp *json.UnmarshalTypeError
	)
	switch {
	case isTooLarge(err):
		return errBodyTooLarge
	case errors.Is(err, io.EOF):
		return badRequest("body is empty: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("body is not valid JSON: it ends too early")
	case errors.As(err, &syntax):
		return badRequest("body is not valid JSON: %v (at byte %d)", syntax, syntax.Offset)
	case errors.As(err, &wrongTyp):
		if wrongTyp.Field == "" {
			return badRequest("body must be a JSON object, not %s", wrongTyp.Value)
		}
		return badRequest("%s must be %s, not %s", wrongTyp.Field, jsonKind(wrongTyp.Type), wrongTyp.Value)
	default:
		return badRequest("body cannot be read: %v", err)
	}
}

// jsonKind names the JSON kind a Go type is decoded from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// jsonKindOf names the kind of a raw JSON value.
func jsonKindOf(raw []byte) string {
	switch raw[0] {
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case '"':
		return "a string"
	default:
		return "a number"
	}
}

// approve handles POST /chat/approval. It answers {"accepted": true} when
// the waiting workflow took the decision, and {"accepted": false, "reason":
// ...} (a protocol.Reject reason) when it did not.
func (s *Server) approve(c *gin.Context) {
	d, err := parseApproval(http.MaxBytesReader(c.Writer, c.Request.Body, maxBodyBytes))
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	d, res, err := s.decideAsCaller(c, d)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if res.Reason != "" {
		answer := protocol.ApprovalResult{Reason: res.Reason, Message: res.Message}
		if lost := s.lostTurnOf(c.Request.Context(), d.RequestID, res.Reason); lost != nil {
			answer.Message = lost.Error()
		}
		c.JSON(http.StatusOK, answer)
		return
	}
	if res.Pending {
		// A vote of a quorum's that leaves the call waiting.
		c.JSON(http.StatusOK, protocol.ApprovalResult{Accepted: true, Pending: true, Votes: res.Votes, Message: res.Message})
		return
	}
	c.JSON(http.StatusOK, gin.H{"accepted": true})
}

// decideAsCaller sends d, decided by the caller of c, to the turn that
// waits for it, and counts it: the result's Reason is why the turn did not
// take it ("" when it did). POST /chat/approval and the AI SDK's approval
// responses (POST /ai-sdk/chat) decide through it.
func (s *Server) decideAsCaller(c *gin.Context, d protocol.ApprovalDecision) (protocol.ApprovalDecision, protocol.ApprovalResult, error) {
	d = s.decidedBy(c, d)
	res, _, err := s.decideAs(c.Request.Context(), d)
	return d, res, err
}

// decideAs sends d, decided by its Principal in its Role, to the turn
// that waits for it, and counts it: the result says what the turn did with
// it, and why is the turn's own words for a refusal (which rule refused
// whom). decideAsCaller and Slack's buttons (POST /slack/interactions)
// decide through it.
func (s *Server) decideAs(ctx context.Context, d protocol.ApprovalDecision) (protocol.ApprovalResult, string, error) {
	res, why, err := s.decide(ctx, d, decisionUpdateID(d))
	switch {
	case err != nil:
		s.metrics.decision(d.Decision, outcomeError)
	case res.Reason != "":
		s.metrics.decision(d.Decision, outcomeRejected)
	default:
		s.metrics.decision(d.Decision, outcomeAccepted)
	}
	return res, why, err
}

// decidedBy is d as the caller of c decides it: who decides is the
// token's principal, in the role that lets it and the token's team roles,
// and for whom they stand in now (PUT /delegations), never what the body
// says.
func (s *Server) decidedBy(c *gin.Context, d protocol.ApprovalDecision) protocol.ApprovalDecision {
	tok, _ := caller(c)
	return s.decidedAs(d, tok.Principal, callerRole(c, config.RoleApprove), tok.Teams)
}

// decidedAs is d decided by principal in role and teams, and for whom they
// stand in now (PUT /delegations): what the API, not the body, says of
// who decides (decidedBy, and Slack's buttons).
func (s *Server) decidedAs(d protocol.ApprovalDecision, principal, role string, teams []string) protocol.ApprovalDecision {
	d.Principal, d.Role, d.Teams = principal, role, slices.Clone(teams)
	d.OnBehalfOf = s.control.State().StandInFor(principal, time.Now())
	return d
}

// lostTurnOf says why the turn of request id ended, when it was refused
// as unknown because the worker ended the turn for a payload its history
// names and the store no longer holds: the answer then says so, rather
// than leave the caller to guess at a mistyped id.
func (s *Server) lostTurnOf(ctx context.Context, requestID, reason string) *turnLostError {
	wid, ok := contract.RequestWorkflowID(requestID)
	if !ok || reason != protocol.RejectUnknown {
		return nil
	}
	return closedLost(ctx, s.client, wid)
}

// decide sends d to the turn that waits for it, as the Update updateID,
// and answers what the turn said: its result, with Reason why it did not
// take d ("" when it did) and, for a principal who voted already, Message
// saying so; why is the workflow's words for any refusal ("" when it took
// d). The request id names its workflow, so any API instance can deliver
// any decision; only the workflow's validator can tell a genuine id.
func (s *Server) decide(ctx context.Context, d protocol.ApprovalDecision, updateID string) (protocol.ApprovalResult, string, error) {
	wid, ok := contract.RequestWorkflowID(d.RequestID)
	if !ok {
		s.log.Info("approval not taken: not a tollgate request id", "requestId", d.RequestID)
		return protocol.ApprovalResult{Reason: protocol.RejectUnknown}, "", nil
	}
	var res protocol.ApprovalResult
	refused, err := s.sendUpdate(ctx, wid, contract.ApprovalUpdate, updateID, d, &res)
	reason := ""
	if err == nil && refused != nil {
		reason, err = refusalReason(refused)
	}
	if err != nil {
		return protocol.ApprovalResult{}, "", fmt.Errorf("request %s: %w", d.RequestID, err)
	}
	why := ""
	var app *temporal.ApplicationError
	if refused != nil && errors.As(refused, &app) {
		why = app.Message()
	}
	switch {
	case reason == protocol.RejectVoted && app != nil:
		res = protocol.ApprovalResult{Reason: reason, Message: app.Message()}
	case reason != "":
		res = protocol.ApprovalResult{Reason: reason}
	case !res.Accepted:
		res = protocol.ApprovalResult{Reason: protocol.RejectDecided}
	}
	s.log.Info("approval", "requestId", d.RequestID, "decision", d.Decision, "by", d.Principal, "role", d.Role, "accepted", res.Reason == "", "reason", res.Reason, "pending", res.Pending)
	return res, why, nil
}

// decisionUpdateID names the Update that carries d: the same decision on
// the same request, by the same caller, always gets the same id, so a
// client that retries (its answer lost, say) is told the outcome of the
// first attempt, which Temporal keeps, instead of "decided" by itself.
func decisionUpdateID(d protocol.ApprovalDecision) string {
	b, _ := json.Marshal(d) // strings, bools, numbers and a list of strings: cannot fail
	sum := sha256.Sum256(b)
	return "decision-" + hex.EncodeToString(sum[:16])
}

// offer sends an Update to wid and says why the workflow did not take it:
// a protocol.Reject reason (unknown also for a workflow that is gone or
// closed), or "" when it did. Only a failure to reach Temporal is an error.
// An updateID, when not "", makes a retried Update get the first one's
// outcome.
func (s *Server) offer(ctx context.Context, wid, update, updateID string, arg, result any) (string, error) {
	refused, err := s.sendUpdate(ctx, wid, update, updateID, arg, result)
	if err != nil || refused == nil {
		return "", err
	}
	return refusalReason(refused)
}

// refusalReason is the Reject reason of an Update's refusal (unknown for
// a workflow that is gone or closed), or, for an invalid one, a
// badRequestError that says why.
func refusalReason(refused error) (string, error) {
	reason := cmp.Or(contract.RejectionReason(refused), protocol.RejectUnknown)
	var app *temporal.ApplicationError
	if reason == protocol.RejectInvalid && errors.As(refused, &app) {
		return "", badRequest("%s", app.Message())
	}
	return reason, nil
}

// sendUpdate sends an Update to wid and waits for its result: refused is the
// workflow's refusal (its validator's, or a workflow that is gone or
// closed), err a failure to reach Temporal.
func (s *Server) sendUpdate(ctx context.Context, wid, update, updateID string, arg, result any) (refused, err error) {
	ctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		UpdateID:     updateID,
		WorkflowID:   wid,
		UpdateName:   update,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, result)
	}
	switch {
	case err == nil:
		return nil, nil
	case isRejectedUpdate(err):
		s.log.Info("update not taken", "update", update, "workflowId", wid, "reason", err)
		return err, nil
	default:
		return nil, fmt.Errorf("send %s to %s (within %s): %w", update, wid, updateTimeout, err)
	}
}
