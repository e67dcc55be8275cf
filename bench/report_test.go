package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/config"
)

func TestWriteReportKeepsTheRunBeforeAndTheNotes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "RESULTS.md")
	read := func() string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}

	require.NoError(t, writeReport(path, "first run\n"))
	got := read()
	require.True(t, strings.HasPrefix(got, fileHeader))
	require.Contains(t, got, latestMarker+"\n## The latest run\n\nfirst run\n"+runEnd)
	require.NotContains(t, got, beforeMarker, "a first run has none before it")
	require.True(t, strings.HasSuffix(got, notesMarker+"\n"))

	require.NoError(t, os.WriteFile(path, []byte(got+"Notes by hand.\n"), 0o644))
	require.NoError(t, writeReport(path, "second run"))
	got = read()
	require.Contains(t, got, latestMarker+"\n## The latest run\n\nsecond run\n"+runEnd)
	require.Contains(t, got, beforeMarker+"\n## The run before\n\nfirst run\n"+runEnd)
	require.True(t, strings.HasSuffix(got, notesMarker+"\nNotes by hand.\n"))

	require.NoError(t, writeReport(path, "third run"))
	got = read()
	require.Contains(t, got, "## The latest run\n\nthird run\n")
	require.Contains(t, got, "## The run before\n\nsecond run\n")
	require.NotContains(t, got, "first run", "only the latest run and the one before are kept")
	require.Equal(t, 1, strings.Count(got, "Notes by hand."))
	require.Less(t, strings.Index(got, latestMarker), strings.Index(got, beforeMarker))
	require.Less(t, strings.Index(got, beforeMarker), strings.Index(got, notesMarker))
}

func TestTheBusyStretchRunsFromTheFirstEndToTheLastStart(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	turn := func(start, end int) turnSample {
		return turnSample{start: at(start), total: at(end).Sub(at(start))}
	}
	// Two clients: one runs 0–40 then 40–90, the other 5–30, 30–70, 70–100.
	from, to := busy([]turnSample{turn(0, 40), turn(5, 30), turn(30, 70), turn(40, 90), turn(70, 100)})
	require.Equal(t, at(30), from, "the first end")
	require.Equal(t, at(70), to, "the last start")

	// As many turns as clients: all start before any ends, and the
	// stretch is empty.
	from, to = busy([]turnSample{turn(0, 30), turn(1, 20)})
	require.Equal(t, at(20), from)
	require.Equal(t, from, to)
}

func TestScaleSizesFitTheWaitingTurnsAtEverySize(t *testing.T) {
	full := sizesFor(waitingN)
	require.Equal(t, scaleSizes{Waiting: waitingN, FewTurns: 50, ManyTurns: 500, Clients: 500, Decisions: 30, Cache: config.DefaultWorkflowCacheSize, CachedFirst: 400, Warm: 100}, full,
		"at 2,000 waiting: 500 watchers on 50 turns and on 500, and the worker's default cache")
	for _, n := range []int{waitingLeast, 100, 551, waitingN} {
		s := sizesFor(n)
		require.LessOrEqual(t, s.FewTurns+s.ManyTurns, n, "n=%d: the watched turns are among the waiting", n)
		require.LessOrEqual(t, s.Decisions, min(s.FewTurns, s.ManyTurns), "n=%d", n)
		require.LessOrEqual(t, 2*s.CachedFirst, s.Cache, "n=%d: the first turns and their conversations fit the cache", n)
		require.Positive(t, s.CachedFirst, "n=%d", n)
		require.GreaterOrEqual(t, s.perTurn(s.ManyTurns), 1, "n=%d", n)
	}
}

func TestAScaleStageThatFailedIsReportedWithItsError(t *testing.T) {
	r := &report{Scale: scaleResult{scaleSizes: sizesFor(100), Err: "pause: 500 Internal Server Error\nthe worker's log ends: ..."}}
	md := r.scaleMarkdown()
	require.Contains(t, md, "**The stage did not finish:** pause: 500 Internal Server Error")
	require.NotContains(t, md, "the worker's log ends", "only the error's first line goes in the report")
	require.Contains(t, r.verdict(), "The scale stage on the Temporal server on PostgreSQL did not finish (pause: 500 Internal Server Error)")
}

func TestASandboxStageWhereTheSandboxCannotStartSaysSo(t *testing.T) {
	r := &report{Sandbox: sandboxResult{Unavailable: "the Bash sandbox cannot run here: bwrap (package bubblewrap) not found in PATH"}}
	require.Contains(t, r.sandboxMarkdown(), "The sandbox cannot start on this machine, so the stage measured nothing: the Bash sandbox cannot run here: bwrap")
	require.NotContains(t, r.sandboxMarkdown(), "| command |", "no table of figures it did not measure")
	require.Contains(t, r.verdict(), "The Bash sandbox cannot start on this machine, and its stage measured nothing")
}

func TestASandboxStageThatFailedIsReportedWithWhatItMeasured(t *testing.T) {
	r := &report{Sandbox: sandboxResult{
		Err:   "the session with `sandbox: auto`: turn x finished with error\n--- the last of 2 warnings ---",
		Costs: []sandboxCost{{Key: "true", Command: "`true`", Plain: summary{p50: 10 * time.Millisecond}, Sandboxed: summary{p50: 30 * time.Millisecond}, PlainN: 20, SandboxedN: 20}},
	}}
	md := r.sandboxMarkdown()
	require.Contains(t, md, "**The stage did not finish:** the session with `sandbox: auto`: turn x finished with error")
	require.NotContains(t, md, "the last of 2 warnings", "only the error's first line goes in the report")
	require.Contains(t, md, "| `true` | 10.0 ms / 0.0 ms | 30.0 ms / 0.0 ms | 3.00x | 20.0 ms | 20 |")
	require.Contains(t, r.verdict(), "The Bash sandbox adds 20.0 ms to `true` at p50")
}

