package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
)

// TestPolicySuggestReadsTheLedgerThroughTheAPI seeds a ledger with a
// month and more of decisions, serves it with the real API, and runs
// `tollgate policy suggest` on it.
func TestPolicySuggestReadsTheLedgerThroughTheAPI(t *testing.T) {
	l := newLedgerAPI(t)
	ctx, ledger := l.ctx, l.ledger

	now := time.Now()
	var rows []audit.Record
	row := func(at time.Time, command, decision, principal string) *audit.Record {
		rows = append(rows, audit.Record{
			ID: fmt.Sprintf("r%03d", len(rows)), Stage: audit.StageEnded, ConversationID: "c1", Tool: "Bash",
			Arguments: fmt.Sprintf(`{"command":%q}`, command), Asked: "rule Bash: always", RequestedAt: at,
			Decision: decision, DecidedBy: "person", Principal: principal,
		})
		return &rows[len(rows)-1]
	}
	for i := range 12 {
		row(now.Add(-time.Duration(i+1)*time.Hour), "go test ./...", "approve", "alice")
		row(now.Add(-time.Duration(i+1)*time.Hour), "make deploy", "approve", "alice")
	}
	row(now.Add(-2*time.Hour), "go run ./cmd/migrate", "decline", "bob").Reason = "not on prod"
	// A decline of make deploy, but 40 days ago: outside --since 30d, and
	// inside --since 60d.
	row(now.Add(-40*24*time.Hour), "make deploy", "decline", "bob")
	require.NoError(t, ledger.Write(ctx, rows))

	addr := l.serve(t)
	suggest := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := run(ctx, append([]string{"policy", "suggest", "--api", "http://" + addr}, args...), noEnv, strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := suggest()
	require.Equal(t, exitOK, code, errOut)
	t.Logf("tollgate policy suggest printed:\n%s", out)
	require.Contains(t, out, "2 suggestions from 25 rows since ")
	require.Contains(t, out, "Bash command \"go test ./...\"\n  approved 12 times (by alice; 1 distinct, 1 conversation), never declined or edited")
	require.Contains(t, out, `last similar call a person declined (Bash commands that start with "go"): Bash {"command":"go run ./cmd/migrate"}`)
	require.Contains(t, out, `: "not on prod"`)
	require.Contains(t, out, "          when: '!(args.command == \"go test ./...\")'\n")
	require.Contains(t, out, "Bash command \"make deploy\"\n")
	require.Less(t, strings.Index(out, `Bash command "go test ./..."`), strings.Index(out, `Bash command "make deploy"`), "same count: in name order")

	code, out, errOut = suggest("--since", "60d")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "1 suggestion from 26 rows")
	require.NotContains(t, out, `"make deploy"`+"\n", "declined once, 40 days ago")

	code, out, _ = suggest("--min", "13")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "No suggestion: in 25 rows since ")

	code, out, _ = suggest("--tool", "Write")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "No suggestion: in 0 rows")

	code, _, errOut = suggest("--since", "a while")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `--since "a while" is not a number of days (7d), a duration (36h) or an RFC 3339 time`)
}

func TestPolicySuggestRefusesAConversationItWouldIgnore(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"policy", "suggest", "--conversation", "c1"}, func(string) string { return "" }, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut.String(), "--conversation is for policy test: suggestions read the whole ledger")
}
