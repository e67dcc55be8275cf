package workflows

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// controlUpdate sends the control Update name with in at delay and keeps
// its outcome in state or refused.
func controlUpdate(env *testsuite.TestWorkflowEnvironment, delay time.Duration, name string, in any, state *contract.ControlState, refused *error) {
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { *refused = err },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				if err != nil {
					*refused = err
					return
				}
				*state = v.(contract.ControlState)
			},
		}, in)
	}, delay)
}

// rejectType is the Reject reason of a refused control Update.
func rejectType(t *testing.T, err error) string {
	t.Helper()
	var app *temporal.ApplicationError
	require.True(t, errors.As(err, &app), "refused: %v", err)
	return app.Type()
}

func TestControlFreezesAndThawsAndSaysByWhom(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	w := &Workflows{}
	env.RegisterWorkflowWithOptions(w.Control, workflow.RegisterOptions{Name: contract.ControlWorkflow})
	var frozen, thawed, again contract.ControlState
	var noAdmin, notFrozen, unused error
	controlUpdate(env, time.Minute, contract.FreezeUpdate, contract.FreezeInput{FreezeRequest: protocol.FreezeRequest{Reason: "x"}}, &frozen, &noAdmin)
	controlUpdate(env, 2*time.Minute, contract.FreezeUpdate, contract.FreezeInput{By: "root", FreezeRequest: protocol.FreezeRequest{Reason: " incident 7 ", BlockNewTurns: true}}, &frozen, &unused)
	controlUpdate(env, 3*time.Minute, contract.ThawUpdate, contract.ThawInput{By: "ops", Reason: "over"}, &thawed, &unused)
	controlUpdate(env, 4*time.Minute, contract.ThawUpdate, contract.ThawInput{By: "ops"}, &again, &notFrozen)
	var read contract.ControlState
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(contract.ControlQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&read))
		env.CancelWorkflow()
	}, 5*time.Minute)
	env.ExecuteWorkflow(contract.ControlWorkflow, contract.ControlInput{})

	require.NoError(t, unused)
	require.Equal(t, protocol.RejectInvalid, rejectType(t, noAdmin))
	require.ErrorContains(t, noAdmin, "names no admin")
	require.True(t, frozen.Freeze.Frozen)
	require.True(t, frozen.Freeze.BlockNewTurns)
	require.Equal(t, "root", frozen.Freeze.By)
	require.Equal(t, "incident 7", frozen.Freeze.Reason)
	require.False(t, frozen.Freeze.At.IsZero())
	require.Equal(t, 1, frozen.Changes, "a refused change is not counted")
	require.False(t, thawed.Freeze.Frozen)
	require.Equal(t, "ops", thawed.Freeze.By)
	require.Equal(t, 2, thawed.Changes)
	require.ErrorContains(t, notFrozen, "the gate is not frozen")
	require.Equal(t, thawed, read)
}

