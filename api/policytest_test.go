package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// policyA is the policy the recorded run's worker has: the demo's Write
// and Bash ask, by rules that read their arguments.
const policyA = `tools:
  Write:
    when: 'args.file_path.startsWith("notes/")'
  Bash:
    when: 'args.command.startsWith("ls") || args.command.contains("sudo")'
`

// testPolicyAt posts a candidate to the API's POST /policy/<what> and
// answers its status and report (or error).
func testPolicyAt(t *testing.T, url, what, token string, req protocol.PolicyTestRequest) (int, protocol.PolicyReport, string) {
	t.Helper()
	body, err := json.Marshal(req)
	require.NoError(t, err)
	auth := ""
	if token != "" {
		auth = "Bearer " + token
	}
	resp, out := send(t, http.MethodPost, url+"/policy/"+what, auth, string(body))
	var report protocol.PolicyReport
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal([]byte(out), &report), out)
	}
	return resp.StatusCode, report, out
}

// TestBacktestAgreesWithTheGateOnARecordedRun runs real turns under policy
// A, a person deciding each call, then backtests candidates on the
// ledger they filled: A itself asks for every call that asked, a looser
// one lists the calls the person declined first, and a four-eyes one the
// calls whose decider could no longer decide. The ledger is SQLite (the
// default) and a real PostgreSQL server.
func TestBacktestAgreesWithTheGateOnARecordedRun(t *testing.T) {
	t.Parallel()
	onEachLedger(t, func(t *testing.T, db string, opts []stackOption) {
		testBacktestOnARecordedRun(t, opts...)
	})
}

func testBacktestOnARecordedRun(t *testing.T, opts ...stackOption) {
	rules, err := policy.Parse([]byte(policyA))
	require.NoError(t, err)
	st := newStack(t, append(opts, withSettings(func(s *workflows.Settings) { s.Rules = rules }))...)
	const adminToken, leadToken = "admin-0123456789abcdef", "lead-0123456789abcdef"
	o := st.apiOptions()
	o.Tokens = []config.APIToken{
		{Token: adminToken, Principal: "root", Roles: []string{config.RoleAdmin}},
		{Token: leadToken, Principal: "lead", Roles: config.DefaultRoles},
	}
	api := serveAPI(t, NewServer(o))

	// Turn 1: lead approves the Write, declines the Bash; turn 2 the
	// other way round. The Read asks no one, and has no row.
	decide := func(e protocol.Event, decision string) {
		t.Helper()
		resp, out := send(t, http.MethodPost, api.URL+"/chat/approval", "Bearer "+leadToken, `{"requestId":"`+e.RequestID+`","decision":"`+decision+`"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, out)
		require.JSONEq(t, `{"accepted":true}`, out)
	}
	for i, d := range [][2]string{{protocol.DecisionApprove, protocol.DecisionDecline}, {protocol.DecisionDecline, protocol.DecisionApprove}} {
		_, msgs := chatAs(t, api, leadToken, `{"query": "tidy up", "conversationId": "backtest"}`)
		seq := 0
		asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
		decide(asked["Write"], d[0])
		decide(asked["Bash"], d[1])
		untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			page, err := st.ledger.List(context.Background(), auditdb.Filter{Conversation: "backtest"})
			require.NoError(c, err)
			require.Len(c, page.Records, 2*(i+1))
			for _, r := range page.Records {
				require.NotEmpty(c, r.Decision)
			}
		}, waitFor, 50*time.Millisecond)
	}

	test := func(candidate string) protocol.PolicyReport {
		t.Helper()
		status, report, out := testPolicyAt(t, api.URL, "test", adminToken, protocol.PolicyTestRequest{Policy: candidate, ConversationID: "backtest"})
		require.Equal(t, http.StatusOK, status, out)
		require.Equal(t, 4, report.Rows)
		return report
	}
	verdicts := func(report protocol.PolicyReport) []string {
		var out []string
		for _, c := range report.Calls {
			out = append(out, c.Tool+" "+c.Decision+" "+c.Verdict)
		}
		return out
	}

	same := test(policyA)
	require.Empty(t, same.Calls, "the policy the calls ran under asks for each of them again")
	require.Equal(t, []protocol.PolicyTestGroup{
		{Tool: "Bash", Rule: `rule Bash: when args.command.startsWith("ls") || args.command.contains("sudo")`, Rows: 2, WouldAsk: 2},
		{Tool: "Write", Rule: `rule Write: when args.file_path.startsWith("notes/")`, Rows: 2, WouldAsk: 2},
	}, same.Groups)

	looser := test("tools:\n  Bash:\n    when: 'args.command.contains(\"sudo\")'\n  Write:\n    require: never\n")
	require.Equal(t, []string{
		"Bash decline declined_would_run", "Write decline declined_would_run",
		"Bash approve would_run", "Write approve would_run",
	}, sortedWithin(verdicts(looser), 2))
	require.Equal(t, "lead", looser.Calls[0].Principal)

	fourEyes := test(policyA + "    second_person: true\n")
	require.Equal(t, []string{"Bash approve deciders_change", "Bash decline deciders_change"}, sortedWithin(verdicts(fourEyes), 2),
		"lead sent the messages, and may not decide their Bash calls under second_person")
	require.Contains(t, fourEyes.Calls[0].Why, `"lead" sent the message that led to this call`)

	// The window: no rows since now.
	now := time.Now()
	status, report, out := testPolicyAt(t, api.URL, "test", adminToken, protocol.PolicyTestRequest{Policy: policyA, Since: &now})
	require.Equal(t, http.StatusOK, status, out)
	require.Zero(t, report.Rows)

	// A candidate that does not parse names its rule; only admin tests.
	status, _, out = testPolicyAt(t, api.URL, "test", adminToken, protocol.PolicyTestRequest{Policy: "tools:\n  Bash:\n    when: args.command.startsWith(\n"})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, out, `tool Bash: when \"args.command.startsWith(\"`)
	status, _, out = testPolicyAt(t, api.URL, "test", leadToken, protocol.PolicyTestRequest{Policy: policyA})
	require.Equal(t, http.StatusForbidden, status, out)

	// The examples alone, with the worker's tools: an absolute path in
	// the workspace is relative to the rule.
	status, report, out = testPolicyAt(t, api.URL, "check", adminToken, protocol.PolicyTestRequest{Policy: policyA + `    examples:
      ask: [{command: "ls"}, {command: "rm -rf /"}]
  Read:
    require: never
    examples:
      allow: [{file_path: "` + st.workspace + `/README.md"}]
`})
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, 3, report.Examples)
	require.Equal(t, []protocol.PolicyExampleFailure{{Tool: "Bash", Kind: "ask", Arguments: `{"command":"rm -rf /"}`, Problem: "the rule lets it run without a person"}}, report.ExampleFailures)
	require.Zero(t, report.Rows, "a check reads no ledger")
}

// sortedWithin sorts each run of n items of list, whose order between
// runs is the report's and within them the ledger's (newest first).
func sortedWithin(list []string, n int) []string {
	out := slices.Clone(list)
	for i := 0; i < len(out); i += n {
		slices.Sort(out[i:min(i+n, len(out))])
	}
	return out
}
