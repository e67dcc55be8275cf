package auditdb_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/proctest"
)

// TestLedger runs every behaviour of the ledger against SQLite (a file) and
// a real PostgreSQL server the test starts (Debian's postgresql package).
func TestLedger(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	pg := proctest.StartPostgres(t, "tollgate")
	n := 0
	backends := map[string]func(t *testing.T) string{
		"sqlite": func(t *testing.T) string { return filepath.Join(t.TempDir(), "ledger", "audit.db") },
		"postgres": func(t *testing.T) string {
			// A database per test, so that tests see only their own rows.
			n++
			db := fmt.Sprintf("audit_%d", n)
			admin, err := sql.Open("pgx", pg.URL("postgres"))
			require.NoError(t, err)
			defer admin.Close()
			_, err = admin.Exec("CREATE DATABASE " + db)
			require.NoError(t, err)
			return pg.URL(db)
		},
	}
	for name, dsn := range backends {
		t.Run(name, func(t *testing.T) {
			open := func(t *testing.T) (*auditdb.Ledger, string) {
				d := dsn(t)
				l, err := auditdb.Open(context.Background(), d)
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				return l, d
			}
			t.Run("a call's row goes from asked to ended, and a late retry of asked changes nothing", func(t *testing.T) {
				l, _ := open(t)
				testAskedThenEnded(t, l)
			})
			t.Run("writing the same records again keeps one row each", func(t *testing.T) {
				l, _ := open(t)
				testIdempotent(t, l)
			})
			t.Run("filters and pages", func(t *testing.T) {
				l, _ := open(t)
				testFiltersAndPages(t, l)
			})
			t.Run("the shadow filter selects the rows whose shadow rule would have done otherwise, or the same", func(t *testing.T) {
				l, _ := open(t)
				testShadowFilter(t, l)
			})
			t.Run("each row of a window is read once, page after page, newest first", func(t *testing.T) {
				l, _ := open(t)
				testEach(t, l)
			})
			t.Run("any bytes a tool wrote are kept as text, and a long result is cut", func(t *testing.T) {
				l, _ := open(t)
				testAnyBytes(t, l)
			})
			t.Run("a writer and a reader of their own share the database", func(t *testing.T) {
				l, d := open(t)
				reader, err := auditdb.Open(context.Background(), d)
				require.NoError(t, err)
				defer reader.Close()
				testWriterAndReader(t, l, reader)
			})
			t.Run("workers and APIs that start together all open the database, which makes its table once", func(t *testing.T) {
				// Each round on a database nobody has opened yet: the race
				// is in making it (a bench run's worker once stopped with
				// SQLite's "database is locked" when its API opened the
				// new file at the same moment).
				for round := range 10 {
					d := dsn(t)
					var wg sync.WaitGroup
					errs := make(chan error, 8)
					for i := range 8 {
						wg.Go(func() {
							if i%2 == 1 {
								// Half of them another process, as a worker
								// and an API are: SQLite's file locks are
								// per process.
								errs <- openInAnotherProcess(d)
								return
							}
							l, err := auditdb.Open(context.Background(), d)
							if err == nil {
								err = l.Close()
							}
							errs <- err
						})
					}
					wg.Wait()
					close(errs)
					for err := range errs {
						require.NoError(t, err, "round %d", round)
					}
				}
			})
			t.Run("pending rows: the asked and unexpired ones, soonest to expire first, filtered and paged", func(t *testing.T) {
				l, _ := open(t)
				testPending(t, l)
			})
			t.Run("an asked row written again at a vote lists its deciders and votes as they stand, and its decision keeps them", func(t *testing.T) {
				l, _ := open(t)
				testAskedAgainAtAVote(t, l)
			})
			t.Run("a table made before the inbox's columns and indexes gains them, and its rows read without a preview", func(t *testing.T) {
				testMigratesAnOldTable(t, dsn(t))
			})
			t.Run("the chain has an entry for each version of a row, and a rewrite adds none", func(t *testing.T) {
				l, d := open(t)
				testChainHasAnEntryForEachVersion(t, l, d)
			})
			t.Run("a change to a row or to the chain is named", func(t *testing.T) {
				testTamperingIsNamed(t, open, name == "postgres")
			})
			t.Run("an export with its chain verifies offline, and an edited one is named", func(t *testing.T) {
				l, _ := open(t)
				testExportVerifiesOffline(t, l)
			})
			t.Run("a write builds on the row's latest entry, not on a row changed by hand", func(t *testing.T) {
				l, d := open(t)
				testAWriteBuildsOnTheChainNotOnAChangedRow(t, l, d)
			})
			t.Run("writers on two handles at once keep one chain", func(t *testing.T) {
				l, d := open(t)
				other, err := auditdb.Open(context.Background(), d)
				require.NoError(t, err)
				defer other.Close()
				testConcurrentWritersKeepOneChain(t, l, other)
			})
			t.Run("a table made before the chain gets an entry per row, once", func(t *testing.T) {
				testChainOfAnOldTable(t, dsn(t))
			})
			t.Run("a record without an id, a tool or a stage is refused, naming it", func(t *testing.T) {
				l, _ := open(t)
				err := l.Write(context.Background(), []audit.Record{{ID: "r1", Stage: audit.StageAsked}})
				require.ErrorContains(t, err, `audit record "r1" of tool "" at stage 1: an id, a tool and a stage from 1 to 3 are required`)
				page, err := l.List(context.Background(), auditdb.Filter{})
				require.NoError(t, err)
				require.Empty(t, page.Records, "nothing of the transaction is written")
			})
		})
	}
}

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func asked(id, conversation, tool string, at time.Time) audit.Record {
	expires := at.Add(time.Hour)
	return audit.Record{
		ID: id, Stage: audit.StageAsked, ConversationID: conversation, TurnID: conversation + "-turn-1", WorkflowID: conversation + "-turn-1",
		ToolCallID: "call_" + id, Tool: tool, Arguments: `{"command":"ls"}`, Asked: "default: " + tool + " is a protected tool",
		Sender: "ann", RequestedAt: at, ExpiresAt: &expires,
	}
}

