package workflows

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// controlChangesPerRun is how many changes a run of the control workflow
// takes before it continues as new: each costs its history a few events.
const controlChangesPerRun = 500

// MaxDelegation bounds how long a delegation may last.
const MaxDelegation = 90 * 24 * time.Hour

// control is the control workflow's state while it runs.
type control struct {
	state contract.ControlState
	// taken counts the changes of this run.
	taken int
}

// Control is the contract.ControlWorkflow: it holds the gate's admin
// state, a freeze and the stand-ins, which admins change by Update (the
// API's /admin/freeze and /delegations), and which workers and APIs read
// by query (contract.ControlWatcher). Every change is validated first: a
// refused one leaves no trace in history. It continues as new, carrying
// the state, after controlChangesPerRun changes.
func (w *Workflows) Control(ctx workflow.Context, in contract.ControlInput) error {
	c := &control{state: in.State}
	info := workflow.GetInfo(ctx)
	// A run made by a reset (its original run ID is another's) counts
	// its changes again from an earlier point: a new epoch makes the
	// watchers take its state, which they would drop as older than the
	// one they hold, and names its ledger rows apart from those of the
	// changes it undid.
	if reset := info.OriginalRunID != "" && info.OriginalRunID != info.WorkflowExecution.RunID; c.state.Epoch == "" || reset {
		c.state.Epoch = info.WorkflowExecution.RunID
	}
	c.state.Delegations = live(c.state.Delegations, workflow.Now(ctx))
	if err := workflow.SetQueryHandler(ctx, contract.ControlQuery, func() (contract.ControlState, error) {
		s := c.state
		s.Delegations = live(slices.Clone(s.Delegations), workflow.Now(ctx))
		return s, nil
	}); err != nil {
		return fmt.Errorf("set %s query handler: %w", contract.ControlQuery, err)
	}
	if err := setControlUpdate(ctx, c, contract.FreezeUpdate, c.freeze); err != nil {
		return err
	}
	if err := setControlUpdate(ctx, c, contract.ThawUpdate, c.thaw); err != nil {
		return err
	}
	if err := setControlUpdate(ctx, c, contract.DelegateUpdate, c.delegate); err != nil {
		return err
	}
	if err := setControlUpdate(ctx, c, contract.UndelegateUpdate, c.undelegate); err != nil {
		return err
	}
	workflow.SetCurrentDetails(ctx, c.state.Summary())
	perRun := cmp.Or(in.ChangesPerRun, controlChangesPerRun)
	if err := workflow.Await(ctx, func() bool {
		return c.taken >= perRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
	}); err != nil {
		return err
	}
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, contract.ControlWorkflow, contract.ControlInput{State: c.state, ChangesPerRun: in.ChangesPerRun})
}

// setControlUpdate sets the handler of the control Update name: change
// makes the new state from a copy of the old one or says why not; the
// validator runs it on a copy and keeps nothing, the handler runs it
// again (the state cannot change in between without a change of its own,
// which is validated again) and keeps what it made.
func setControlUpdate[T any](ctx workflow.Context, c *control, name string, change func(workflow.Context, *contract.ControlState, T) error) error {
	apply := func(ctx workflow.Context, in T) (contract.ControlState, error) {
		s := c.state
		s.Delegations = live(slices.Clone(s.Delegations), workflow.Now(ctx))
		if err := change(ctx, &s, in); err != nil {
			reason := protocol.RejectInvalid
			if errors.Is(err, errUnknownDelegation) {
				reason = protocol.RejectUnknown
			}
			return contract.ControlState{}, rejection(reason, err)
		}
		s.Changes++
		return s, nil
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, name,
		func(ctx workflow.Context, in T) (contract.ControlState, error) {
			s, err := apply(ctx, in)
			if err != nil {
				return s, err
			}
			c.state = s
			c.taken++
			workflow.SetCurrentDetails(ctx, c.state.Summary())
			return s, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, in T) error {
			_, err := apply(ctx, in)
			return err
		}},
	)
}

// errNoAdmin refuses a change that names no admin.
var errNoAdmin = errors.New("the change names no admin (by): the API sets it from the admin's token")

// freeze freezes the gate.
func (c *control) freeze(ctx workflow.Context, s *contract.ControlState, in contract.FreezeInput) error {
	if in.By == "" {
		return errNoAdmin
	}
	s.Freeze = protocol.GateFreeze{Frozen: true, BlockNewTurns: in.BlockNewTurns, By: in.By, At: workflow.Now(ctx), Reason: strings.TrimSpace(in.Reason)}
	return nil
}

