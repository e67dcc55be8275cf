package auditdb_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
)

// rawDB opens the ledger's database at dsn with database/sql alone, as
// someone with write access to it would.
func rawDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	driver, source := "pgx", dsn
	if !strings.HasPrefix(dsn, "postgres") {
		require.NoError(t, os.MkdirAll(filepath.Dir(dsn), 0o755))
		driver, source = "sqlite", "file:"+dsn+"?_pragma=busy_timeout(10000)"
	}
	db, err := sql.Open(driver, source)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func verify(t *testing.T, l *auditdb.Ledger, head string) audit.Verification {
	t.Helper()
	v, err := l.Verify(context.Background(), head)
	require.NoError(t, err)
	return v
}

func entries(t *testing.T, db *sql.DB) []audit.Entry {
	t.Helper()
	rows, err := db.Query("SELECT seq, id, stage, content, prev_hash, hash FROM tollgate_audit_chain ORDER BY seq")
	require.NoError(t, err)
	defer rows.Close()
	var out []audit.Entry
	for rows.Next() {
		var e audit.Entry
		require.NoError(t, rows.Scan(&e.Seq, &e.ID, &e.Stage, &e.Content, &e.PrevHash, &e.Hash))
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}

// chained writes r1 (asked, then declined), r2 (asked, then approved) and
// r3 (asked): five versions, five entries, r3's the last.
func chained(t *testing.T, l *auditdb.Ledger) {
	t.Helper()
	ctx := context.Background()
	r1, r2, r3 := asked("r1", "c1", "Bash", t0), asked("r2", "c1", "Write", t0.Add(time.Second)), asked("r3", "c2", "Bash", t0.Add(2*time.Second))
	require.NoError(t, l.Write(ctx, []audit.Record{r1, r2}))
	require.NoError(t, l.Write(ctx, []audit.Record{ended(r1, "decline", "bob", audit.OutcomeNotRun)}))
	require.NoError(t, l.Write(ctx, []audit.Record{ended(r2, "approve", "carol", audit.OutcomeOK).Trimmed()}))
	require.NoError(t, l.Write(ctx, []audit.Record{r3}))
}

func testChainHasAnEntryForEachVersion(t *testing.T, l *auditdb.Ledger, dsn string) {
	ctx := context.Background()
	chained(t, l)
	db := rawDB(t, dsn)
	es := entries(t, db)
	require.Len(t, es, 5)
	v := verify(t, l, "")
	require.True(t, v.OK, "%+v", v.FirstBad)
	require.Equal(t, audit.Verification{OK: true, Entries: 5, Rows: 3, Head: es[4].Hash, HeadSeq: 5}, v)

	// Each row has its latest entry's hash, and that entry's content is
	// the row as it reads (r2's arguments kept from its asked write).
	page, err := l.List(ctx, auditdb.Filter{})
	require.NoError(t, err)
	latest := map[string]audit.Entry{}
	for _, e := range es {
		latest[e.ID] = e
	}
	for _, r := range page.Records {
		require.Equal(t, latest[r.ID].Hash, r.Hash, r.ID)
		content, err := audit.Canonical(r)
		require.NoError(t, err)
		require.JSONEq(t, latest[r.ID].Content, string(content), r.ID)
	}
	require.Contains(t, latest["r2"].Content, `"arguments":"{\"command\":\"ls\"}"`)
	require.Equal(t, audit.GenesisHash, es[0].PrevHash)
	for i := 1; i < len(es); i++ {
		require.Equal(t, es[i-1].Hash, es[i].PrevHash)
	}

	// Writing any of it again, a trimmed later stage included, or an
	// earlier stage late, adds nothing.
	r1 := asked("r1", "c1", "Bash", t0)
	for range 3 {
		require.NoError(t, l.Write(ctx, []audit.Record{r1, ended(r1, "decline", "bob", audit.OutcomeNotRun).Trimmed(),
			ended(asked("r2", "c1", "Write", t0.Add(time.Second)), "approve", "carol", audit.OutcomeOK)}))
	}
	require.Len(t, entries(t, db), 5, "an idempotent rewrite adds no entry")
	require.True(t, verify(t, l, es[4].Hash).OK)
}

// tampering is a change someone with write access makes to the database,
// and the problem Verify must name first.
type tampering struct {
	name string
	// change changes the database; es are the chain's entries before.
	change func(t *testing.T, db *sql.DB, es []audit.Entry)
	want   audit.Bad
	// problem is a part of want.Problem, which is not compared whole.
	problem string
}

func tamperings(postgres bool) []tampering {
	p := func(i int) string {
		if postgres {
			return fmt.Sprintf("$%d", i)
		}
		return "?"
	}
	exec := func(t *testing.T, db *sql.DB, q string, args ...any) {
		t.Helper()
		res, err := db.Exec(q, args...)
		require.NoError(t, err)
		n, err := res.RowsAffected()
		require.NoError(t, err)
		require.Positive(t, n, q)
	}
	return []tampering{
		{
			name: "a row's decision edited",
			change: func(t *testing.T, db *sql.DB, _ []audit.Entry) {
				exec(t, db, "UPDATE tollgate_audit SET decision = 'approve', principal = 'mallory' WHERE id = 'r1'")
			},
			want:    audit.Bad{Seq: 3, ID: "r1"},
			problem: `row r1 is not as its latest entry, 3, wrote it: decision was "decline", is "approve"; principal was "bob", is "mallory"`,
		},
		{
			name: "a row given another entry's hash",
			change: func(t *testing.T, db *sql.DB, es []audit.Entry) {
				exec(t, db, "UPDATE tollgate_audit SET hash = "+p(1)+" WHERE id = 'r3'", es[3].Hash)
			},
			want:    audit.Bad{Seq: 5, ID: "r3"},
			problem: "row r3's hash ",
		},
		{
			name: "an entry's content edited",
			change: func(t *testing.T, db *sql.DB, _ []audit.Entry) {
				exec(t, db, "UPDATE tollgate_audit_chain SET content = replace(content, 'decline', 'approve') WHERE seq = 3")
			},
			want:    audit.Bad{Seq: 3, ID: "r1"},
			problem: "entry 3's hash",
		},
		{
			name: "an entry's content edited and its hash made again",
			change: func(t *testing.T, db *sql.DB, es []audit.Entry) {
				content := strings.ReplaceAll(es[2].Content, "decline", "approve")
				h, err := audit.HashEntry(es[2].PrevHash, []byte(content))
				require.NoError(t, err)
				exec(t, db, "UPDATE tollgate_audit_chain SET content = "+p(1)+", hash = "+p(2)+" WHERE seq = 3", content, h)
			},
			want:    audit.Bad{Seq: 4, ID: "r2"},
			problem: "entry 4's prevHash",
		},
		{
			name: "an entry deleted",
			change: func(t *testing.T, db *sql.DB, _ []audit.Entry) {
				exec(t, db, "DELETE FROM tollgate_audit_chain WHERE seq = 2")
			},
			want:    audit.Bad{Seq: 3, ID: "r1"},
			problem: "entry 3 follows entry 1: the entries between are missing",
		},
		{
			name: "two entries swapped",
			change: func(t *testing.T, db *sql.DB, _ []audit.Entry) {
				exec(t, db, "UPDATE tollgate_audit_chain SET seq = 100 WHERE seq = 2")
				exec(t, db, "UPDATE tollgate_audit_chain SET seq = 2 WHERE seq = 3")
				exec(t, db, "UPDATE tollgate_audit_chain SET seq = 3 WHERE seq = 100")
			},
			want:    audit.Bad{Seq: 2, ID: "r1"},
			problem: "entry 2's prevHash",
		},
		{
			name: "a row deleted",
			change: func(t *testing.T, db *sql.DB, _ []audit.Entry) {
				exec(t, db, "DELETE FROM tollgate_audit WHERE id = 'r2'")
			},
			want:    audit.Bad{Seq: 4, ID: "r2"},
			problem: "row r2, of entry 4, is missing",
		},
		{
			// As a worker of the release before the chain writes one.
			name: "a row added",
			change: func(t *testing.T, db *sql.DB, _ []audit.Entry) {
				exec(t, db, "INSERT INTO tollgate_audit (id, stage, tool) VALUES ('r0', 3, 'Bash')")
			},
			want:    audit.Bad{ID: "r0"},
			problem: "row r0 is in no entry of the chain, and has no hash: a worker or API of a release before the chain wrote it",
		},
		{
			name: "the last entry deleted",
			change: func(t *testing.T, db *sql.DB, _ []audit.Entry) {
				exec(t, db, "DELETE FROM tollgate_audit_chain WHERE seq = 5")
			},
			want:    audit.Bad{ID: "r3"},
			problem: "row r3 is in no entry of the chain",
		},
	}
}

func testTamperingIsNamed(t *testing.T, open func(t *testing.T) (*auditdb.Ledger, string), postgres bool) {
	for _, tc := range tamperings(postgres) {
		t.Run(tc.name, func(t *testing.T) {
			l, dsn := open(t)
			chained(t, l)
			db := rawDB(t, dsn)
			es := entries(t, db)
			require.True(t, verify(t, l, "").OK)
			tc.change(t, db, es)
			v := verify(t, l, "")
			require.False(t, v.OK)
			require.NotNil(t, v.FirstBad)
			require.Equal(t, tc.want.Seq, v.FirstBad.Seq, v.FirstBad.Problem)
			require.Equal(t, tc.want.ID, v.FirstBad.ID, v.FirstBad.Problem)
			require.Contains(t, v.FirstBad.Problem, tc.problem)

			// The export says the same offline.
			off := verifyExport(t, l, "")
			require.Equal(t, v.FirstBad, off.FirstBad)
		})
	}
	t.Run("the tail cut off, rows and all, is only seen against a head kept elsewhere", func(t *testing.T) {
		l, dsn := open(t)
		chained(t, l)
		kept := verify(t, l, "")
		require.True(t, kept.OK)
		db := rawDB(t, dsn)
		_, err := db.Exec("DELETE FROM tollgate_audit_chain WHERE seq = 5")
		require.NoError(t, err)
		_, err = db.Exec("DELETE FROM tollgate_audit WHERE id = 'r3'")
		require.NoError(t, err)
		v := verify(t, l, "")
		require.True(t, v.OK, "a shorter chain that holds together")
		require.Equal(t, int64(4), v.HeadSeq)
		v = verify(t, l, kept.Head)
		require.False(t, v.OK)
		require.Equal(t, "no entry has the head hash "+kept.Head+" that was kept: entries were removed or rewritten", v.FirstBad.Problem)
		require.Equal(t, v.FirstBad, verifyExport(t, l, kept.Head).FirstBad)
		// A head kept earlier still holds once the chain grew.
		require.NoError(t, l.Write(context.Background(), []audit.Record{asked("r4", "c2", "Bash", t0)}))
		require.True(t, verify(t, l, entries(t, db)[3].Hash).OK)
	})
}

// verifyExport exports the whole ledger with its chain and verifies the
// file offline.
func verifyExport(t *testing.T, l *auditdb.Ledger, head string) audit.Verification {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	require.NoError(t, l.Export(context.Background(), auditdb.Filter{}, true, func(line audit.ExportLine) error { return enc.Encode(line) }))
	v, err := audit.VerifyExport(&buf, head)
	require.NoError(t, err)
	return v
}

func testExportVerifiesOffline(t *testing.T, l *auditdb.Ledger) {
	chained(t, l)
	v := verifyExport(t, l, "")
	require.Equal(t, verify(t, l, ""), v)
	require.True(t, v.OK)

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	require.NoError(t, l.Export(context.Background(), auditdb.Filter{}, true, func(line audit.ExportLine) error { return enc.Encode(line) }))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3+5, "three rows, then five entries")
	require.Contains(t, lines[0], `"hash":"`, "each row carries its hash")
	require.Contains(t, lines[3], `{"chain":{"seq":1,`)

	// An edited line of the file is named.
	edited := strings.Replace(buf.String(), `"decision":"decline"`, `"decision":"approve"`, 1)
	require.NotEqual(t, buf.String(), edited)
	v, err := audit.VerifyExport(strings.NewReader(edited), "")
	require.NoError(t, err)
	require.False(t, v.OK)
	require.Equal(t, "r1", v.FirstBad.ID)
	require.Contains(t, v.FirstBad.Problem, `decision was "decline", is "approve"`)

	// An export without the chain proves nothing, and says so.
	_, err = audit.VerifyExport(strings.NewReader(lines[0]+"\n"), "")
	require.ErrorContains(t, err, "the export holds no entry of the chain: export it with chain=1")
}