func ended(r audit.Record, decision, principal, outcome string) audit.Record {
	decided, finished := r.RequestedAt.Add(time.Minute), r.RequestedAt.Add(2*time.Minute)
	r.Stage, r.Decision, r.DecidedBy, r.Principal, r.Role, r.DecidedAt = audit.StageEnded, decision, "person", principal, "approver", &decided
	r.Outcome, r.Result, r.FinishedAt = outcome, "README.md\n", &finished
	return r
}

// list reads the rows f selects, each of which must have its chain
// entry's hash, and returns them without it, as they were written.
func list(t *testing.T, l *auditdb.Ledger, f auditdb.Filter) []audit.Record {
	t.Helper()
	page, err := l.List(context.Background(), f)
	require.NoError(t, err)
	for i := range page.Records {
		require.Len(t, page.Records[i].Hash, 64, "row %s has its chain entry's hash", page.Records[i].ID)
		page.Records[i].Hash = ""
	}
	return page.Records
}

func testAskedThenEnded(t *testing.T, l *auditdb.Ledger) {
	ctx := context.Background()
	a := asked("r1", "c1", "Bash", t0)
	require.NoError(t, l.Write(ctx, []audit.Record{a}))
	got := list(t, l, auditdb.Filter{})
	require.Len(t, got, 1)
	require.Equal(t, a, got[0], "every field read back as written")

	e := ended(a, "approve", "bob", audit.OutcomeOK)
	e.EditedArguments, e.EditDiff = `{"command":"ls -la"}`, audit.EditDiff(a.Arguments, `{"command":"ls -la"}`)
	require.NoError(t, l.Write(ctx, []audit.Record{e}))
	require.NoError(t, l.Write(ctx, []audit.Record{a}), "a retry of the asked write that comes late")
	got = list(t, l, auditdb.Filter{})
	require.Len(t, got, 1)
	require.Equal(t, e, got[0])
	require.Equal(t, "- command: \"ls\"\n+ command: \"ls -la\"", got[0].EditDiff)

	// A later stage written trimmed, as an activity carries it, keeps
	// what the row had since it was asked.
	b := asked("r2", "c1", "Write", t0)
	b.Preview, b.UserMessage = "+ hello", "write hello"
	require.NoError(t, l.Write(ctx, []audit.Record{b}))
	be := ended(b, "approve", "bob", audit.OutcomeOK)
	require.NoError(t, l.Write(ctx, []audit.Record{be.Trimmed()}))
	row := list(t, l, auditdb.Filter{RequestID: "r2"})
	require.Len(t, row, 1)
	require.Equal(t, be, row[0], "the arguments, preview and message of the asked row, the rest of the ended one")
}

