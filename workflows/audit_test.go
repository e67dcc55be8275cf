package workflows

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// withLedger gives h's worker an audit ledger in a SQLite file whose
// writes fail once, after writing, the first failOnce times they are
// called: the retry must not duplicate a row.
func withLedger(t *testing.T, h *harness, failOnce int32) *auditdb.Ledger {
	t.Helper()
	l, err := auditdb.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	auditor := &activities.Auditor{Ledger: l}
	var calls atomic.Int32
	h.env.RegisterActivityWithOptions(func(ctx context.Context, records []audit.Record) error {
		if err := auditor.Audit(ctx, records); err != nil {
			return err
		}
		if calls.Add(1) <= failOnce {
			return errors.New("connection reset after the commit")
		}
		return nil
	}, activity.RegisterOptions{Name: activities.AuditActivity})
	return l
}

func ledgerRows(t *testing.T, l *auditdb.Ledger) map[string]audit.Record {
	t.Helper()
	page, err := l.List(context.Background(), auditdb.Filter{Limit: auditdb.MaxLimit})
	require.NoError(t, err)
	rows := map[string]audit.Record{}
	for _, r := range page.Records {
		require.NotContains(t, rows, r.ToolCallID, "one row per call")
		rows[r.ToolCallID] = r
	}
	return rows
}

func TestTheLedgerHasARowForEveryAskedCallWithWhoDecidedWhatAndWhatRan(t *testing.T) {
	settings := testSettings()
	settings.Audit = true
	settings.Rules = []Rule{{Tool: protocol.ToolBash, Require: RequireWhen, When: `args.command != "ls"`}}
	h := newHarness(t, settings, calls(
		call("call_read", protocol.ToolRead, `{"file_path":"a.txt"}`),
		call("call_bash", protocol.ToolBash, `{"command":"rm -rf build"}`),
		call("call_write", protocol.ToolWrite, `{"file_path":"a.txt","content":"x"}`),
		call("call_edit", protocol.ToolEdit, `{"file_path":"a.txt","old_string":"x","new_string":"y"}`),
	))
	// Every write fails once after it committed: the ledger's rows must be
	// the same as if it had not.
	l := withLedger(t, h, 2)
	h.env.RegisterDelayedCallback(func() {
		rows := ledgerRows(t, l)
		require.Len(t, rows, 3, "the asked rows are written before anyone decides")
		require.Equal(t, audit.StageAsked, rows["call_bash"].Stage)
		require.Empty(t, rows["call_bash"].Decision)
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove,
			Arguments: `{"command":"rm -rf build/tmp"}`, Principal: "bob", Role: "approve"})
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolWrite), Decision: protocol.DecisionDecline, Reason: "not that file", Principal: "carol"})
	}, time.Minute)
	// While the Edit still waits, the decisions are in the ledger already.
	h.env.RegisterDelayedCallback(func() {
		rows := ledgerRows(t, l)
		require.Equal(t, audit.StageDecided, rows["call_bash"].Stage)
		require.Equal(t, "bob", rows["call_bash"].Principal)
		require.Equal(t, `{"command":"rm -rf build/tmp"}`, rows["call_bash"].EditedArguments)
		require.Equal(t, protocol.DecisionDecline, rows["call_write"].Decision)
		require.Equal(t, audit.StageAsked, rows["call_edit"].Stage)
	}, 2*time.Minute)

	out := h.runTurn(TurnInput{ConversationID: "c1", Turn: 1, Sender: "ann", Messages: userTurn("clean up").Messages})
	workflowID := findEvent(t, out.Events, protocol.EventTurnStart).WorkflowID

	rows := ledgerRows(t, l)
	require.NotContains(t, rows, "call_read", "a call that never asks has no row")
	require.Len(t, rows, 3)
	bash, write, edit := rows["call_bash"], rows["call_write"], rows["call_edit"]
	for _, r := range []audit.Record{bash, write, edit} {
		require.Equal(t, audit.StageEnded, r.Stage)
		require.Equal(t, "c1", r.ConversationID)
		require.Equal(t, contract.TurnOfWorkflowID(workflowID), r.TurnID)
		require.Equal(t, workflowID, r.WorkflowID)
		require.Equal(t, "ann", r.Sender)
		require.NotNil(t, r.DecidedAt)
		require.NotNil(t, r.FinishedAt)
		require.NotNil(t, r.ExpiresAt)
	}

	require.Equal(t, `rule Bash: when args.command != "ls"`, bash.Asked)
	require.Equal(t, `{"command":"rm -rf build"}`, bash.Arguments, "what the person was shown")
	require.Equal(t, protocol.DecisionApprove, bash.Decision)
	require.Equal(t, DecidedByPerson, bash.DecidedBy)
	require.Equal(t, "bob", bash.Principal)
	require.Equal(t, "approve", bash.Role)
	require.Equal(t, `{"command":"rm -rf build/tmp"}`, bash.EditedArguments)
	require.Equal(t, "- command: \"rm -rf build\"\n+ command: \"rm -rf build/tmp\"", bash.EditDiff)
	require.Equal(t, audit.OutcomeOK, bash.Outcome)
	require.Contains(t, bash.Result, `Bash ran with {"command":"rm -rf build/tmp"}`)

	require.Equal(t, "default: Write is a protected tool", write.Asked)
	require.Equal(t, protocol.DecisionDecline, write.Decision)
	require.Equal(t, "carol", write.Principal)
	require.Equal(t, "not that file", write.Reason)
	require.Equal(t, audit.OutcomeNotRun, write.Outcome)
	require.Contains(t, write.Result, "Not executed")

	require.Equal(t, protocol.DecisionTimeout, edit.Decision)
	require.Equal(t, DecidedByTimer, edit.DecidedBy)
	require.Empty(t, edit.Principal)
	require.Equal(t, audit.OutcomeNotRun, edit.Outcome)
	require.Equal(t, []string{protocol.ToolRead, protocol.ToolBash}, h.ranTools())
}

