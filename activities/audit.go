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
//
// Unless wait, work's end does not wait for the write: a write still
// under way then answers LedgerStillWriting, goes on on its own, and the
// turn hands the rows to its next activity again (a tool that takes a
// millisecond must not wait for the database; the model call that follows
// waits, as it takes longer anyway).
func Carry(ctx context.Context, ledger audit.Writer, rows []audit.Record, wait bool, work func()) int {
	if ledger == nil || len(rows) == 0 {
		work()
		return 0
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), carryWait)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- ledger.Write(wctx, rows)
	}()
	work()
	var err error
	if wait {
		err = <-done
	} else {
		select {
		case err = <-done:
		default:
			return LedgerStillWriting
		}
	}
	if err != nil {
		if activity.IsActivity(ctx) {
			activity.GetLogger(ctx).Warn("audit ledger: the rows this activity carried were not written; its turn writes them later", "rows", len(rows), "error", err)
		}
		return 0
	}
	return len(rows)
}

// LedgerStillWriting is what an activity says of the rows it carried when
// its work ended before their write did (Carry).
const LedgerStillWriting = -1

// Carried is fn, a tool's activity, taking the ledger rows its input
// carries (ToolInput.Ledger, SandboxApplyInput.Ledger) to ledger while it
// runs, without waiting for them once the tool is done (Carry); a nil
// ledger takes none, and the turn writes them later itself.
func Carried[In carrier](ledger audit.Writer, fn func(context.Context, In) (ToolOutput, error)) func(context.Context, In) (ToolOutput, error) {
	return func(ctx context.Context, in In) (out ToolOutput, err error) {
		n := Carry(ctx, ledger, in.carried(), false, func() { out, err = fn(ctx, in) })
		out.LedgerRows = n
		return out, err
	}
}

// carrier is the input of an activity that answers the model for a tool:
// it carries the ledger rows its turn hands it.
type carrier interface {
	carried() []audit.Record
}

func (in ToolInput) carried() []audit.Record { return in.Ledger }