func testIdempotent(t *testing.T, l *auditdb.Ledger) {
	ctx := context.Background()
	records := []audit.Record{ended(asked("r1", "c1", "Bash", t0), "approve", "bob", audit.OutcomeOK), asked("r2", "c1", "Write", t0.Add(time.Second))}
	for range 3 {
		require.NoError(t, l.Write(ctx, records))
	}
	got := list(t, l, auditdb.Filter{})
	require.Len(t, got, 2)
	require.Equal(t, []string{"r2", "r1"}, []string{got[0].ID, got[1].ID}, "newest request first")
}

func testEach(t *testing.T, l *auditdb.Ledger) {
	ctx := context.Background()
	var rows []audit.Record
	n := 2*auditdb.MaxLimit + 7
	for i := range n {
		// Several rows a microsecond, so that pages end between them.
		rows = append(rows, asked(fmt.Sprintf("r%05d", i), fmt.Sprintf("c%d", i%2), "Bash", t0.Add(time.Duration(i/3)*time.Microsecond)))
	}
	require.NoError(t, l.Write(ctx, rows))
	read := func(conversation string, since time.Time) []string {
		var ids []string
		require.NoError(t, l.Each(ctx, conversation, since, func(r audit.Record) error {
			ids = append(ids, r.ID)
			return nil
		}))
		return ids
	}
	ids := read("", time.Time{})
	require.Len(t, ids, n)
	require.Equal(t, fmt.Sprintf("r%05d", n-1), ids[0])
	require.Equal(t, "r00000", ids[n-1])
	require.Len(t, read("c1", time.Time{}), n/2)
	require.Len(t, read("", t0.Add(time.Duration(n/3)*time.Microsecond)), n-n/3*3)
	stop := errors.New("stop")
	seen := 0
	require.ErrorIs(t, l.Each(ctx, "", time.Time{}, func(audit.Record) error { seen++; return stop }), stop)
	require.Equal(t, 1, seen)
}

func testFiltersAndPages(t *testing.T, l *auditdb.Ledger) {
	ctx := context.Background()
	var all []audit.Record
	for i := range 25 {
		r := asked(fmt.Sprintf("r%02d", i), fmt.Sprintf("c%d", i%3), []string{"Bash", "Write"}[i%2], t0.Add(time.Duration(i/2)*time.Minute))
		switch i % 4 {
		case 0:
			r = ended(r, "approve", "bob", audit.OutcomeOK)
		case 1:
			r = ended(r, "decline", "carol", audit.OutcomeNotRun)
		case 2:
			r = ended(r, "timeout", "", audit.OutcomeNotRun)
			r.DecidedBy = "timer"
		}
		all = append(all, r)
	}
	require.NoError(t, l.Write(ctx, all))

	ids := func(rs []audit.Record) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.ID
		}
		return out
	}
	want := func(keep func(i int, r audit.Record) bool) []string {
		var out []string
		for i := len(all) - 1; i >= 0; i-- { // newest first; ties by id, descending
			if keep(i, all[i]) {
				out = append(out, all[i].ID)
			}
		}
		return out
	}
	require.Equal(t, want(func(_ int, r audit.Record) bool { return r.ConversationID == "c1" }), ids(list(t, l, auditdb.Filter{Conversation: "c1"})))
	require.Equal(t, []string{"r07"}, ids(list(t, l, auditdb.Filter{RequestID: "r07"})))
	require.Equal(t, want(func(_ int, r audit.Record) bool { return r.Principal == "carol" }), ids(list(t, l, auditdb.Filter{Principal: "carol"})))
	require.Equal(t, want(func(_ int, r audit.Record) bool { return r.Tool == "Bash" && r.Decision == "timeout" }),
		ids(list(t, l, auditdb.Filter{Tool: "Bash", Decision: "timeout"})))
	since, until := t0.Add(3*time.Minute), t0.Add(6*time.Minute)
	require.Equal(t, want(func(_ int, r audit.Record) bool { return !r.RequestedAt.Before(since) && r.RequestedAt.Before(until) }),
		ids(list(t, l, auditdb.Filter{Since: since, Until: until})))
	require.Len(t, want(func(_ int, r audit.Record) bool { return !r.RequestedAt.Before(since) && r.RequestedAt.Before(until) }), 6)

	// Pages of 4 walk every row once, in order, even where requests share
	// a time (two per minute here).
	var walked []string
	f := auditdb.Filter{Limit: 4}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		page, err := l.List(ctx, f)
		require.NoError(t, err)
		walked = append(walked, ids(page.Records)...)
		if page.Next == "" {
			break
		}
		require.Len(t, page.Records, 4)
		f.Cursor = page.Next
	}
	require.Equal(t, want(func(int, audit.Record) bool { return true }), walked)

	_, err := l.List(ctx, auditdb.Filter{Cursor: "not-a-cursor"})
	require.ErrorIs(t, err, auditdb.ErrBadCursor)
}