// testConcurrentWritersKeepOneChain writes from several goroutines on two
// handles of the database at once, each call's stages in order and each
// write twice (a retry), and checks that the chain holds together with an
// entry for each version and no more. Verify runs on the other handle all
// the while, and always finds the chain whole: its snapshot never sees a
// row without its entry, or an entry without its row.
func testConcurrentWritersKeepOneChain(t *testing.T, a, b *auditdb.Ledger) {
	ctx := context.Background()
	const writers, calls = 8, 15
	done := make(chan struct{})
	verified := make(chan int)
	go func() {
		n := 0
		defer func() { verified <- n }()
		for {
			v, err := b.Verify(ctx, "")
			if err != nil {
				t.Error(err)
				return
			}
			if !v.OK {
				t.Errorf("verify while writes go on: %+v", v.FirstBad)
				return
			}
			n++
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range writers {
		l := a
		if w%2 == 1 {
			l = b
		}
		wg.Go(func() {
			for i := range calls {
				r := asked(fmt.Sprintf("w%d-r%02d", w, i), fmt.Sprintf("c%d", w), "Bash", t0.Add(time.Duration(i)*time.Second))
				e := ended(r, "approve", "bob", audit.OutcomeOK)
				for _, batch := range [][]audit.Record{{r}, {r}, {e.Trimmed()}, {r, e}} {
					if err := l.Write(ctx, batch); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(done)
	require.Positive(t, <-verified)
	v := verify(t, a, "")
	require.True(t, v.OK, "%+v", v.FirstBad)
	require.Equal(t, int64(writers*calls*2), v.Entries, "asked and ended, once each")
	require.Equal(t, int64(writers*calls), v.Rows)
}

// testChainOfAnOldTable opens a ledger whose table, with rows, was made
// before the chain: each row gets an entry as it is, once.
func testChainOfAnOldTable(t *testing.T, dsn string) {
	ctx := context.Background()
	db := rawDB(t, dsn)
	defs := []string{"id TEXT PRIMARY KEY", "stage BIGINT NOT NULL DEFAULT 0"}
	for _, c := range []string{"conversation_id", "turn_id", "workflow_id", "agent", "tool_call_id", "tool", "arguments", "asked", "sender",
		"decision", "decided_by", "principal", "role", "reason", "grant_id", "edited_arguments", "edit_diff", "outcome", "result",
		"preview", "user_message", "sandbox", "shadow"} {
		defs = append(defs, c+" TEXT NOT NULL DEFAULT ''")
	}
	for _, c := range []string{"requested_at", "expires_at", "decided_at", "finished_at"} {
		defs = append(defs, c+" BIGINT NOT NULL DEFAULT 0")
	}
	_, err := db.Exec("CREATE TABLE tollgate_audit (" + strings.Join(defs, ", ") + ")")
	require.NoError(t, err)
	for i := range 3 {
		_, err = db.Exec(fmt.Sprintf("INSERT INTO tollgate_audit (id, stage, tool, decision, requested_at) VALUES ('old%d', 3, 'Bash', 'approve', %d)", i, t0.UnixMicro()))
		require.NoError(t, err)
	}

	l, err := auditdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer l.Close()
	v := verify(t, l, "")
	require.True(t, v.OK, "%+v", v.FirstBad)
	require.Equal(t, int64(3), v.Entries, "an entry for each row older than the chain")
	require.Equal(t, []string{"old0", "old1", "old2"}, []string{entries(t, db)[0].ID, entries(t, db)[1].ID, entries(t, db)[2].ID})

	// Opened again, it makes none; a write appends after them.
	again, err := auditdb.Open(ctx, dsn)
	require.NoError(t, err)
	require.NoError(t, again.Close())
	require.NoError(t, l.Write(ctx, []audit.Record{asked("new", "c1", "Bash", t0)}))
	v = verify(t, l, "")
	require.True(t, v.OK, "%+v", v.FirstBad)
	require.Equal(t, int64(4), v.Entries)

	// A chain emptied later is not made again: its rows are named.
	_, err = db.Exec("DELETE FROM tollgate_audit_chain")
	require.NoError(t, err)
	again, err = auditdb.Open(ctx, dsn)
	require.NoError(t, err)
	require.NoError(t, again.Close())
	v = verify(t, l, "")
	require.False(t, v.OK)
	require.Equal(t, &audit.Bad{ID: "new", Problem: "row new is in no entry of the chain"}, v.FirstBad)
}

// testAWriteBuildsOnTheChainNotOnAChangedRow changes a row by hand, then
// writes it again: a retry of what the chain holds changes nothing (the
// change stays, and is named), and the call's next stage is built on its
// latest entry, so the changed arguments never enter the chain.
func testAWriteBuildsOnTheChainNotOnAChangedRow(t *testing.T, l *auditdb.Ledger, dsn string) {
	ctx := context.Background()
	r := asked("r1", "c1", "Bash", t0)
	require.NoError(t, l.Write(ctx, []audit.Record{r}))
	db := rawDB(t, dsn)
	_, err := db.Exec(`UPDATE tollgate_audit SET arguments = '{"command":"rm -rf /"}' WHERE id = 'r1'`)
	require.NoError(t, err)

	require.NoError(t, l.Write(ctx, []audit.Record{r}), "a retry")
	require.Len(t, entries(t, db), 1)
	v := verify(t, l, "")
	require.False(t, v.OK)
	require.Contains(t, v.FirstBad.Problem, `arguments was "{\"command\":\"ls\"}", is "{\"command\":\"rm -rf /\"}"`)

	require.NoError(t, l.Write(ctx, []audit.Record{ended(r, "approve", "bob", audit.OutcomeOK).Trimmed()}))
	es := entries(t, db)
	require.Len(t, es, 2)
	require.Contains(t, es[1].Content, `"arguments":"{\"command\":\"ls\"}"`, "the arguments of the asked entry, not of the changed row")
	require.Equal(t, `{"command":"ls"}`, list(t, l, auditdb.Filter{})[0].Arguments)
	require.True(t, verify(t, l, "").OK)
}