func TestTheLedgerRecordsACallThatAGrantAnsweredAsTheGrants(t *testing.T) {
	settings := testSettings()
	settings.Audit = true
	same := calls(call("call_1", protocol.ToolBash, `{"command":"make test"}`))
	h := newHarness(t, settings, same, calls(call("call_2", protocol.ToolBash, `{"command":"make test"}`)))
	l := withLedger(t, h, 0)
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove,
			Remember: protocol.RememberConversation, SameArguments: true, Principal: "bob"})
	}, time.Minute)

	out := h.runTurn(userTurn("test it twice"))

	rows := ledgerRows(t, l)
	require.Len(t, rows, 2)
	granted := rows["call_2"]
	require.Len(t, out.Grants, 1)
	require.Equal(t, DecidedByGrant, granted.DecidedBy)
	require.Equal(t, out.Grants[0].ID, granted.Grant)
	require.Equal(t, "bob", granted.Principal, "the grant's decisions are its maker's")
	require.Equal(t, protocol.DecisionApprove, granted.Decision)
	require.Equal(t, audit.OutcomeOK, granted.Outcome)
	require.Equal(t, "grant:"+findEvent(t, out.Events, protocol.EventTurnStart).WorkflowID+":2:0:call_2", granted.ID)
	require.Equal(t, []string{protocol.ToolBash, protocol.ToolBash}, h.ranTools())
}

func TestAWorkerWithoutALedgerWritesNoRowsAndAsksForNoPatch(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("call_1", protocol.ToolBash, `{"command":"ls"}`)))
	// An Audit activity that would fail the test if the turn called it.
	h.env.RegisterActivityWithOptions(func(context.Context, []audit.Record) error {
		t.Error("the turn wrote the ledger with Settings.Audit false")
		return nil
	}, activity.RegisterOptions{Name: activities.AuditActivity})
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove})
	}, time.Minute)
	h.env.OnGetVersion(patchAuditLedger, -1, 1).Panic("asked for the audit patch")
	h.runTurn(userTurn("ls"))
}

func TestASubagentsCallHasARowNamingTheSubagentAndItsTurn(t *testing.T) {
	settings := subagentSettings()
	settings.Audit = true
	h := newHarness(t, settings,
		task("writer", "write a note"),
		calls(call("w", protocol.ToolWrite, `{"file_path":"n.txt","content":"hi"}`)),
		activities.ModelOutput{Content: "note written"},
	)
	l := withLedger(t, h, 0)
	h.env.RegisterDelayedCallback(func() {
		// The pending request names its subagent and the user's message.
		v, err := h.env.QueryWorkflowByID(childID, contract.PendingQuery)
		require.NoError(t, err)
		var pending []protocol.PendingApproval
		require.NoError(t, v.Get(&pending))
		require.Len(t, pending, 1)
		require.Equal(t, "writer", pending[0].Subagent)
		require.Equal(t, "delegate", pending[0].UserMessage)
		h.decideChild(protocol.ApprovalDecision{RequestID: h.subagentRequestID(), Decision: protocol.DecisionApprove, Principal: "bob"})
	}, time.Second)

	h.runTurn(userTurn("delegate"))

	rows := ledgerRows(t, l)
	require.Len(t, rows, 1)
	r := rows["w"]
	require.Equal(t, "writer", r.Agent)
	require.Equal(t, childID, r.WorkflowID)
	require.Equal(t, contract.TurnOfWorkflowID(childID), r.TurnID)
	require.NotEqual(t, childID, r.TurnID, "the turn that started the subagent")
	require.Equal(t, "bob", r.Principal)
	require.Equal(t, audit.OutcomeOK, r.Outcome)
}