func testShadowFilter(t *testing.T, l *auditdb.Ledger) {
	ctx := context.Background()
	row := func(id, shadow, decidedBy string) audit.Record {
		r := ended(asked(id, "c1", "Bash", t0.Add(time.Duration(len(id))*time.Second)), "approve", "bob", audit.OutcomeOK)
		r.Shadow, r.DecidedBy = shadow, decidedBy
		return r
	}
	rows := []audit.Record{
		row("plain", "", "person"),                                  // no shadow rule
		row("asked-would-ask", audit.ShadowWouldAsk, "person"),      // agree
		row("asked-would-not", audit.ShadowWouldNotAsk, "person"),   // disagree
		row("granted-would-not", audit.ShadowWouldNotAsk, "grant"),  // disagree: a grant answered in a person's place
		row("unasked-would-ask", audit.ShadowWouldAsk, "policy"),    // disagree
		row("unasked-failed", audit.ShadowCouldNotDecide, "policy"), // disagree: it would have asked
		row("asked-failed", audit.ShadowCouldNotDecide, "person"),   // agree
	}
	waiting := asked("waiting-would-not", "c1", "Bash", t0.Add(time.Minute))
	waiting.Shadow = audit.ShadowWouldNotAsk // disagree: it asks, and waits
	rows = append(rows, waiting)
	require.NoError(t, l.Write(ctx, rows))

	selected := func(f auditdb.Filter) []string {
		var out []string
		for _, r := range list(t, l, f) {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	var disagree, agree, any []string
	for _, r := range rows {
		if r.Shadow != "" {
			any = append(any, r.ID)
		}
		if r.Disagrees() {
			disagree = append(disagree, r.ID)
		} else if r.Shadow != "" {
			agree = append(agree, r.ID)
		}
	}
	slices.Sort(disagree)
	slices.Sort(agree)
	slices.Sort(any)
	require.Equal(t, []string{"asked-would-not", "granted-would-not", "unasked-failed", "unasked-would-ask", "waiting-would-not"}, disagree)
	require.Equal(t, disagree, selected(auditdb.Filter{Shadow: auditdb.ShadowDisagree}))
	require.Equal(t, agree, selected(auditdb.Filter{Shadow: auditdb.ShadowAgree}))
	require.Equal(t, any, selected(auditdb.Filter{Shadow: auditdb.ShadowAny}))
	require.Len(t, selected(auditdb.Filter{}), len(rows))
}

func testAnyBytes(t *testing.T, l *auditdb.Ledger) {
	ctx := context.Background()
	r := ended(asked("r1", "c1", "Bash", t0), "approve", "bob", audit.OutcomeError)
	r.Result = "before\x00after \xff\xfe " + strings.Repeat("é", audit.MaxResult)
	require.NoError(t, l.Write(ctx, []audit.Record{r}))
	got := list(t, l, auditdb.Filter{})[0].Result
	require.True(t, strings.HasPrefix(got, "before\uFFFDafter \uFFFD é"), got[:20])
	require.LessOrEqual(t, len(got), audit.MaxResult+len("…"))
	require.True(t, strings.HasSuffix(got, "…"))
	// Written again, it is the same row: the chain gains nothing, and
	// proves the row as cut.
	require.NoError(t, l.Write(ctx, []audit.Record{r}))
	v, err := l.Verify(ctx, "")
	require.NoError(t, err)
	require.True(t, v.OK, "%+v", v.FirstBad)
	require.Equal(t, int64(1), v.Entries)
}

func testWriterAndReader(t *testing.T, writer, reader *auditdb.Ledger) {
	ctx := context.Background()
	const n = 50
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if err := writer.Write(ctx, []audit.Record{asked(fmt.Sprintf("r%02d", i), "c1", "Bash", t0.Add(time.Duration(i)*time.Second))}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	seen := 0
	for seen < n && !t.Failed() {
		page, err := reader.List(ctx, auditdb.Filter{Limit: auditdb.MaxLimit})
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(page.Records), seen, "rows never go away")
		seen = len(page.Records)
	}
	wg.Wait()
	require.Len(t, list(t, reader, auditdb.Filter{}), n)
}

// envOpenLedger names the database TestOpenLedgerInThisProcess opens, when
// this test binary runs as another process of a test.
const envOpenLedger = "TOLLGATE_TEST_OPEN_LEDGER"

// openInAnotherProcess opens and closes the ledger at dsn in a process of
// its own: this test binary, running TestOpenLedgerInThisProcess.
func openInAnotherProcess(dsn string) error {
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenLedgerInThisProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envOpenLedger+"="+dsn, proctest.GORACEQuickExit())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("open %s in another process: %w\n%s", dsn, err, out)
	}
	return nil
}

