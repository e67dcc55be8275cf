package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// controlTimeout bounds one change of the control workflow.
const controlTimeout = 30 * time.Second

// anonymousAdmin names the admin of a change made through an API without
// tokens, where anyone may do anything.
const anonymousAdmin = "anonymous"

// errGateFrozen refuses a message while the gate is frozen with new turns
// blocked, and bypassApproval while it is frozen at all: 423 Locked.
var errGateFrozen = errors.New("the gate is frozen")

// errUnknownDelegation answers a removal of a delegation that is not
// there: 404.
var errUnknownDelegation = errors.New("no such delegation, or it is over")

// watchControl reads the control workflow until the server closes
// (contract.ControlWatcher): a failed read is logged once until a read
// works again, and keeps what was read last.
func (s *Server) watchControl() {
	failing := false
	onError := func(err error) {
		if !failing {
			s.log.Warn("cannot read the gate's control workflow: the freeze and stand-ins the API knows may be stale", "error", err)
		}
		failing = true
	}
	for {
		if err := s.control.Poll(s.ctx, s.client); err != nil {
			onError(err)
		} else {
			failing = false
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(contract.ControlPollInterval):
		}
	}
}

// checkFreeze refuses a message while the gate is frozen with new turns
// blocked, and one that asks to bypass approval while it is frozen.
func (s *Server) checkFreeze(bypass bool) error {
	st := s.control.State()
	if st == nil || !st.Freeze.Frozen {
		return nil
	}
	f := st.Freeze
	why := ""
	if f.Reason != "" {
		why = " (" + f.Reason + ")"
	}
	switch {
	case f.BlockNewTurns:
		return fmt.Errorf("%w by %s since %s%s: it takes no new messages until an admin thaws it (POST /admin/thaw)",
			errGateFrozen, f.By, f.At.UTC().Format(time.RFC3339), why)
	case bypass:
		return fmt.Errorf("%w by %s since %s%s: bypassApproval is refused while it is; send without it, and every protected call asks",
			errGateFrozen, f.By, f.At.UTC().Format(time.RFC3339), why)
	}
	return nil
}

// adminName is the caller as a change of the control workflow names it.
func adminName(c *gin.Context) string {
	return cmp.Or(principal(c), anonymousAdmin)
}

// changeControl sends the control Update name with in, starting the
// control workflow when it is not running (update-with-start), and keeps
// the state it answers. A refusal is a badRequestError that says why, or
// errUnknownDelegation.
//
// A control workflow started again starts from the state the last one
// held (which its query still answers once it is closed): an operator who
// terminated it must not thaw the gate, or drop the stand-ins, as a side
// effect of the next change, with no row in the ledger that says so.
func (s *Server) changeControl(ctx context.Context, name string, in any) (contract.ControlState, error) {
	release, err := s.calls.acquire("change the gate's control")
	if err != nil {
		return contract.ControlState{}, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	last, err := contract.ReadControl(ctx, s.client)
	if err != nil {
		return contract.ControlState{}, fmt.Errorf("read the gate's control workflow %s before changing it: %w", contract.ControlWorkflowID, err)
	}
	start := s.client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       contract.ControlWorkflowID,
		TaskQueue:                s.taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, contract.ControlWorkflow, contract.ControlInput{State: last})
	h, err := s.client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: name, Args: []any{in}, WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var st contract.ControlState
	if err == nil {
		err = h.Get(ctx, &st)
	}
	var app *temporal.ApplicationError
	switch {
	case err == nil:
	case errors.As(err, &app) && contract.RejectionReason(err) == protocol.RejectUnknown:
		return st, fmt.Errorf("%s: %w", app.Message(), errUnknownDelegation)
	case errors.As(err, &app) && contract.RejectionReason(err) == protocol.RejectInvalid:
		return st, badRequest("%s", app.Message())
	default:
		return st, fmt.Errorf("%s the gate's control workflow %s (within %s): %w", name, contract.ControlWorkflowID, controlTimeout, err)
	}
	s.control.Set(st)
	s.log.Info("gate control changed", "update", name, "changes", st.Changes, "frozen", st.Freeze.Frozen, "delegations", len(st.Delegations))
	return st, nil
}

