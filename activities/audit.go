package activities

import (
	"context"

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