// TestOpenLedgerInThisProcess is openInAnotherProcess's other process; run
// alone, it does nothing.
func TestOpenLedgerInThisProcess(t *testing.T) {
	dsn := os.Getenv(envOpenLedger)
	if dsn == "" {
		t.Skip("run by openInAnotherProcess")
	}
	l, err := auditdb.Open(context.Background(), dsn)
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

func TestALedgerThatCannotBeOpenedNamesItsDatabaseWithoutThePassword(t *testing.T) {
	for _, dsn := range []string{
		"postgres://tollgate:s3cret-pw@127.0.0.1:1/tollgate?connect_timeout=5",
		"postgres://tollgate@127.0.0.1:1/tollgate?password=s3cret-pw&connect_timeout=5",
	} {
		_, err := auditdb.Open(context.Background(), dsn)
		require.ErrorContains(t, err, "audit ledger PostgreSQL postgres://tollgate")
		require.ErrorContains(t, err, "xxxxx")
		require.NotContains(t, err.Error(), "s3cret-pw")
	}
}

func testPending(t *testing.T, l *auditdb.Ledger) {
	ctx := context.Background()
	now := time.Now().UTC()
	row := func(id, conv, tool, sender string, expiresIn time.Duration) audit.Record {
		r := asked(id, conv, tool, now.Add(-time.Minute))
		expires := now.Add(expiresIn)
		r.ExpiresAt, r.Sender = &expires, sender
		r.Preview, r.UserMessage = "preview of "+id, "message of "+id
		return r
	}
	rows := []audit.Record{
		row("r3", "c1", "Bash", "ann", 3*time.Minute),
		row("r1", "c1", "Write", "ann", time.Minute),
		row("r2", "c2", "Bash", "bob", 2*time.Minute),
		row("r2b", "c2", "Bash", "bob", 2*time.Minute), // the same expiry: by id
		row("gone", "c1", "Bash", "ann", -time.Second), // expired: its timer declines it
		row("decided", "c2", "Bash", "bob", 5*time.Minute),
	}
	rows[5].Stage, rows[5].Decision = audit.StageDecided, "approve"
	require.NoError(t, l.Write(ctx, rows))
	// A later stage of a listed row takes it out.
	require.NoError(t, l.Write(ctx, []audit.Record{ended(row("ended", "c1", "Bash", "ann", 4*time.Minute), "decline", "bob", audit.OutcomeNotRun)}))

	ids := func(f auditdb.PendingFilter) []string {
		t.Helper()
		f.Now = now
		recs, more, err := l.Pending(ctx, f)
		require.NoError(t, err)
		require.False(t, more)
		n, err := l.CountPending(ctx, f)
		require.NoError(t, err)
		require.Equal(t, len(recs), n, "the count agrees with the rows")
		var out []string
		for _, r := range recs {
			out = append(out, r.ID)
		}
		return out
	}
	require.Equal(t, []string{"r1", "r2", "r2b", "r3"}, ids(auditdb.PendingFilter{}))
	require.Equal(t, []string{"r2", "r2b", "r3"}, ids(auditdb.PendingFilter{Tool: "Bash"}))
	require.Equal(t, []string{"r1", "r3"}, ids(auditdb.PendingFilter{Conversation: "c1"}))
	require.Equal(t, []string{"r2", "r2b"}, ids(auditdb.PendingFilter{Sender: "bob"}))
	require.Equal(t, []string{"r2", "r2b"}, ids(auditdb.PendingFilter{Sender: "bob", Tool: "Bash", Conversation: "c2"}))
	require.Empty(t, ids(auditdb.PendingFilter{Sender: "carol"}))

	recs, _, err := l.Pending(ctx, auditdb.PendingFilter{Now: now, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "preview of r1", recs[0].Preview)
	require.Equal(t, "message of r1", recs[0].UserMessage)
	require.Equal(t, "ann", recs[0].Sender)

	// Pages of two, each after the last row of the one before, to the end.
	var got []string
	f := auditdb.PendingFilter{Now: now, Limit: 2}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 3)
		recs, more, err := l.Pending(ctx, f)
		require.NoError(t, err)
		for _, r := range recs {
			got = append(got, r.ID)
		}
		if !more {
			break
		}
		k := auditdb.KeyOf(recs[len(recs)-1])
		f.After = &k
	}
	require.Equal(t, []string{"r1", "r2", "r2b", "r3"}, got)
}