func TestALedgerThatIsDownCostsABatchOneShortWaitAndItsRowsComeLater(t *testing.T) {
	settings := testSettings()
	settings.Audit = true
	settings.ApprovalTimeout = time.Hour
	h := newHarness(t, settings, calls(
		call("call_a", protocol.ToolWrite, `{"file_path":"a.txt","content":"a"}`),
		call("call_b", protocol.ToolWrite, `{"file_path":"b.txt","content":"b"}`),
		call("call_c", protocol.ToolWrite, `{"file_path":"c.txt","content":"c"}`),
	))
	l, err := auditdb.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	auditor := &activities.Auditor{Ledger: l}
	var down atomic.Bool
	down.Store(true)
	h.env.RegisterActivityWithOptions(func(ctx context.Context, records []audit.Record) error {
		if down.Load() {
			return errors.New("dial tcp 10.0.0.5:5432: connection refused")
		}
		return auditor.Audit(ctx, records)
	}, activity.RegisterOptions{Name: activities.AuditActivity})
	var ranAt time.Time
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == protocol.ToolWrite && ranAt.IsZero() {
			ranAt = h.env.Now()
		}
	})
	// Decided call by call, a minute apart, while the ledger is down.
	var lastDecision time.Time
	for i, tool := range []string{"call_a", "call_b", "call_c"} {
		h.env.RegisterDelayedCallback(func() {
			for _, e := range h.events() {
				if e.Type == protocol.EventApprovalRequest && e.ToolCallID == tool {
					h.decide(protocol.ApprovalDecision{RequestID: e.RequestID, Decision: protocol.DecisionApprove, Principal: "bob"})
				}
			}
			lastDecision = h.env.Now()
		}, time.Duration(i+1)*time.Minute)
	}
	// The ledger comes back while the turn ends.
	h.env.RegisterDelayedCallback(func() { down.Store(false) }, 3*time.Minute+5*time.Second)

	h.runTurn(userTurn("write three"))

	require.Equal(t, []string{protocol.ToolWrite, protocol.ToolWrite, protocol.ToolWrite}, h.ranTools())
	require.False(t, ranAt.Before(lastDecision))
	require.LessOrEqual(t, ranAt.Sub(lastDecision), ledgerShortWait, "the batch waited on the ledger for no more than one short wait after its last decision")
	rows := ledgerRows(t, l)
	require.Len(t, rows, 3, "no row is lost")
	for _, r := range rows {
		require.Equal(t, audit.StageEnded, r.Stage, "written before the turn ended, whole")
		require.Equal(t, "bob", r.Principal)
		require.Equal(t, audit.OutcomeOK, r.Outcome)
	}
}

// carryingLedger gives h's worker a ledger that its tool and model
// activities write the rows they carry to, as a worker's do
// (activities.Tools.Ledger), and an Audit local activity that records
// the stages each of its writes holds.
func carryingLedger(t *testing.T, h *harness, carryFails bool) (*auditdb.Ledger, *[][]int) {
	t.Helper()
	l, err := auditdb.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	var carrier audit.Writer = l
	if carryFails {
		carrier = failingWriter{}
	}
	var writes [][]int
	h.env.RegisterActivityWithOptions(func(ctx context.Context, records []audit.Record) error {
		var stages []int
		for _, r := range records {
			stages = append(stages, r.Stage)
		}
		h.mu.Lock()
		writes = append(writes, stages)
		h.mu.Unlock()
		return l.Write(ctx, records)
	}, activity.RegisterOptions{Name: activities.AuditActivity})
	for _, name := range testTools {
		h.env.RegisterActivityWithOptions(activities.Carried(carrier, h.tool(name)), activity.RegisterOptions{Name: name})
	}
	h.env.RegisterActivityWithOptions(func(ctx context.Context, in activities.ModelInput) (out activities.ModelOutput, err error) {
		out.LedgerRows = activities.Carry(ctx, carrier, in.Ledger, true, func() { out, err = h.model(ctx, in) })
		return out, err
	}, activity.RegisterOptions{Name: activities.ModelActivity})
	return l, &writes
}

type failingWriter struct{}

