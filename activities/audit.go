package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/tollgate/tollgate/internal/audit"
)

// AuditActivity is the name of the local activity that writes rows of the
// audit ledger for a worker whose Settings.Audit is true.
const AuditActivity = "Audit"

// Auditor writes the turn's rows to the ledger (package auditdb's Ledger).
// A write is idempotent (a row is keyed by its request), so the activity's
// retries, and a replay's, never duplicate a row.
type Auditor struct {
	Ledger audit.Writer
}

// Audit writes records in one transaction.
func (a *Auditor) Audit(ctx context.Context, records []audit.Record) error {
	return a.Ledger.Write(ctx, records)
}

// carryWait bounds how long an activity that carried ledger rows waits for
// the ledger once its own work is done: a ledger that does not answer
// costs the activity this much at most, and the rows stay with the turn,
// which writes them later.
const carryWait = 5 * time.Second

// Carry runs work, an activity's own, while it writes rows, the ledger rows
// its turn handed it (ToolInput.Ledger, ModelInput.Ledger), and reports how
// many of them the ledger took: all or none. A turn hands the rows of a
// decision and of its outcome to the next activity it runs instead of
// waiting for a write of its own, so that no write sits between a
// decision and its tool, or between a tool and its result (the turn's
// owe). Without a ledger (nil), or rows, it only runs work.
func Carry(ctx context.Context, ledger audit.Writer, rows []audit.Record, work func()) int {
	if ledger == nil || len(rows) == 0 {
		work()
		return 0
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), carryWait)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ledger.Write(wctx, rows) }()
	work()
	if err := <-done; err != nil {
		if activity.IsActivity(ctx) {
			activity.GetLogger(ctx).Warn("audit ledger: the rows this activity carried were not written; its turn writes them later", "rows", len(rows), "error", err)
		}
		return 0
	}
	return len(rows)
}

// Carried is fn, a tool's activity, taking the ledger rows its input
// carries (ToolInput.Ledger) to ledger while it runs; a nil ledger takes
// none, and the turn writes them later itself.
func Carried(ledger audit.Writer, fn func(context.Context, ToolInput) (ToolOutput, error)) func(context.Context, ToolInput) (ToolOutput, error) {
	return func(ctx context.Context, in ToolInput) (out ToolOutput, err error) {
		n := Carry(ctx, ledger, in.Ledger, func() { out, err = fn(ctx, in) })
		out.LedgerRows = n
		return out, err
	}
}
