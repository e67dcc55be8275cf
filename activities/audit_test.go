package activities

import (
	"context"
	"errors"
	"path/filepath"
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

func TestAFileToolLeavesItsRowsToTheModelCallAndWritesNone(t *testing.T) {
	rows := []audit.Record{{ID: "r1", Stage: audit.StageDecided, Tool: protocol.ToolWrite}}
	dir := t.TempDir()
	tools := &Tools{Workspace: dir, Ledger: &slowWriter{release: make(chan struct{})}}
	fns := tools.Activities()
	write := fns[protocol.ToolWrite].(func(context.Context, ToolInput) (ToolOutput, error))
	in := ToolInput{Call: protocol.ToolCall{ID: "c1", Name: protocol.ToolWrite, Arguments: `{"file_path":"a.txt","content":"hi"}`}, Ledger: rows}
	out, err := write(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	require.Equal(t, "hi", readFile(t, filepath.Join(dir, "a.txt")), "the tool ran")
	require.Equal(t, LedgerStillWriting, out.LedgerRows, "the turn hands the rows to its next activity")
	require.Empty(t, tools.Ledger.(*slowWriter).took, "and the tool wrote none of them")

	// Without rows there is nothing to hand on.
	in.Ledger = nil
	out, err = write(context.Background(), in)
	require.NoError(t, err)
	require.Zero(t, out.LedgerRows)

	// Read and Edit leave theirs too; Bash carries its own.
	for _, name := range []string{protocol.ToolRead, protocol.ToolEdit} {
		fn := fns[name].(func(context.Context, ToolInput) (ToolOutput, error))
		args := map[string]string{protocol.ToolRead: `{"file_path":"a.txt"}`, protocol.ToolEdit: `{"file_path":"a.txt","old_string":"hi","new_string":"ho"}`}[name]
		out, err := fn(context.Background(), ToolInput{Call: protocol.ToolCall{ID: "c2", Name: name, Arguments: args}, Ledger: rows})
		require.NoError(t, err)
		require.Equal(t, protocol.StatusOK, out.Status, out.Result)
		require.Equal(t, LedgerStillWriting, out.LedgerRows, name)
	}
	require.Equal(t, "ho", readFile(t, filepath.Join(dir, "a.txt")))
	require.Empty(t, tools.Ledger.(*slowWriter).took)
}