func testAskedAgainAtAVote(t *testing.T, l *auditdb.Ledger) {
	ctx := context.Background()
	r := asked("q1", "c1", "Deploy", time.Now())
	r.Deciders, r.Votes = `["alice","bob"]`, `{"quorum":2,"declines":1,"cast":[],"mayVote":["alice","bob"]}`
	require.NoError(t, l.Write(ctx, []audit.Record{r}))

	// alice votes: her vote's row, and the call's row as it stands now.
	voted := r
	voted.Votes = `{"quorum":2,"declines":1,"cast":[{"by":"alice","decision":"approve","at":"2026-12-05T00:00:00Z"}],"mayVote":["bob"]}`
	vote := r
	vote.ID, vote.Stage, vote.Decision, vote.DecidedBy, vote.Principal, vote.Deciders, vote.Votes = "vote:q1:alice", audit.StageDecided, "approve", audit.DecidedByVote, "alice", "", ""
	require.NoError(t, l.Write(ctx, []audit.Record{vote, voted}))
	recs, _, err := l.Pending(ctx, auditdb.PendingFilter{})
	require.NoError(t, err)
	require.Len(t, recs, 1, "a vote's row does not wait")
	require.Equal(t, "q1", recs[0].ID)
	require.Equal(t, voted.Votes, recs[0].Votes)
	require.Equal(t, `["alice","bob"]`, recs[0].Deciders)

	// The decision keeps the votes that made it; a late asked row does
	// not bring the call back to the inbox.
	require.NoError(t, l.Write(ctx, []audit.Record{ended(voted, "approve", "bob", audit.OutcomeOK), voted}))
	recs, _, err = l.Pending(ctx, auditdb.PendingFilter{})
	require.NoError(t, err)
	require.Empty(t, recs)
	got := list(t, l, auditdb.Filter{RequestID: "q1"})
	require.Equal(t, voted.Votes, got[0].Votes)
	v, err := l.Verify(ctx, "")
	require.NoError(t, err)
	require.True(t, v.OK, "%+v", v.FirstBad)
}

