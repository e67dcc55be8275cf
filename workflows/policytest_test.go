package workflows

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// workspaceSettings are a worker's settings with the real tools in a
// workspace of the test's own, whose docs/ holds a link to src/.
func workspaceSettings(t *testing.T) Settings {
	t.Helper()
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "src"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "docs"), 0o755))
	require.NoError(t, os.Symlink("../src", filepath.Join(ws, "docs", "src")))
	return Settings{
		RequiredTools:  []string{protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash},
		Tools:          (&activities.Tools{Workspace: ws}).Specs(),
		WorkspaceRoots: []string{ws},
	}
}

func parseRules(t *testing.T, yaml string) []Rule {
	t.Helper()
	rules, err := policy.Parse([]byte(yaml))
	require.NoError(t, err)
	return rules
}

func TestRuleExamplesAreCheckedAsTheGateDecidesNormalizedCalls(t *testing.T) {
	s := workspaceSettings(t)
	ws := s.WorkspaceRoots[0]
	s.Rules = parseRules(t, `
tools:
  Write:
    when: '!args.file_path.startsWith("docs/")'
    examples:
      ask:
        - {file_path: src/main.go, content: x}
        - {file_path: docs/src/main.go, content: x}   # a link to src/
        - {file_path: docs/../main.go, content: x}
      allow:
        - {file_path: `+ws+`/docs/guide.md, content: x}
`)
	require.NoError(t, CheckExamples(s))
	failures, n := exampleFailures(s)
	require.Empty(t, failures)
	require.Equal(t, 4, n)

	s.Rules = parseRules(t, `
tools:
  Bash:
    when: 'args.command.contains("sudo")'
    examples:
      ask: [{command: "rm -rf /"}, {command: "sudo ls"}]
      allow: [{command: "sudo -l"}, {cmd: "ls"}]
  Write:
    when: 'args.content.size() > 0'
    examples:
      ask: [{file_path: ../etc/passwd, content: x}]
`)
	err := CheckExamples(s)
	require.EqualError(t, err, `tool Bash: example ask {"command":"rm -rf /"}: the rule lets it run without a person
tool Bash: example allow {"command":"sudo -l"}: the rule asks a person about it
tool Bash: example allow {"cmd":"ls"}: the tool refuses its arguments: `+mustRefuse(t, s, "Bash", `{"cmd":"ls"}`)+`
tool Write: example ask {"content":"x","file_path":"../etc/passwd"}: the tool refuses its arguments: `+mustRefuse(t, s, "Write", `{"content":"x","file_path":"../etc/passwd"}`))
}

// mustRefuse is why the gate refuses a call's arguments.
func mustRefuse(t *testing.T, s Settings, tool, args string) string {
	t.Helper()
	_, err := s.vet(tool, args)
	require.Error(t, err)
	return err.Error()
}

// memoryLedger is a ledger in memory, newest row first as the real one reads.
type memoryLedger []audit.Record

