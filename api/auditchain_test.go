package main

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/protocol"
)

// TestTheLedgerProvesItselfOverHTTP runs a turn whose calls a person
// approves and declines, then checks the ledger through GET /audit/verify
// with an admin's token (an approver's is 403), exports it with its chain
// and verifies the file offline, then edits a row in the database and
// finds it named: on SQLite (the default) and on a real PostgreSQL server.
func TestTheLedgerProvesItselfOverHTTP(t *testing.T) {
	t.Parallel()
	onEachLedger(t, func(t *testing.T, db string, opts []stackOption) {
		st := newStack(t, opts...)
		const adminToken, approverToken = "admin-0123456789abcd", "approver-0123456789a"
		o := st.apiOptions()
		o.Tokens = []config.APIToken{
			{Token: adminToken, Principal: "root", Roles: []string{config.RoleAdmin}},
			{Token: approverToken, Principal: "ann", Roles: config.DefaultRoles},
		}
		api := serveAPI(t, NewServer(o))

		_, msgs := chatAs(t, api, approverToken, `{"query":"one","conversationId":"chain-`+db+`"}`)
		seq := 0
		asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
		for tool, decision := range map[string]string{"Bash": "approve", "Write": "decline"} {
			resp, body := send(t, http.MethodPost, api.URL+"/chat/approval", "Bearer "+approverToken,
				`{"requestId":"`+asked[tool].RequestID+`","decision":"`+decision+`"}`)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
		}
		untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

		verify := func(token, query string) (int, audit.Verification, string) {
			t.Helper()
			resp, body := send(t, http.MethodGet, api.URL+"/audit/verify"+query, "Bearer "+token, "")
			var v audit.Verification
			if resp.StatusCode == http.StatusOK {
				require.NoError(t, json.Unmarshal([]byte(body), &v), body)
			}
			return resp.StatusCode, v, body
		}
		status, _, body := verify(approverToken, "")
		require.Equal(t, http.StatusForbidden, status, body)
		require.Contains(t, body, "GET /audit/verify needs a token with the role admin")
		status, v, body := verify(adminToken, "")
		require.Equal(t, http.StatusOK, status, body)
		require.True(t, v.OK, body)
		require.Equal(t, int64(2), v.Rows)
		require.GreaterOrEqual(t, v.Entries, int64(4), "each row asked, then at least its outcome: %s", body)
		require.Len(t, v.Head, 64)
		status, _, body = verify(adminToken, "?expectHead=nothex")
		require.Equal(t, http.StatusBadRequest, status, body)
		require.Contains(t, body, `expectHead \"nothex\" is not a hash of the chain`)
		status, kept, _ := verify(adminToken, "?expectHead="+v.Head)
		require.Equal(t, http.StatusOK, status)
		require.True(t, kept.OK)

		// The export with its chain, as an approver may read it, verifies
		// offline; its rows carry their hashes.
		resp, export := send(t, http.MethodGet, api.URL+"/audit?format=jsonl&chain=1", "Bearer "+approverToken, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, export)
		require.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
		off, err := audit.VerifyExport(strings.NewReader(export), v.Head)
		require.NoError(t, err)
		require.Equal(t, v, off)
		resp, body = send(t, http.MethodGet, api.URL+"/audit?format=jsonl&chain=1&tool=Bash", "Bearer "+approverToken, "")
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
		require.Contains(t, body, "chain=1 exports the whole ledger, which its chain covers: no filter, limit or cursor")

		// Someone with the database's password approves the declined call
		// after the fact.
		driver := "sqlite"
		if db == "postgres" {
			driver = "pgx"
		}
		dsn := st.auditDB
		if driver == "sqlite" {
			dsn = "file:" + dsn + "?_pragma=busy_timeout(10000)"
		}
		raw, err := sql.Open(driver, dsn)
		require.NoError(t, err)
		defer raw.Close()
		res, err := raw.Exec("UPDATE tollgate_audit SET decision = 'approve' WHERE tool = 'Write'")
		require.NoError(t, err)
		n, err := res.RowsAffected()
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		status, v, body = verify(adminToken, "")
		require.Equal(t, http.StatusOK, status, body)
		require.False(t, v.OK, body)
		require.Equal(t, asked["Write"].RequestID, v.FirstBad.ID)
		require.Positive(t, v.FirstBad.Seq)
		require.Contains(t, v.FirstBad.Problem, `decision was "decline", is "approve"`)
	})
}