// testMigratesAnOldTable opens a ledger whose table was made by a build
// before the preview, user_message and pending indexes.
func testMigratesAnOldTable(t *testing.T, dsn string) {
	ctx := context.Background()
	driver, source := "pgx", dsn
	if !strings.HasPrefix(dsn, "postgres") {
		require.NoError(t, os.MkdirAll(filepath.Dir(dsn), 0o755))
		driver, source = "sqlite", "file:"+dsn
	}
	db, err := sql.Open(driver, source)
	require.NoError(t, err)
	defer db.Close()
	old := []string{"id TEXT PRIMARY KEY", "stage BIGINT NOT NULL DEFAULT 0"}
	for _, c := range []string{"conversation_id", "turn_id", "workflow_id", "agent", "tool_call_id", "tool", "arguments", "asked", "sender",
		"decision", "decided_by", "principal", "role", "reason", "grant_id", "edited_arguments", "edit_diff", "outcome", "result"} {
		old = append(old, c+" TEXT NOT NULL DEFAULT ''")
	}
	for _, c := range []string{"requested_at", "expires_at", "decided_at", "finished_at"} {
		old = append(old, c+" BIGINT NOT NULL DEFAULT 0")
	}
	_, err = db.Exec("CREATE TABLE tollgate_audit (" + strings.Join(old, ", ") + ")")
	require.NoError(t, err)
	expires := time.Now().Add(time.Hour).UnixMicro()
	_, err = db.Exec(fmt.Sprintf("INSERT INTO tollgate_audit (id, stage, conversation_id, tool, requested_at, expires_at) VALUES ('old', 1, 'c1', 'Bash', %d, %d)", time.Now().UnixMicro(), expires))
	require.NoError(t, err)

	l, err := auditdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer l.Close()
	recs, _, err := l.Pending(ctx, auditdb.PendingFilter{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "old", recs[0].ID)
	require.Empty(t, recs[0].Preview)
	require.Empty(t, recs[0].UserMessage)
	require.Empty(t, recs[0].Shadow)
	require.Empty(t, recs[0].OnBehalfOf)
	require.Empty(t, recs[0].Kind)
	require.Empty(t, recs[0].Deciders)
	require.Empty(t, recs[0].Votes)

	var indexes int
	q := "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'tollgate_audit_pending%'"
	if driver == "pgx" {
		q = "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'tollgate_audit_pending%'"
	}
	require.NoError(t, db.QueryRow(q).Scan(&indexes))
	require.Equal(t, 4, indexes, "the inbox's indexes are made at start")

	// A second start finds them all and changes nothing.
	again, err := auditdb.Open(ctx, dsn)
	require.NoError(t, err)
	require.NoError(t, again.Close())
	r := asked("new", "c1", "Bash", time.Now())
	r.Preview, r.Shadow = "a preview", audit.ShadowWouldAsk
	r = ended(r, "approve", "bob", audit.OutcomeOK)
	r.OnBehalfOf = "alice"
	r.Deciders, r.Votes = `["alice","bob"]`, `{"quorum":2,"declines":1,"cast":[]}`
	admin := audit.Record{ID: "control:e:1", Stage: audit.StageEnded, Tool: audit.AdminTool, Kind: audit.KindFreeze, Principal: "root", RequestedAt: time.Now()}
	require.NoError(t, l.Write(ctx, []audit.Record{r, admin}))
	recs = list(t, l, auditdb.Filter{RequestID: "new"})
	require.Equal(t, "a preview", recs[0].Preview)
	require.Equal(t, audit.ShadowWouldAsk, recs[0].Shadow)
	require.Equal(t, "alice", recs[0].OnBehalfOf, "bob for alice")
	require.Equal(t, `["alice","bob"]`, recs[0].Deciders)
	require.Equal(t, `{"quorum":2,"declines":1,"cast":[]}`, recs[0].Votes)
	recs = list(t, l, auditdb.Filter{RequestID: "control:e:1"})
	require.Equal(t, audit.KindFreeze, recs[0].Kind)
}
