package activities

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/protocol"
)

// slowWriter takes rows only once released; it records what it took.
type slowWriter struct {
	release chan struct{}
	fail    error
	mu      sync.Mutex
	took    [][]audit.Record
}

func (w *slowWriter) Write(ctx context.Context, rows []audit.Record) error {
	select {
	case <-w.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if w.fail != nil {
		return w.fail
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.took = append(w.took, rows)
	return nil
}

func TestAToolsCarriedRowsNeverHoldItsResultAndAModelCallWaitsForThem(t *testing.T) {
	rows := []audit.Record{{ID: "r1", Stage: audit.StageDecided, Tool: protocol.ToolWrite}}
	ran := func(context.Context, ToolInput) (ToolOutput, error) {
		return ToolOutput{Status: protocol.StatusOK, Result: "done"}, nil
	}

	// The database has not answered when the tool is done: the tool
	// answers at once, and the write goes on and lands.
	w := &slowWriter{release: make(chan struct{})}
	out, err := Carried(w, ran)(context.Background(), ToolInput{Ledger: rows})
	require.NoError(t, err)
	require.Equal(t, "done", out.Result)
	require.Equal(t, LedgerStillWriting, out.LedgerRows, "the turn carries them again")
	close(w.release)
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.took) == 1
	}, carryWait, time.Millisecond, "the write went on after the tool's answer")

	// A model call waits for its write, and says whether it took.
	ok := &slowWriter{release: make(chan struct{})}
	close(ok.release)
	require.Equal(t, 1, Carry(context.Background(), ok, rows, true, func() {}))
	failing := &slowWriter{release: make(chan struct{}), fail: errors.New("connection refused")}
	close(failing.release)
	require.Equal(t, 0, Carry(context.Background(), failing, rows, true, func() {}))

	// Nothing to carry, or no ledger: only the work.
	require.Equal(t, 0, Carry(context.Background(), nil, rows, true, func() {}))
	require.Equal(t, 0, Carry(context.Background(), ok, nil, false, func() {}))
}
