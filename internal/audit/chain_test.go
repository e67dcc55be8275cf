package audit_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
)

// The hashes docs/protocol.md describes, made by another implementation
// (Python's hashlib: sha256(bytes(32) + content), then
// sha256(bytes.fromhex(first) + content)).
func TestAnEntrysHashIsSHA256OfThePreviousHashThenTheContent(t *testing.T) {
	first, err := audit.HashEntry(audit.GenesisHash, []byte(`{"id":"r1","stage":1}`))
	require.NoError(t, err)
	require.Equal(t, "2d3db283574ecbc3ec48b0da27afb23a2ae13616f6987e2c42509d0c3891bac0", first)
	second, err := audit.HashEntry(first, []byte(`{"id":"r1","stage":3}`))
	require.NoError(t, err)
	require.Equal(t, "bbe03d868a862a378eecf335193dcd12df5c7ede310a596758bbf66b5eefb038", second)
	_, err = audit.HashEntry("abc", nil)
	require.ErrorContains(t, err, `previous hash "abc" is not 64 hex digits`)
}

func TestCanonicalLeavesOutTheHashAndWritesTimesInUTC(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, paris)
	r := audit.Record{ID: "r1", Stage: audit.StageEnded, Tool: "Bash", RequestedAt: at, DecidedAt: &at, Hash: "ab"}
	b, err := audit.Canonical(r)
	require.NoError(t, err)
	require.NotContains(t, string(b), `"hash"`)
	require.Contains(t, string(b), `"requestedAt":"2026-12-01T09:00:00Z"`)
	require.Contains(t, string(b), `"decidedAt":"2026-12-01T09:00:00Z"`)
	require.Equal(t, paris, r.DecidedAt.Location(), "the record is not changed")

	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	r.FinishedAt = &far
	_, err = audit.Canonical(r)
	require.ErrorContains(t, err, "audit record r1")
}

// export is a two-entry chain of one row, as GET /audit?format=jsonl&chain=1
// writes it.
func export(t *testing.T) (lines []string, head string) {
	t.Helper()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	r := audit.Record{ID: "r1", Stage: audit.StageAsked, Tool: "Bash", RequestedAt: at}
	e1, err := audit.NextEntry(nil, r)
	require.NoError(t, err)
	r.Stage, r.Decision = audit.StageEnded, "decline"
	e2, err := audit.NextEntry(&e1, r)
	require.NoError(t, err)
	r.Hash = e2.Hash
	for _, l := range []audit.ExportLine{{Record: r}, {Chain: &e1}, {Chain: &e2}} {
		b, err := json.Marshal(l)
		require.NoError(t, err)
		lines = append(lines, string(b))
	}
	return lines, e2.Hash
}

func TestAnExportVerifiesOfflineAndNamesWhatWasChanged(t *testing.T) {
	lines, head := export(t)
	v, err := audit.VerifyExport(strings.NewReader(strings.Join(lines, "\n")), head)
	require.NoError(t, err)
	require.Equal(t, audit.Verification{OK: true, Entries: 2, Rows: 1, Head: head, HeadSeq: 2}, v)

	for name, tc := range map[string]struct {
		lines []string
		want  audit.Bad
	}{
		"the first entry left out": {[]string{lines[0], lines[2]}, audit.Bad{Seq: 2, ID: "r1",
			Problem: "the chain begins at entry 2, not 1: the entries before it are missing"}},
		"the row twice": {[]string{lines[0], lines[0], lines[1], lines[2]}, audit.Bad{ID: "r1", Problem: "row r1 is in the export twice"}},
		"the entries swapped": {[]string{lines[0], lines[2], lines[1]}, audit.Bad{Seq: 2, ID: "r1",
			Problem: "the chain begins at entry 2, not 1: the entries before it are missing"}},
		"the row's decision edited": {[]string{strings.Replace(lines[0], "decline", "approve", 1), lines[1], lines[2]}, audit.Bad{Seq: 2, ID: "r1",
			Problem: `row r1 is not as its latest entry, 2, wrote it: decision was "decline", is "approve"`}},
	} {
		t.Run(name, func(t *testing.T) {
			v, err := audit.VerifyExport(strings.NewReader(strings.Join(tc.lines, "\n")), "")
			require.NoError(t, err)
			require.False(t, v.OK)
			require.Equal(t, &tc.want, v.FirstBad)
		})
	}

	_, err = audit.VerifyExport(strings.NewReader(lines[0]+"\n"+`{"error":"the export is incomplete: boom"}`), "")
	require.ErrorContains(t, err, "line 2: the export is cut short: the export is incomplete: boom")
}
