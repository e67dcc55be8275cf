package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

func newTestHub(t *testing.T, src eventSource) (*hub, *metrics) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m := newMetrics()
	return newHub(ctx, src, slog.New(slog.DiscardHandler), m, fastSettings), m
}

// collect reads a subscription until it is done and returns the sequence
// numbers it got and its final error.
func collect(t *testing.T, s *subscription) ([]int, error) {
	t.Helper()
	var seqs []int
	deadline := time.After(waitFor)
	for {
		events, done, err := s.next()
		for _, e := range events {
			seqs = append(seqs, e.Seq)
		}
		if done {
			return seqs, err
		}
		select {
		case <-s.changed():
		case <-deadline:
			t.Fatalf("subscription not done within %s; got %v", waitFor, seqs)
		}
	}
}

func seqRange(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func TestTwoSubscribersOfOneTurnShareOnePoller(t *testing.T) {
	src := newFakeSource()
	h, m := newTestHub(t, src)
	src.publish("t1", protocol.EventTurnStart, protocol.EventToken)

	a := h.subscribe("t1", 0)
	b := h.subscribe("t1", 0)
	other := h.subscribe("t2", 0)
	defer h.unsubscribe(a)
	defer h.unsubscribe(b)
	defer h.unsubscribe(other)
	src.publish("t1", protocol.EventToken, protocol.EventFinish)

	for _, s := range []*subscription{a, b} {
		seqs, err := collect(t, s)
		require.NoError(t, err)
		require.Equal(t, seqRange(1, 4), seqs)
	}
	require.EqualValues(t, 2, current(m.pollersStarted), "one poller for t1, one for t2")
}

func TestSubscriberResumesAfterItsCursorWithoutGapsOrDuplicates(t *testing.T) {
	src := newFakeSource()
	src.ignoreAfter = true // the source repeats old events; the hub must not
	h, _ := newTestHub(t, src)
	src.publish("t", protocol.EventTurnStart, protocol.EventToken, protocol.EventToken)

	first := h.subscribe("t", 0)
	defer h.unsubscribe(first)
	require.Eventually(t, func() bool { return first.feed.last() == 3 }, waitFor, time.Millisecond)
	resumed := h.subscribe("t", 2)
	defer h.unsubscribe(resumed)
	for range 5 {
		src.publish("t", protocol.EventToken)
	}
	src.publish("t", protocol.EventFinish)

	seqs, err := collect(t, resumed)
	require.NoError(t, err)
	require.Equal(t, seqRange(3, 9), seqs)
	seqs, err = collect(t, first)
	require.NoError(t, err)
	require.Equal(t, seqRange(1, 9), seqs)
}

func TestSubscriberPastTheFinishGetsNothingAndEnds(t *testing.T) {
	src := newFakeSource()
	h, _ := newTestHub(t, src)
	src.publish("t", protocol.EventTurnStart, protocol.EventFinish)

	s := h.subscribe("t", 2)
	defer h.unsubscribe(s)
	seqs, err := collect(t, s)
	require.NoError(t, err)
	require.Empty(t, seqs)
}

func TestPollerStopsWhenLastSubscriberLeaves(t *testing.T) {
	src := newFakeSource()
	h, m := newTestHub(t, src)
	src.publish("t", protocol.EventTurnStart)

	a := h.subscribe("t", 0)
	b := h.subscribe("t", 0)
	require.Eventually(t, func() bool { return src.watching.Load() == 1 }, waitFor, time.Millisecond)

	h.unsubscribe(a)
	src.publish("t", protocol.EventToken)
	require.Eventually(t, func() bool { return b.feed.last() == 2 }, waitFor, time.Millisecond, "b still gets events")
	require.EqualValues(t, 1, current(m.pollersRunning), "b still watches")
	h.unsubscribe(b)
	require.Eventually(t, func() bool {
		return src.watching.Load() == 0 && current(m.pollersRunning) == 0
	}, waitFor, time.Millisecond)
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Empty(t, h.feeds, "a turn nobody watches keeps no buffer")
}

func TestSlowSubscriberDoesNotHoldUpOthers(t *testing.T) {
	src := newFakeSource()
	h, _ := newTestHub(t, src)
	slow := h.subscribe("t", 0) // never reads
	defer h.unsubscribe(slow)
	fast := h.subscribe("t", 0)
	defer h.unsubscribe(fast)

	for range 2000 {
		src.publish("t", protocol.EventToken)
	}
	src.publish("t", protocol.EventFinish)

	seqs, err := collect(t, fast)
	require.NoError(t, err)
	require.Equal(t, seqRange(1, 2001), seqs)
	// The slow one can still catch up, from its own cursor.
	seqs, err = collect(t, slow)
	require.NoError(t, err)
	require.Len(t, seqs, 2001)
}

func TestWakesDuringARunningReadCauseOneMoreRead(t *testing.T) {
	src := newFakeSource()
	gate := make(chan struct{})
	src.readGate = gate
	h, m := newTestHub(t, src)
	s := h.subscribe("t", 0)
	defer h.unsubscribe(s)
	require.Eventually(t, func() bool { return src.reads.Load() == 1 }, waitFor, time.Millisecond)

	for range 100 {
		src.publish("t", protocol.EventToken) // each one wakes the poller
	}
	src.publish("t", protocol.EventFinish)
	src.mu.Lock()
	src.readGate = nil
	src.mu.Unlock()
	close(gate)

	seqs, err := collect(t, s)
	require.NoError(t, err)
	require.Equal(t, seqRange(1, 101), seqs)
	require.LessOrEqual(t, current(m.eventQueries), int64(3), "101 changes during one read coalesce")
}

func TestTurnThatStartsLateIsStreamed(t *testing.T) {
	src := newFakeSource()
	src.setMissing("t", true)
	h, _ := newTestHub(t, src)
	s := h.subscribe("t", 0)
	defer h.unsubscribe(s)
	require.Eventually(t, func() bool { return src.reads.Load() >= 1 }, waitFor, time.Millisecond)

	src.publish("t", protocol.EventTurnStart, protocol.EventFinish)
	src.setMissing("t", false)

	seqs, err := collect(t, s)
	require.NoError(t, err)
	require.Equal(t, seqRange(1, 2), seqs)
}

func TestTurnThatNeverStartsEndsWithNotFound(t *testing.T) {
	src := newFakeSource()
	src.setMissing("t", true)
	h, _ := newTestHub(t, src)
	s := h.subscribe("t", 0)
	defer h.unsubscribe(s)

	seqs, err := collect(t, s)
	require.Empty(t, seqs)
	require.ErrorIs(t, err, errTurnNotFound)
}

func TestNewcomerAfterAFailureGetsAFreshPoller(t *testing.T) {
	src := newFakeSource()
	src.setMissing("t", true)
	h, m := newTestHub(t, src)
	failed := h.subscribe("t", 0)
	defer h.unsubscribe(failed)
	_, err := collect(t, failed)
	require.ErrorIs(t, err, errTurnNotFound)

	src.publish("t", protocol.EventTurnStart, protocol.EventFinish)
	src.setMissing("t", false)
	fresh := h.subscribe("t", 0)
	defer h.unsubscribe(fresh)
	seqs, err := collect(t, fresh)
	require.NoError(t, err)
	require.Equal(t, seqRange(1, 2), seqs)
	require.EqualValues(t, 2, current(m.pollersStarted))
}

func TestTurnThatEndsWithoutFinishEndsTheStreamWithAnError(t *testing.T) {
	src := newFakeSource()
	h, _ := newTestHub(t, src)
	s := h.subscribe("t", 0)
	defer h.unsubscribe(s)
	src.publish("t", protocol.EventTurnStart, protocol.EventToken)
	src.close("t")

	seqs, err := collect(t, s)
	require.Equal(t, seqRange(1, 2), seqs, "the events before the end still arrive")
	require.ErrorContains(t, err, "without a finish event")
}

func TestManyTurnsEachGetTheirOwnEvents(t *testing.T) {
	src := newFakeSource()
	h, m := newTestHub(t, src)
	var subs []*subscription
	for i := range 10 {
		id := fmt.Sprintf("turn-%d", i)
		s := h.subscribe(id, 0)
		defer h.unsubscribe(s)
		subs = append(subs, s)
		for range i {
			src.publish(id, protocol.EventToken)
		}
		src.publish(id, protocol.EventFinish)
	}
	for i, s := range subs {
		seqs, err := collect(t, s)
		require.NoError(t, err)
		require.Equal(t, seqRange(1, i+1), seqs)
	}
	require.EqualValues(t, 10, current(m.pollersStarted))
}

func TestATurnThatIsStartingIsLookedForAtTheShortestWaitThenLessOften(t *testing.T) {
	s := hubSettings{minBackoff: 50 * time.Millisecond, maxBackoff: time.Second, startingFor: 2 * time.Second}
	missing := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

	// While the turn may be starting, every try waits the shortest time,
	// however many came before.
	backoff := s.minBackoff
	for i := range 10 {
		wait, next := s.retryWait(backoff, missing, missing.Add(time.Duration(i)*150*time.Millisecond))
		require.Equal(t, s.minBackoff, wait, "try %d", i)
		backoff = next
	}
	// Then the waits double up to the longest.
	var waits []time.Duration
	for range 6 {
		var wait time.Duration
		wait, backoff = s.retryWait(backoff, missing, missing.Add(3*time.Second))
		waits = append(waits, wait)
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms}, waits)
	// Other failures (the turn exists) back off as before.
	wait, next := s.retryWait(400*time.Millisecond, time.Time{}, missing)
	require.Equal(t, 400*time.Millisecond, wait)
	require.Equal(t, 800*time.Millisecond, next)
}