func (failingWriter) Write(context.Context, []audit.Record) error {
	return errors.New("dial tcp 10.0.0.5:5432: connection refused")
}

func TestNoLedgerWriteSitsBetweenADecisionAndItsToolOrTheToolAndItsResult(t *testing.T) {
	for _, level := range []int{levelFileToolsCarryNone - 1, PatchLevel} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) { noLedgerWriteOnTheDecisionPath(t, level) })
	}
}

// noLedgerWriteOnTheDecisionPath runs a Write and a Bash that waits after
// it, at level: a turn of level 5 or later hands the Write no rows
// (levelFileToolsCarryNone), one before hands it the last decision's.
func noLedgerWriteOnTheDecisionPath(t *testing.T, level int) {
	settings := testSettings()
	settings.Audit = true
	settings.beginAt = level
	h := newHarness(t, settings, calls(
		call("call_write", protocol.ToolWrite, `{"file_path":"a.txt","content":"x"}`),
		call("call_bash", protocol.ToolBash, `{"command":"make"}`),
	))
	l, writes := carryingLedger(t, h, false)
	var toolInputs []activities.ToolInput
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		if info.ActivityType.Name == protocol.ToolWrite || info.ActivityType.Name == protocol.ToolBash {
			var in activities.ToolInput
			require.NoError(t, args.Get(&in))
			toolInputs = append(toolInputs, in)
		}
	})
	// The Write is decided while the Bash still waits, then the Bash.
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolWrite), Decision: protocol.DecisionApprove, Principal: "bob"})
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolBash), Decision: protocol.DecisionDecline, Reason: "not now", Principal: "bob"})
	}, 2*time.Minute)

	h.runTurn(userTurn("write and build"))

	require.Equal(t, [][]int{{audit.StageAsked, audit.StageAsked}, {audit.StageDecided}}, *writes,
		"the turn's own writes: the asked rows, and the decision that left another call waiting; none after the last decision")
	require.Len(t, toolInputs, 1)
	if level >= levelFileToolsCarryNone {
		require.Empty(t, toolInputs[0].Ledger, "a file tool carries none: the model call does")
	} else {
		require.Len(t, toolInputs[0].Ledger, 1, "the tool carried the last decision")
		require.Equal(t, "call_bash", toolInputs[0].Ledger[0].ToolCallID)
		require.Equal(t, audit.StageDecided, toolInputs[0].Ledger[0].Stage)
		require.Empty(t, toolInputs[0].Ledger[0].Arguments, "a row the ledger has goes without what it had since it was asked")
	}
	last := h.modelInputs[len(h.modelInputs)-1]
	require.Len(t, last.Ledger, 2, "the model call that reads the results carried the last decision, at its outcome, and the other outcome")
	for _, r := range last.Ledger {
		require.Equal(t, audit.StageEnded, r.Stage)
		require.Empty(t, r.Arguments, "a row the ledger has goes without what it had since it was asked")
	}
	rows := ledgerRows(t, l)
	require.Len(t, rows, 2)
	require.Equal(t, `{"file_path":"a.txt","content":"x"}`, rows["call_write"].Arguments, "the ledger kept the arguments")
	require.Equal(t, "preview of Write "+rows["call_write"].Arguments, rows["call_write"].Preview, "and the preview")
	require.Equal(t, audit.StageEnded, rows["call_write"].Stage)
	require.Equal(t, audit.OutcomeOK, rows["call_write"].Outcome)
	require.Equal(t, audit.StageEnded, rows["call_bash"].Stage)
	require.Equal(t, audit.OutcomeNotRun, rows["call_bash"].Outcome)
	require.Equal(t, "not now", rows["call_bash"].Reason)
}

func TestRowsAnActivityCouldNotWriteAreWrittenBeforeTheTurnEnds(t *testing.T) {
	settings := testSettings()
	settings.Audit = true
	h := newHarness(t, settings, calls(call("call_write", protocol.ToolWrite, `{"file_path":"a.txt","content":"x"}`)))
	l, writes := carryingLedger(t, h, true)
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolWrite), Decision: protocol.DecisionApprove, Principal: "bob"})
	}, time.Minute)

	h.runTurn(userTurn("write"))

	require.Equal(t, []string{protocol.ToolWrite}, h.ranTools())
	require.Equal(t, [][]int{{audit.StageAsked}, {audit.StageEnded}}, *writes,
		"neither the tool nor the model call could write the row; the turn wrote it whole itself before it ended")
	rows := ledgerRows(t, l)
	require.Equal(t, audit.StageEnded, rows["call_write"].Stage)
	require.Equal(t, audit.OutcomeOK, rows["call_write"].Outcome)
}
