package auditdb_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/proctest"
)

// BenchmarkApprovalsFromLedger measures what GET /approvals asks the
// ledger (Pending and CountPending) with 2,000 calls waiting among 20,000
// rows of calls that ended, on SQLite: a page of 100 and of 1,000,
// unfiltered, by tool, by sender and by conversation. Under votes/, every
// waiting row is a quorum call's, with its deciders and a vote cast
// (audit.Record.Deciders, Votes), which the page reads too.
func BenchmarkApprovalsFromLedger(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchApprovalsFromLedger(b, false) })
	b.Run("votes", func(b *testing.B) { benchApprovalsFromLedger(b, true) })
}

func benchApprovalsFromLedger(b *testing.B, votes bool) {
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
		if votes {
			r.Deciders = `["alice","bob","carol","role:oncall"]`
			r.Votes = `{"quorum":2,"declines":1,"cast":[{"by":"alice","role":"approve","decision":"approve","at":"2026-12-05T00:00:00.123456Z"}],"mayVote":["bob","carol","role:oncall"]}`
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

// BenchmarkLedgerWrites measures what a protected call costs the ledger:
// its row written at each stage, asked, decided and ended, a write each as
// a turn makes them, and the ended write again (a retry, which changes
// nothing), on SQLite and on a real PostgreSQL server the benchmark
// starts. Each changing write appends an entry to the chain; the retry
// appends none. docs/production.md compares it with the ledger before the
// chain.
func BenchmarkLedgerWrites(b *testing.B) {
	ctx := context.Background()
	backends := map[string]func(b *testing.B) string{
		"sqlite": func(b *testing.B) string { return filepath.Join(b.TempDir(), "audit.db") },
		"postgres": func(b *testing.B) string {
			pg := proctest.StartPostgres(b, "tollgate")
			admin, err := sql.Open("pgx", pg.URL("postgres"))
			if err != nil {
				b.Fatal(err)
			}
			defer admin.Close()
			if _, err := admin.Exec("CREATE DATABASE bench"); err != nil {
				b.Fatal(err)
			}
			return pg.URL("bench")
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			l, err := auditdb.Open(ctx, backends[name](b))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			now := time.Now()
			i := 0
			for b.Loop() {
				i++
				expires := now.Add(time.Hour)
				r := audit.Record{
					ID: fmt.Sprintf("tollgate-conv-c1-turn-%d/apr-%06d", i, i), Stage: audit.StageAsked, ConversationID: "c1",
					TurnID: "t", WorkflowID: "t", ToolCallID: "call_1", Tool: "Bash", Arguments: `{"command":"make test"}`,
					RequestedAt: now, ExpiresAt: &expires, Preview: "$ make test", UserMessage: "run the tests and tell me what fails",
				}
				d := r.Trimmed()
				d.Stage, d.Decision, d.DecidedBy, d.Principal, d.DecidedAt = audit.StageDecided, "approve", "person", "bob", &now
				e := d
				e.Stage, e.Outcome, e.Result, e.FinishedAt = audit.StageEnded, audit.OutcomeOK, "ok", &now
				for _, rs := range [][]audit.Record{{r}, {d}, {e}, {e}} {
					if err := l.Write(ctx, rs); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkVerify measures Ledger.Verify on SQLite over 20,000 rows, each
// written asked then ended: 40,000 entries.
func BenchmarkVerify(b *testing.B) {
	ctx := context.Background()
	l, err := auditdb.Open(ctx, filepath.Join(b.TempDir(), "audit.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	const n = 20000
	now := time.Now()
	var asked, ended []audit.Record
	for i := range n {
		r := audit.Record{
			ID: fmt.Sprintf("tollgate-conv-c%d-turn-%d/apr-%06d", i%200, i, i), Stage: audit.StageAsked, ConversationID: fmt.Sprintf("c%d", i%200),
			ToolCallID: "call_1", Tool: "Bash", Arguments: `{"command":"make test"}`, RequestedAt: now.Add(-time.Duration(i) * time.Second),
			Preview: "$ make test", UserMessage: "run the tests and tell me what fails",
		}
		asked = append(asked, r)
		r.Stage, r.Decision, r.Outcome, r.Result = audit.StageEnded, "approve", audit.OutcomeOK, "ok"
		ended = append(ended, r.Trimmed())
	}
	for _, rows := range [][]audit.Record{asked, ended} {
		for i := 0; i < len(rows); i += 1000 {
			if err := l.Write(ctx, rows[i:min(i+1000, len(rows))]); err != nil {
				b.Fatal(err)
			}
		}
	}
	for b.Loop() {
		v, err := l.Verify(ctx, "")
		if err != nil || !v.OK || v.Entries != 2*n {
			b.Fatal(err, v)
		}
	}
}