// thaw thaws the gate; a gate that is not frozen is refused, so a thaw
// is always a change someone can read in the ledger.
func (c *control) thaw(ctx workflow.Context, s *contract.ControlState, in contract.ThawInput) error {
	if in.By == "" {
		return errNoAdmin
	}
	if !s.Freeze.Frozen {
		return errors.New("the gate is not frozen")
	}
	s.Freeze = protocol.GateFreeze{By: in.By, At: workflow.Now(ctx), Reason: strings.TrimSpace(in.Reason)}
	return nil
}

// delegate adds a stand-in: in.To decides for in.From during the period.
// Refused: no admin, a principal missing, one standing in for themself,
// a period that is over, empty or longer than MaxDelegation, and one
// that overlaps another delegation of the same From (one stand-in at a
// time), or of the same To (a stand-in stands in for one), or would
// make a chain (the stand-in is away, or the one away stands in for
// someone).
func (c *control) delegate(ctx workflow.Context, s *contract.ControlState, in contract.DelegateInput) error {
	now := workflow.Now(ctx)
	d := protocol.Delegation{
		ID: "delegation-" + strconv.Itoa(s.Changes+1), From: strings.TrimSpace(in.From), To: strings.TrimSpace(in.To),
		Since: in.Since, Until: in.Until, Reason: strings.TrimSpace(in.Reason), By: in.By, At: now,
	}
	if d.Since.IsZero() || d.Since.Before(now) {
		d.Since = now
	}
	switch {
	case in.By == "":
		return errNoAdmin
	case d.From == "" || d.To == "":
		return errors.New("a delegation needs from (who is away) and to (who decides for them)")
	case d.From == d.To:
		return fmt.Errorf("%q cannot stand in for themself", d.From)
	case in.Until.IsZero():
		return errors.New("a delegation needs until: when it ends (RFC 3339)")
	case !d.Until.After(d.Since):
		return fmt.Errorf("until %s is not after %s, when the delegation starts", d.Until.UTC().Format(time.RFC3339), d.Since.UTC().Format(time.RFC3339))
	case d.Until.Sub(d.Since) > MaxDelegation:
		return fmt.Errorf("the delegation lasts %s, longer than the %s a delegation may: set it again when it ends", d.Until.Sub(d.Since).Round(time.Hour), MaxDelegation)
	}
	for _, e := range s.Delegations {
		if !e.Since.Before(d.Until) || !d.Since.Before(e.Until) {
			continue // the periods do not overlap
		}
		switch {
		case e.From == d.From:
			return fmt.Errorf("%q has a stand-in then already (%s, %s): remove it first", d.From, e.To, e.ID)
		case e.To == d.To:
			return fmt.Errorf("%q stands in for %q then already (%s): a stand-in stands in for one person at a time", d.To, e.From, e.ID)
		case e.To == d.From:
			return fmt.Errorf("%q stands in for %q then (%s): a stand-in's stand-in would be a chain", d.From, e.From, e.ID)
		case e.From == d.To:
			return fmt.Errorf("%q is away then, %q stands in for them (%s): a chain of stand-ins is refused", d.To, e.To, e.ID)
		}
	}
	s.Delegations = append(s.Delegations, d)
	return nil
}

// undelegate removes the delegation in.ID.
func (c *control) undelegate(_ workflow.Context, s *contract.ControlState, in contract.UndelegateInput) error {
	if in.By == "" {
		return errNoAdmin
	}
	i := slices.IndexFunc(s.Delegations, func(d protocol.Delegation) bool { return d.ID == in.ID })
	if i < 0 {
		return fmt.Errorf("delegation %q: %w", in.ID, errUnknownDelegation)
	}
	s.Delegations = slices.Delete(s.Delegations, i, i+1)
	return nil
}

// errUnknownDelegation refuses the removal of a delegation that is not
// there (never set, removed, or over).
var errUnknownDelegation = errors.New("no such delegation, or it is over")

// live are the delegations of ds not over at now.
func live(ds []protocol.Delegation, now time.Time) []protocol.Delegation {
	return slices.DeleteFunc(ds, func(d protocol.Delegation) bool { return !now.Before(d.Until) })
}
