package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