func TestABacktestStageIsReportedAgainstItsGoalOrWithItsError(t *testing.T) {
	r := &report{Backtest: backtestResult{Rows: 100_000, Runs: 5, Took: summary{p50: 12 * time.Second, max: 13 * time.Second}}}
	require.Contains(t, r.backtestMarkdown(), "| 100,000 | 0.0 ms | 12.0 s / 13.0 s | 8,333 | ≤10.0 s: **fail** | 5 |")
	require.Contains(t, r.verdict(), "over a 100,000-row SQLite ledger took 12.0 s at p50 (8,333 rows a second; goal at most 10.0 s: missed)")

	r = &report{Backtest: backtestResult{Err: "seeding the ledger: disk full\nmore"}}
	require.Contains(t, r.backtestMarkdown(), "**The stage did not finish:** seeding the ledger: disk full")
	require.NotContains(t, r.backtestMarkdown(), "| 0 |", "no row of figures it did not measure")
	require.Contains(t, r.verdict(), "The policy backtest stage did not finish (seeding the ledger: disk full)")
}

func TestTheLoadSectionBreaksTheDecisionDownAtTheLowestAndHighestLevels(t *testing.T) {
	segs := func(floor, tollgate time.Duration) []segment {
		return []segment{{Name: "approval: tool activity (scheduled → completed)", Floor: floor, Tollgate: tollgate}}
	}
	levels := []loadRun{{Concurrency: 1, Turns: 100}, {Concurrency: 50, Turns: 400}}
	both := loadResult{Server: "a dev server", Floor: levels, Tollgate: levels,
		Breakdown: segs(8*time.Millisecond, 13*time.Millisecond), FirstBreakdown: segs(2800*time.Microsecond, 4400*time.Microsecond)}
	md := (&report{Load: []loadResult{both}}).loadMarkdown()
	require.Contains(t, md, "Where a turn's time goes at concurrency 1 and 50,")
	require.Contains(t, md, "| stretch | same-shape floor, 1 | tollgate, 1 | same-shape floor, 50 | tollgate, 50 |\n|---|---:|---:|---:|---:|\n")
	require.Contains(t, md, "| approval: tool activity (scheduled → completed) | 2.8 ms | 4.4 ms | 8.0 ms | 13.0 ms |\n")

	// One level, or a lowest level that was not broken down: the highest alone.
	one := both
	one.FirstBreakdown = nil
	md = (&report{Load: []loadResult{one}}).loadMarkdown()
	require.Contains(t, md, "Where a turn's time goes at concurrency 50,")
	require.Contains(t, md, "| stretch | same-shape floor, 50 | tollgate, 50 |\n|---|---:|---:|\n")
	require.Contains(t, md, "| approval: tool activity (scheduled → completed) | 8.0 ms | 13.0 ms |\n")
}

func TestLoadOrderGivesEverySideItsTurnsAndTakesTurns(t *testing.T) {
	for _, l := range []loadLevel{{1, 300}, {1, 100}, {1, 65}, {1, 6}, {10, 200}, {10, 20}, {50, 401}} {
		turns := map[int]int{}
		parts := loadOrder(l)
		for _, p := range parts {
			turns[p.side] += p.turns
		}
		require.Equal(t, map[int]int{0: l.turns, 1: l.turns, 2: l.turns}, turns, "%v", l)
		if l.concurrency > 1 || l.turns < len(roundOrders)*roundTurns {
			require.Len(t, parts, 6, "%v: two halves a side", l)
			continue
		}
		// Rounds of the three sides in each of the six orders in turn, and
		// no part twice the size of another.
		require.Zero(t, len(parts)%3, "%v", l)
		first, follows := map[int]int{}, map[[2]int]int{}
		for r := 0; r < len(parts); r += 3 {
			round := parts[r : r+3]
			require.ElementsMatch(t, []int{0, 1, 2}, []int{round[0].side, round[1].side, round[2].side}, "%v round %d", l, r/3)
			first[round[0].side]++
			follows[[2]int{round[0].side, round[1].side}]++
			follows[[2]int{round[1].side, round[2].side}]++
		}
		require.Len(t, first, 3, "%v: every side runs first in some round", l)
		require.Len(t, follows, 6, "%v: every side follows each other side in some round", l)
		sizes := map[int]bool{}
		for _, p := range parts {
			sizes[p.turns] = true
		}
		require.LessOrEqual(t, len(sizes), 2, "%v: parts of one size, or two sizes one apart", l)
	}
	// The default levels: thirty rounds one at a time, each side first in
	// ten and after each other side in ten; halves with more clients.
	parts := loadOrder(loadLevel{1, 300})
	require.Len(t, parts, 3*30)
	first := map[int]int{}
	for r := 0; r < len(parts); r += 3 {
		first[parts[r].side]++
	}
	require.Equal(t, map[int]int{0: 10, 1: 10, 2: 10}, first)
	require.Len(t, loadOrder(loadLevel{10, 200}), 6)
	require.Len(t, loadOrder(loadLevel{50, 400}), 6)
}
