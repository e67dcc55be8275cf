package main

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/config"
)

// TestAuditVerifyChecksTheLedgerThroughTheAPIAndAnExportOffline seeds a
// ledger, serves it with the real API (with tokens), and runs `tollgate
// audit verify` on it with an admin's token, with an approver's (refused),
// on an export without the API, and after someone edited a row and a line
// of the export.
func TestAuditVerifyChecksTheLedgerThroughTheAPIAndAnExportOffline(t *testing.T) {
	l := newLedgerAPI(t)
	ctx, ledger, ledgerPath := l.ctx, l.ledger, l.path
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i := range 3 {
		r := audit.Record{ID: fmt.Sprintf("r%d", i), Stage: audit.StageAsked, ConversationID: "c1", Tool: "Bash",
			Arguments: `{"command":"make test"}`, RequestedAt: at.Add(time.Duration(i) * time.Minute)}
		require.NoError(t, ledger.Write(ctx, []audit.Record{r}))
		r.Stage, r.Decision, r.DecidedBy, r.Principal = audit.StageEnded, "decline", "person", "bob"
		require.NoError(t, ledger.Write(ctx, []audit.Record{r}))
	}

	const adminToken, approverToken = "admin-0123456789abcd", "approver-0123456789a"
	addr := l.serve(t, config.EnvAPITokens+"="+adminToken+":root:admin,"+approverToken+":ann:approve")
	verify := func(token string, args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := run(ctx, append([]string{"audit", "verify", "--api", "http://" + addr, "--token", token}, args...), noEnv, strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := verify(adminToken)
	require.Equal(t, exitOK, code, errOut)
	t.Logf("tollgate audit verify printed:\n%s", out)
	require.Contains(t, out, "ok: 6 entries and 3 rows hold together.\n")
	v, err := ledger.Verify(ctx, "")
	require.NoError(t, err)
	require.Contains(t, out, "head: entry 6 "+v.Head+"\n")

	code, _, errOut = verify(approverToken)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "GET /audit/verify: 403 Forbidden")

	// The export, read with the approver's token, verifies without the API.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/audit?format=jsonl&chain=1", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+approverToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	export, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(export))
	file := filepath.Join(t.TempDir(), "export.jsonl")
	require.NoError(t, os.WriteFile(file, export, 0o644))
	code, out, errOut = verify("", "--file", file, "--expect-head", v.Head)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "ok: 6 entries and 3 rows hold together.\n")

	// The newest row is the first line.
	edited := strings.Replace(string(export), `"principal":"bob"`, `"principal":"alice"`, 1)
	require.NoError(t, os.WriteFile(file, []byte(edited), 0o644))
	code, out, _ = verify("", "--file", file)
	require.Equal(t, exitFail, code)
	require.Contains(t, out, `BROKEN: row r2 is not as its latest entry, 6, wrote it: principal was "bob", is "alice"`)
	require.Contains(t, out, "first bad: entry 6, row r2\n")

	// Someone with the database's file edits a row.
	db, err := sql.Open("sqlite", "file:"+ledgerPath+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec("UPDATE tollgate_audit SET decision = 'approve' WHERE id = 'r1'")
	require.NoError(t, err)
	code, out, _ = verify(adminToken)
	require.Equal(t, exitFail, code)
	require.Contains(t, out, `BROKEN: row r1 is not as its latest entry, 4, wrote it: decision was "decline", is "approve"`)
	require.Contains(t, out, "first bad: entry 4, row r1\n")

	// Put back, it holds together again; a head that no entry has does not.
	_, err = db.Exec("UPDATE tollgate_audit SET decision = 'decline' WHERE id = 'r1'")
	require.NoError(t, err)
	code, _, errOut = verify(adminToken, "--expect-head", v.Head)
	require.Equal(t, exitOK, code, errOut)
	code, out, _ = verify(adminToken, "--expect-head", strings.Repeat("ab", 32))
	require.Equal(t, exitFail, code)
	require.Contains(t, out, "BROKEN: no entry has the head hash "+strings.Repeat("ab", 32)+" that was kept: entries were removed or rewritten\n")
}