func (l memoryLedger) Each(_ context.Context, conversation string, since time.Time, fn func(audit.Record) error) error {
	for _, r := range l {
		if (conversation == "" || r.ConversationID == conversation) && !r.RequestedAt.Before(since) {
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// runPolicyTest runs the PolicyTest workflow with tester's activity.
func runPolicyTest(t *testing.T, tester *PolicyTester, in contract.PolicyTestInput) (protocol.PolicyReport, error) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	RegisterPolicyTester(env, tester)
	env.ExecuteWorkflow(contract.PolicyTestWorkflow, in)
	require.True(t, env.IsWorkflowCompleted())
	if err := env.GetWorkflowError(); err != nil {
		return protocol.PolicyReport{}, err
	}
	var report protocol.PolicyReport
	require.NoError(t, env.GetWorkflowResult(&report))
	return report, nil
}

func TestBacktestListsTheDeclinedCallsALooserPolicyLetsRunFirst(t *testing.T) {
	s := workspaceSettings(t)
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	row := func(id, tool, args, decision, by, principal string) audit.Record {
		return audit.Record{ID: id, ConversationID: "c", TurnID: "t", Tool: tool, Arguments: args, Sender: "dev",
			RequestedAt: at, Decision: decision, DecidedBy: by, Principal: principal, Role: "approve", Asked: "default: " + tool + " is a protected tool"}
	}
	ledger := memoryLedger{
		row("1", "Bash", `{"command":"go test ./..."}`, protocol.DecisionApprove, DecidedByPerson, "lead"),
		row("2", "Bash", `{"command":"git push --force"}`, protocol.DecisionDecline, DecidedByPerson, "lead"),
		row("3", "Bash", `{"command":"sudo reboot"}`, protocol.DecisionDecline, DecidedByPerson, "lead"),
		row("4", "Write", `{"file_path":"docs/a.md","content":"x"}`, protocol.DecisionTimeout, DecidedByTimer, ""),
		row("5", "Write", `{"file_path":"src/a.go","content":"x"}`, protocol.DecisionApprove, DecidedByPerson, "dev"),
		row("6", "Write", `{"file_path":"docs/src/a.go","content":"x"}`, protocol.DecisionDecline, DecidedByGrant, "lead"),
		row("7", "Write", `{"file_path":"../outside","content":"x"}`, protocol.DecisionDecline, DecidedByPerson, "lead"),
		// A vote and an escalation step of call 1: rows, not calls.
		row("vote:1:lead", "Bash", `{"command":"go test ./..."}`, protocol.DecisionApprove, DecidedByVote, "lead"),
		row("escalation:1:1", "Bash", `{"command":"go test ./..."}`, "", DecidedByEscalation, ""),
	}
	ledger[2].RequestedAt = at.Add(-48 * time.Hour)
	tester := &PolicyTester{Settings: s, Ledger: ledger}
	const looser = `
tools:
  Bash:
    when: 'args.command.contains("sudo")'
  Write:
    when: '!args.file_path.startsWith("docs/")'
    second_person: true
`
	report, err := runPolicyTest(t, tester, contract.PolicyTestInput{Request: protocol.PolicyTestRequest{Policy: looser}, Backtest: true})
	require.NoError(t, err)
	require.Equal(t, 7, report.Rows)
	var verdicts []string
	for _, c := range report.Calls {
		verdicts = append(verdicts, c.RequestID+" "+c.Verdict)
	}
	require.Equal(t, []string{
		"2 declined_would_run", // git push, declined, no longer asks
		"1 would_run", "4 would_run",
		"5 deciders_change", // dev approved the Write dev's own message led to
		"7 refused",
	}, verdicts, "row 3 (sudo) still asks; row 6's link leads to src/, which still asks")
	require.Equal(t, "rule Bash: when args.command.contains(\"sudo\")", report.Calls[0].Rule)
	require.Contains(t, report.Calls[3].Why, "need a second person")
	require.Equal(t, []protocol.PolicyTestGroup{
		{Tool: "Bash", Rule: `rule Bash: when args.command.contains("sudo")`, Rows: 3, DeclinedWouldRun: 1, WouldRun: 1, WouldAsk: 1},
		{Tool: "Write", Rule: `rule Write: when !args.file_path.startsWith("docs/")`, Rows: 4, WouldRun: 1, DecidersChange: 1, WouldAsk: 1, Refused: 1},
	}, report.Groups)

	// The window: only rows asked since, of one conversation.
	since := at.Add(-time.Hour)
	report, err = runPolicyTest(t, tester, contract.PolicyTestInput{Request: protocol.PolicyTestRequest{Policy: looser, Since: &since, ConversationID: "c"}, Backtest: true})
	require.NoError(t, err)
	require.Equal(t, 6, report.Rows)
	report, err = runPolicyTest(t, tester, contract.PolicyTestInput{Request: protocol.PolicyTestRequest{Policy: looser, ConversationID: "other"}, Backtest: true})
	require.NoError(t, err)
	require.Zero(t, report.Rows)
	require.Empty(t, report.Calls)
}

func TestPolicyTestOfACandidateThatDoesNotParseNamesTheRule(t *testing.T) {
	tester := &PolicyTester{Settings: workspaceSettings(t)}
	_, err := runPolicyTest(t, tester, contract.PolicyTestInput{Request: protocol.PolicyTestRequest{Policy: "tools:\n  Bash:\n    when: args.command.startsWith(\n"}, Backtest: true})
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	require.Equal(t, contract.ErrBadPolicy, app.Type())
	require.Contains(t, app.Message(), `tool Bash: when "args.command.startsWith("`)

	_, err = runPolicyTest(t, tester, contract.PolicyTestInput{Request: protocol.PolicyTestRequest{Policy: "tools: {}\n"}, Backtest: true})
	require.ErrorAs(t, err, &app)
	require.Equal(t, contract.ErrNoLedger, app.Type(), "a worker without a ledger has nothing to test on")

	report, err := runPolicyTest(t, tester, contract.PolicyTestInput{Request: protocol.PolicyTestRequest{Policy: "tools:\n  Bash:\n    require: never\n    examples: {ask: [{command: ls}]}\n"}})
	require.NoError(t, err, "a check reads no ledger")
	require.Equal(t, 1, report.Examples)
	require.Equal(t, []protocol.PolicyExampleFailure{{Tool: "Bash", Kind: "ask", Arguments: `{"command":"ls"}`, Problem: "the rule lets it run without a person"}}, report.ExampleFailures)
}

func TestAShadowRulesExamplesSayWhatItWouldDoOncePromoted(t *testing.T) {
	s := testSettings()
	s.Rules = []Rule{
		{Tool: protocol.ToolBash, Require: RequireAlways},
		{Tool: protocol.ToolBash, Require: RequireWhen, When: `args.command.startsWith("rm ")`, Shadow: true,
			Examples: policy.Examples{Ask: []string{`{"command":"rm -rf build"}`}, Allow: []string{`{"command":"ls"}`}}},
	}
	require.NoError(t, CheckExamples(s), "the live rule asks of ls; the shadow rule, whose examples these are, would not")
	s.Rules[1].Examples.Allow = []string{`{"command":"rm x"}`}
	require.ErrorContains(t, CheckExamples(s), `tool Bash: example allow {"command":"rm x"}: the rule asks a person about it`)
}