func TestControlRefusesDelegationsThatMakeNoSense(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	w := &Workflows{}
	env.RegisterWorkflowWithOptions(w.Control, workflow.RegisterOptions{Name: contract.ControlWorkflow})
	start := env.Now()
	at := func(d time.Duration) time.Time { return start.Add(d) }
	day := 24 * time.Hour
	var set contract.ControlState
	var unused error
	delegate := func(delay time.Duration, r protocol.DelegationRequest, refused *error) {
		controlUpdate(env, delay, contract.DelegateUpdate, contract.DelegateInput{By: "root", DelegationRequest: r}, &set, refused)
	}
	// Alice is away for a week, Bob stands in.
	delegate(time.Minute, protocol.DelegationRequest{From: "alice", To: "bob", Until: at(7 * day), Reason: "holiday"}, &unused)
	cases := []struct {
		name string
		r    protocol.DelegationRequest
		want string
	}{
		{"self", protocol.DelegationRequest{From: "carol", To: "carol", Until: at(day)}, "cannot stand in for themself"},
		{"no one", protocol.DelegationRequest{From: "carol", Until: at(day)}, "needs from"},
		{"no end", protocol.DelegationRequest{From: "carol", To: "dave"}, "needs until"},
		{"over", protocol.DelegationRequest{From: "carol", To: "dave", Until: at(0)}, "is not after"},
		{"too long", protocol.DelegationRequest{From: "carol", To: "dave", Until: at(365 * day)}, "longer than"},
		{"second stand-in", protocol.DelegationRequest{From: "alice", To: "carol", Until: at(day)}, "has a stand-in then already"},
		{"two at once", protocol.DelegationRequest{From: "carol", To: "bob", Until: at(day)}, "stands in for \"alice\" then already"},
		{"chain: the stand-in is away", protocol.DelegationRequest{From: "bob", To: "carol", Until: at(day)}, "chain"},
		{"chain: the one away stands in", protocol.DelegationRequest{From: "carol", To: "alice", Until: at(day)}, "chain"},
	}
	refused := make([]error, len(cases))
	for i, c := range cases {
		delegate(time.Duration(i+2)*time.Minute, c.r, &refused[i])
	}
	// After alice's week, bob may stand in for carol.
	delegate(8*day, protocol.DelegationRequest{From: "carol", To: "bob", Until: at(9 * day)}, &unused)
	var before contract.ControlState
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(contract.ControlQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&before))
	}, 2*day)
	var removed contract.ControlState
	var unknown error
	controlUpdate(env, 8*day+time.Minute, contract.UndelegateUpdate, contract.UndelegateInput{By: "root", ID: "delegation-1"}, &removed, &unknown)
	env.RegisterDelayedCallback(env.CancelWorkflow, 10*day)
	env.ExecuteWorkflow(contract.ControlWorkflow, contract.ControlInput{})

	require.NoError(t, unused)
	for i, c := range cases {
		require.Error(t, refused[i], c.name)
		require.Equal(t, protocol.RejectInvalid, rejectType(t, refused[i]), c.name)
		require.ErrorContains(t, refused[i], c.want, c.name)
	}
	require.Len(t, before.Delegations, 1)
	d := before.Delegations[0]
	require.Equal(t, "delegation-1", d.ID)
	require.Equal(t, "root", d.By)
	require.Equal(t, "alice", before.StandInFor("bob", at(2*day)))
	require.Empty(t, before.StandInFor("bob", at(7*day)), "a delegation does nothing after its period")
	require.Empty(t, before.StandInFor("alice", at(2*day)))
	// alice's delegation is over by the time it is removed.
	require.Equal(t, protocol.RejectUnknown, rejectType(t, unknown))
	require.Equal(t, []string{"carol"}, []string{set.Delegations[0].From})
}

func TestControlContinuesAsNewWithItsState(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	w := &Workflows{}
	env.RegisterWorkflowWithOptions(w.Control, workflow.RegisterOptions{Name: contract.ControlWorkflow})
	var state contract.ControlState
	var unused error
	controlUpdate(env, time.Minute, contract.FreezeUpdate, contract.FreezeInput{By: "root"}, &state, &unused)
	controlUpdate(env, 2*time.Minute, contract.DelegateUpdate, contract.DelegateInput{By: "root",
		DelegationRequest: protocol.DelegationRequest{From: "alice", To: "bob", Until: env.Now().Add(time.Hour)}}, &state, &unused)
	env.ExecuteWorkflow(contract.ControlWorkflow, contract.ControlInput{ChangesPerRun: 2})

	require.NoError(t, unused)
	var next *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &next), "the run continues as new after 2 changes: %v", env.GetWorkflowError())
	require.Equal(t, contract.ControlWorkflow, next.WorkflowType.Name)
	var in contract.ControlInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(next.Input, &in))
	require.Equal(t, state, in.State)
	require.Equal(t, 2, in.ChangesPerRun)
	require.True(t, in.State.Freeze.Frozen)
	require.Len(t, in.State.Delegations, 1)
}
