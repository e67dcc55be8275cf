package contract

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

// closed reports whether c is closed.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestAControlWatcherKeepsTheNewestStateAndSaysWhenTheFreezeChanged(t *testing.T) {
	w := NewControlWatcher()
	require.False(t, w.Frozen(), "nothing read: not frozen")
	require.Empty(t, w.State().StandInFor("bob", time.Now()))

	first := w.Changed()
	w.Set(ControlState{Epoch: "e1"})
	require.False(t, closed(first), "not frozen before, not frozen now")

	at := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	frozen := ControlState{Epoch: "e1", Changes: 2, Freeze: protocol.GateFreeze{Frozen: true, By: "root", At: at}}
	w.Set(frozen)
	require.True(t, closed(first))
	require.True(t, w.Frozen())

	// A poll that was under way as the freeze was taken answers the state
	// before it: dropped.
	next := w.Changed()
	w.Set(ControlState{Epoch: "e1", Changes: 1})
	require.True(t, w.Frozen())
	require.False(t, closed(next))
	// The same freeze read again changes nothing.
	w.Set(frozen)
	require.False(t, closed(next))
	// A control workflow started again counts from 0.
	w.Set(ControlState{Epoch: "e2"})
	require.False(t, w.Frozen())
	require.True(t, closed(next))
}

func TestAStandInIsFoundOnlyWithinTheDelegationsPeriod(t *testing.T) {
	at := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	s := &ControlState{Delegations: []protocol.Delegation{{ID: "d1", From: "alice", To: "bob", Since: at, Until: at.Add(time.Hour)}}}
	require.Equal(t, "alice", s.StandInFor("bob", at))
	require.Equal(t, "alice", s.StandInFor("bob", at.Add(59*time.Minute)))
	require.Empty(t, s.StandInFor("bob", at.Add(-time.Second)), "not yet")
	require.Empty(t, s.StandInFor("bob", at.Add(time.Hour)), "over")
	require.Empty(t, s.StandInFor("alice", at), "the one away stands in for nobody")
	require.Empty(t, s.StandInFor("", at))
}

func TestAWorkersWatcherHoldsTheGateFrozenUntilItsFirstRead(t *testing.T) {
	w := NewFrozenControlWatcher()
	require.True(t, w.Frozen(), "a worker starting in a freeze must not answer by grant before it reads it")
	w.Set(ControlState{})
	require.False(t, w.Frozen(), "read: no control workflow, not frozen")
	w.Set(ControlState{Epoch: "e1", Changes: 1, Freeze: protocol.GateFreeze{Frozen: true, By: "root"}})
	require.True(t, w.Frozen())
}
