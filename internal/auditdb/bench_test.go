package auditdb_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
)

// BenchmarkApprovalsFromLedger measures what GET /approvals asks the
// ledger (Pending and CountPending) with 2,000 calls waiting among 20,000
// rows of calls that ended, on SQLite: a page of 100 and of 1,000,
// unfiltered, by tool, by sender and by conversation.
func BenchmarkApprovalsFromLedger(b *testing.B) {
	ctx := context.Background()
	l, err := auditdb.Open(ctx, filepath.Join(b.TempDir(), "audit.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	const waiting, ended = 2000, 20000
	now := time.Now()
	var rows []audit.Record
	for i := range waiting + ended {
		expires := now.Add(time.Hour + time.Duration(i%997)*time.Second)
		wid := fmt.Sprintf("tollgate-conv-c%d-turn-%d", i%200, i)
		r := audit.Record{
			ID: fmt.Sprintf("%s/apr-%06d", wid, i), Stage: audit.StageAsked, ConversationID: fmt.Sprintf("c%d", i%200),
			TurnID: wid, WorkflowID: wid, ToolCallID: "call_1", Tool: []string{"Bash", "Write", "Edit", "Deploy"}[i%4],
			Arguments: `{"command":"make test"}`, Sender: fmt.Sprintf("p%d", i%20), RequestedAt: now.Add(-time.Duration(i) * time.Second),
			ExpiresAt: &expires, Preview: "$ make test", UserMessage: "run the tests and tell me what fails",
		}
		if i >= waiting {
			r.Stage, r.Decision, r.Outcome, r.Result = audit.StageEnded, "approve", audit.OutcomeOK, "ok"
		}
		rows = append(rows, r)
	}
	for i := 0; i < len(rows); i += 1000 {
		if err := l.Write(ctx, rows[i:min(i+1000, len(rows))]); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		f    auditdb.PendingFilter
	}{
		{"unfiltered/limit=100", auditdb.PendingFilter{Limit: 100}},
		{"unfiltered/limit=1000", auditdb.PendingFilter{Limit: 1000}},
		{"tool/limit=100", auditdb.PendingFilter{Tool: "Deploy", Limit: 100}},
		{"sender/limit=100", auditdb.PendingFilter{Sender: "p7", Limit: 100}},
		{"conversation/limit=100", auditdb.PendingFilter{Conversation: "c42", Limit: 100}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				recs, _, err := l.Pending(ctx, bc.f)
				if err != nil || len(recs) == 0 {
					b.Fatal(err, len(recs))
				}
				if _, err := l.CountPending(ctx, bc.f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