// ledgerAdmin writes the ledger's row of a change of the control
// workflow, made by admin (with role), when the API keeps a ledger: kind
// is an audit.Kind*, what the change's body (a JSON object). The row is
// named by the control workflow's epoch and the change's number
// (control:<epoch>:<n>), so writing it again rewrites it.
func (s *Server) ledgerAdmin(ctx context.Context, st contract.ControlState, kind, admin, role, reason string, what any) {
	if s.ledger == nil {
		return
	}
	args, _ := json.Marshal(what) // request bodies: they encode
	now := time.Now().UTC()
	r := audit.Record{
		ID: "control:" + st.Epoch + ":" + strconv.Itoa(st.Changes), Stage: audit.StageEnded, Kind: kind, Tool: audit.AdminTool, WorkflowID: contract.ControlWorkflowID,
		Arguments: string(args), RequestedAt: now, DecidedAt: &now, FinishedAt: &now, Principal: admin, Role: role,
		DecidedBy: "admin", Reason: reason,
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if err := s.ledger.Write(ctx, []audit.Record{r}); err != nil {
		s.log.Error("the ledger did not take an admin's change", "kind", kind, "by", admin, "id", r.ID, "error", err)
	}
}

// getFreeze handles GET /admin/freeze: whether the gate is frozen, by
// whom and why, as this API read it last.
func (s *Server) getFreeze(c *gin.Context) {
	if err := s.control.Poll(c.Request.Context(), s.client); err != nil {
		writeError(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, s.control.State().Freeze)
}

// freeze handles POST /admin/freeze.
func (s *Server) freeze(c *gin.Context) {
	var req protocol.FreezeRequest
	if !s.decodeOptionalBody(c, &req) {
		return
	}
	admin := adminName(c)
	st, ok := s.adminChange(c, admin, contract.FreezeUpdate, contract.FreezeInput{By: admin, FreezeRequest: req}, audit.KindFreeze,
		func(st contract.ControlState) (string, any) { return st.Freeze.Reason, req })
	if ok {
		c.JSON(http.StatusOK, st.Freeze)
	}
}

// thaw handles POST /admin/thaw.
func (s *Server) thaw(c *gin.Context) {
	var req protocol.ThawRequest
	if !s.decodeOptionalBody(c, &req) {
		return
	}
	admin := adminName(c)
	st, ok := s.adminChange(c, admin, contract.ThawUpdate, contract.ThawInput{By: admin, Reason: req.Reason}, audit.KindThaw,
		func(st contract.ControlState) (string, any) { return st.Freeze.Reason, req })
	if ok {
		c.JSON(http.StatusOK, st.Freeze)
	}
}

// decodeOptionalBody decodes the request's body into v, when it has one:
// the freeze routes take a POST with no body. It answers false once it has
// written the error of a body that does not decode.
func (s *Server) decodeOptionalBody(c *gin.Context, v any) bool {
	if c.Request.ContentLength == 0 {
		return true
	}
	if err := decodeBody(c, v); err != nil {
		writeError(c, s.log, err)
		return false
	}
	return true
}

// adminChange makes admin's change of the gate's control workflow (the
// Update name, with in, which names admin too) and writes its ledger row of
// kind, by admin, whose reason and
// recorded body row takes from the state the change answered. It answers
// that state, or false once it has written the error.
func (s *Server) adminChange(c *gin.Context, admin, name string, in any, kind string, row func(contract.ControlState) (reason string, what any)) (contract.ControlState, bool) {
	st, err := s.changeControl(c.Request.Context(), name, in)
	if err != nil {
		writeError(c, s.log, err)
		return st, false
	}
	reason, what := row(st)
	s.ledgerAdmin(c.Request.Context(), st, kind, admin, callerRole(c, config.RoleAdmin), reason, what)
	return st, true
}

// listDelegations handles GET /delegations.
func (s *Server) listDelegations(c *gin.Context) {
	if err := s.control.Poll(c.Request.Context(), s.client); err != nil {
		writeError(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, delegationsOf(s.control.State()))
}

// delegationsOf is the answer of the delegation routes.
func delegationsOf(st *contract.ControlState) protocol.Delegations {
	out := protocol.Delegations{Delegations: []protocol.Delegation{}}
	if st != nil {
		out.Delegations = append(out.Delegations, st.Delegations...)
	}
	return out
}

// delegate handles PUT /delegations: it adds one, and answers every
// delegation not yet over.
func (s *Server) delegate(c *gin.Context) {
	var req protocol.DelegationRequest
	if err := decodeBody(c, &req); err != nil {
		writeError(c, s.log, err)
		return
	}
	// A stand-in for "link" would let every notice's link decide as the
	// one away: only people stand in, or are stood in for.
	for _, who := range []struct{ field, name string }{{"from", req.From}, {"to", req.To}} {
		if err := config.CheckPerson(strings.TrimSpace(who.name)); who.name != "" && err != nil {
			writeError(c, s.log, badRequest("%s: %v", who.field, err))
			return
		}
	}
	admin := adminName(c)
	st, ok := s.adminChange(c, admin, contract.DelegateUpdate, contract.DelegateInput{By: admin, DelegationRequest: req}, audit.KindDelegate,
		func(st contract.ControlState) (string, any) { return req.Reason, st.Delegations[len(st.Delegations)-1] })
	if ok {
		c.JSON(http.StatusOK, delegationsOf(&st))
	}
}

// undelegate handles DELETE /delegations/:id.
func (s *Server) undelegate(c *gin.Context) {
	id := c.Param("id")
	admin := adminName(c)
	st, ok := s.adminChange(c, admin, contract.UndelegateUpdate, contract.UndelegateInput{By: admin, ID: id}, audit.KindUndelegate,
		func(contract.ControlState) (string, any) { return "", gin.H{"id": id} })
	if ok {
		c.JSON(http.StatusOK, delegationsOf(&st))
	}
}

// gateEvent is the event an open stream gets when the freeze changes to
// f: gate_frozen or gate_thawed, without an id.
func gateEvent(f protocol.GateFreeze) protocol.Event {
	e := protocol.Event{Type: protocol.EventGateThawed, By: f.By, Reason: f.Reason}
	if f.Frozen {
		e.Type, e.BlockNewTurns = protocol.EventGateFrozen, f.BlockNewTurns
	}
	return e
}
