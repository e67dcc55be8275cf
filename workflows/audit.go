package workflows

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// auditOptions run the ledger's writes as local activities: each is one
// marker in the turn's history, with no task of its own. A database that
// does not answer is tried again for two minutes; then the turn goes on
// without the rows (its history still holds the facts) and says so in the
// worker's log. Since patchLedgerBehind only the write a loop makes before
// it ends waits this long (flushAudit); the others use auditOptionsShort.
var auditOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    10 * time.Second,
	ScheduleToCloseTimeout: 2 * time.Minute,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    20 * time.Second,
	},
}

// auditOptionsShort run a write of the ledger while the loop waits for
// it mid-batch (patchLedgerBehind): a database that does not answer within
// ledgerShortWait costs the batch that, once; the rows go with the loop's
// next write, and the rest of the batch does not wait for the ledger.
var auditOptionsShort = workflow.LocalActivityOptions{
	StartToCloseTimeout:    5 * time.Second,
	ScheduleToCloseTimeout: ledgerShortWait,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    500 * time.Millisecond,
		BackoffCoefficient: 2,
		MaximumInterval:    2 * time.Second,
	},
}

// ledgerShortWait is the most a ledger that does not answer holds a batch
// (docs/security.md, The audit ledger).
const ledgerShortWait = 10 * time.Second

// auditing reports whether this loop writes the audit ledger: whether the
// worker keeps one (Settings.Audit, recorded at the turn's start). A loop
// of level 0 asks for patchAuditLedger (retired) at its first batch with a
// row to write; GetVersion answers the later asks from what it recorded.
func (t *turn) auditing(ctx workflow.Context) bool {
	if t.settings.Audit {
		requirePatched(ctx, t.settings, patchAuditLedger)
	}
	return t.settings.Audit
}

// writeAudit writes records to the ledger and waits for it. It runs on a
// disconnected context: a cancelled turn still records how its calls
// ended.
//
// Since patchLedgerBehind a write waits at most ledgerShortWait. One that
// fails leaves its rows, and the ledger is behind for the rest of the
// batch: the batch's later writes wait for nothing and add their rows to
// those left, and the loop's next write (the next batch's, or flushAudit
// before the loop ends) carries them all. A row's later stage replaces its
// earlier one there, as it does in the ledger, so a row is never lost,
// only late. Before, each write waited up to two minutes, and a batch
// decided call by call waited that long for every decision.
func (t *turn) writeAudit(ctx workflow.Context, records []audit.Record) {
	if len(records) == 0 && len(t.unwritten) == 0 {
		return
	}
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	if !t.ledgerBounded(ctx) {
		writeRowsLong(ctx, records)
		return
	}
	t.unwritten = latestRows(append(t.unwritten, records...))
	if t.ledgerBehind {
		return
	}
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, auditOptionsShort), activities.AuditActivity, t.unwritten).Get(ctx, nil)
	if err != nil {
		t.ledgerBehind = true
		workflow.GetLogger(ctx).Warn("audit ledger: rows not written yet; the loop writes them later, before it ends", "rows", len(t.unwritten), "error", err)
		return
	}
	t.wrote(t.unwritten)
	t.unwritten = nil
}

// ledgerBounded reports whether this loop follows patchLedgerBehind,
// asked once, at its first write.
func (t *turn) ledgerBounded(ctx workflow.Context) bool {
	if t.boundedLedger == nil {
		v := patched(ctx, t.settings, patchLedgerBehind)
		t.boundedLedger = &v
	}
	return *t.boundedLedger
}

// offPath reports whether this loop keeps the ledger's writes off the
// decision path (levelLedgerOffPath): then a batch's last decision and its
// outcomes are owed (owe), not written while the tool or its result
// waits.
func (t *turn) offPath(ctx workflow.Context) bool {
	return t.settings.PatchLevel >= levelLedgerOffPath && t.auditing(ctx) && t.ledgerBounded(ctx)
}

// owe keeps records for a later write without waiting for the ledger:
// the next activity the loop runs carries them (carried), or the loop's
// next write of its own does (writeAudit, flushAudit, writeOwed). A row's
// later stage replaces its earlier one, as in the ledger.
func (t *turn) owe(records []audit.Record) {
	t.unwritten = latestRows(append(t.unwritten, records...))
}

// carried is what the next activity takes to the ledger while it runs
// (activities.carry): every row owed, unless the ledger failed the
// batch already (then the rows wait for the loop's next write of its own,
// and no activity waits for the ledger again). A loop of a level before
// levelLedgerOffPath hands its activities nothing.
//
// A row the ledger has already goes without what it has had since it was
// asked (audit.Record.Trimmed): an activity's input is history, and a
// Write's content or a preview need not be there twice.
func (t *turn) carried() []audit.Record {
	if t.settings.PatchLevel < levelLedgerOffPath || t.ledgerBehind || len(t.unwritten) == 0 {
		return nil
	}
	out := slices.Clone(t.unwritten)
	for i, r := range out {
		if t.inLedger[r.ID] {
			out[i] = r.Trimmed()
		}
	}
	return out
}

// wrote notes the rows the ledger took.
func (t *turn) wrote(rows []audit.Record) {
	if t.inLedger == nil {
		t.inLedger = map[string]bool{}
	}
	for _, r := range rows {
		t.inLedger[r.ID] = true
	}
}

// took settles the rows an activity carried: n of them reached the ledger
// (all or none). Rows it took are no longer owed, unless a later stage of
// theirs is owed now; rows it did not take stay owed, and the ledger is
// behind for the rest of the batch.
func (t *turn) took(ctx workflow.Context, rows []audit.Record, n int) {
	if len(rows) == 0 || n == activities.LedgerStillWriting {
		// Still being written when the tool was done: the rows stay owed,
		// and the next activity carries them again (a write is idempotent).
		return
	}
	if n != len(rows) {
		t.ledgerBehind = true
		workflow.GetLogger(ctx).Warn("audit ledger: rows an activity carried were not written; the loop writes them later, before it ends", "rows", len(rows))
		return
	}
	t.wrote(rows)
	stage := make(map[string]int, len(rows))
	for _, r := range rows {
		stage[r.ID] = r.Stage
	}
	t.unwritten = slices.DeleteFunc(t.unwritten, func(r audit.Record) bool {
		s, ok := stage[r.ID]
		return ok && s == r.Stage
	})
}

// writeOwed writes the rows owed before the loop runs what carries none (a
// subagent, a client's tool), so that the ledger has the decision while
// it runs.
func (t *turn) writeOwed(ctx workflow.Context) {
	if len(t.unwritten) > 0 {
		t.writeAudit(ctx, nil)
	}
}

// newBatchForLedger lets a batch try the ledger again, whatever the last
// batch found.
func (t *turn) newBatchForLedger() { t.ledgerBehind = false }

// flushAudit writes the rows the ledger has not taken yet, waiting for it
// as long as writes did before patchLedgerBehind, before the loop ends.
func (t *turn) flushAudit(ctx workflow.Context) {
	if len(t.unwritten) == 0 {
		return
	}
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	if writeRowsLong(ctx, t.unwritten) {
		t.wrote(t.unwritten)
		t.unwritten = nil
	}
}

// writeRowsLong writes rows to the ledger, waiting as long as auditOptions
// let it, and says in the worker's log when it could not: the turn's
// history still holds them. It reports whether the ledger took them.
func writeRowsLong(ctx workflow.Context, rows []audit.Record) bool {
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, auditOptions), activities.AuditActivity, rows).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Error("audit ledger: rows not written; the turn's history still holds them", "rows", len(rows), "error", err)
		return false
	}
	return true
}

// latestRows keeps the last record of each row id, in the place of its
// first: a row's later stage replaces its earlier one.
func latestRows(records []audit.Record) []audit.Record {
	var out []audit.Record
	at := map[string]int{}
	for _, r := range records {
		if i, ok := at[r.ID]; ok {
			out[i] = r
			continue
		}
		at[r.ID] = len(out)
		out = append(out, r)
	}
	return out
}

// auditAsked is the ledger's row of request a, as it is asked.
func (t *turn) auditAsked(ctx workflow.Context, a *approval, c check) audit.Record {
	expires := a.ExpiresAt
	r := t.auditRow(ctx, a.RequestID, a.Call, c, a.RequestedAt, &expires)
	// What the inbox shows of a waiting call (GET /approvals lists these
	// rows): the row's later stages carry them on.
	r.Preview, r.UserMessage = a.Preview, text.Truncate(t.userMessage, pendingMessageBytes)
	r.Deciders, r.Votes = t.gate.standing(a)
	return r
}

// auditRow is the start of a row: who asked what, and why it asked.
func (t *turn) auditRow(ctx workflow.Context, id string, call protocol.ToolCall, c check, at time.Time, expires *time.Time) audit.Record {
	workflowID := workflow.GetInfo(ctx).WorkflowExecution.ID
	return audit.Record{
		ID:             id,
		Stage:          audit.StageAsked,
		ConversationID: t.conversationID,
		TurnID:         contract.TurnOfWorkflowID(workflowID),
		WorkflowID:     workflowID,
		Agent:          t.agent,
		ToolCallID:     call.ID,
		Tool:           call.Name,
		Arguments:      call.Arguments,
		Asked:          t.settings.asked(call.Name, c),
		Sender:         t.sender,
		RequestedAt:    at,
		ExpiresAt:      expires,
	}
}

// auditGranted is the row of a call that grant g answered without asking:
// the i-th call of the batch of the loop's current step (a model may repeat
// a call id).
func (t *turn) auditGranted(ctx workflow.Context, i int, call protocol.ToolCall, c check, g *contract.Grant) audit.Record {
	workflowID := workflow.GetInfo(ctx).WorkflowExecution.ID
	now := workflow.Now(ctx)
	id := "grant:" + workflowID + ":" + strconv.Itoa(t.step) + ":" + strconv.Itoa(i) + ":" + call.ID
	r := t.auditRow(ctx, id, call, c, now, nil)
	r.Decision, r.DecidedBy, r.Principal, r.Reason, r.Grant, r.DecidedAt = g.Decision, DecidedByGrant, g.By, reasonRemembered, g.ID, &now
	return r
}

// shadowRow puts what the shadow rule of p's tool would have done
// (vetting.Shadow) in the call's ledger row, once the gate met the call:
// the row of a call that asked, or that a grant or the sandbox answered,
// says it beside what happened; a call the policy let run unasked gets a
// row of its own (auditShadowed) when its shadow rule would have asked, so
// that every disagreement is in the ledger. Only a turn whose recorded
// rules hold a shadow rule has a verdict: its rows, and the writes of
// them, are its own (docs/versioning.md: a new field).
func (t *turn) shadowRow(ctx workflow.Context, p *passage) {
	v := p.vetting.Shadow
	if v == nil {
		return
	}
	if p.row == nil && p.route == routeNoRule && v.Required && t.auditing(ctx) {
		r := t.auditShadowed(ctx, p)
		p.row = &r
	}
	if p.row != nil {
		p.row.Shadow = v.word()
	}
}

// auditShadowed is the row of a call no rule asked about while its
// shadow rule would have: approved by the policy, with why in its reason.
func (t *turn) auditShadowed(ctx workflow.Context, p *passage) audit.Record {
	workflowID := workflow.GetInfo(ctx).WorkflowExecution.ID
	now := workflow.Now(ctx)
	id := "policy:" + workflowID + ":" + strconv.Itoa(t.step) + ":" + strconv.Itoa(p.index) + ":" + p.call.ID
	r := t.auditRow(ctx, id, p.call, p.vetting.Check, now, nil)
	r.Asked = ""
	r.Decision, r.DecidedBy, r.DecidedAt = protocol.DecisionApprove, DecidedByPolicy, &now
	r.Reason = "no rule asks about it; " + t.settings.shadowAsked(p.call.Name, p.vetting.Shadow) + " would have"
	return r
}

// word is what the ledger says of v (audit.Record.Shadow).
func (v *shadowCheck) word() string {
	switch {
	case v.Problem != "":
		return audit.ShadowCouldNotDecide
	case v.Required:
		return audit.ShadowWouldAsk
	default:
		return audit.ShadowWouldNotAsk
	}
}

// auditDecided is row r with a's decision, as soon as it is taken.
func auditDecided(r audit.Record, a *approval) audit.Record {
	r.Stage = audit.StageDecided
	decided := a.decidedAt
	r.Decision, r.DecidedBy, r.Principal, r.Role, r.Reason, r.DecidedAt = a.decision, a.decidedBy, a.by, a.role, a.reason, &decided
	r.OnBehalfOf = a.onBehalfOf
	if a.decision == protocol.DecisionApprove && a.arguments != "" {
		r.EditedArguments, r.EditDiff = a.arguments, audit.EditDiff(a.Call.Arguments, a.arguments)
	}
	return r
}

// DecidedBy of the ledger's rows of a vote and of an escalation step
// (auditNote): neither decides its call, whose own row says what did.
const (
	DecidedByVote       = audit.DecidedByVote
	DecidedByEscalation = audit.DecidedByEscalation
)

// auditNote is the row of a vote on a call, or of an escalation step it
// passed, made from the call's row r: a row of its own, keyed by the
// call's request id and the voter (vote:<request id>:<voter>) or the step
// (escalation:<request id>:<step>), final when written.
func auditNote(r audit.Record, n note) audit.Record {
	r.Stage = audit.StageDecided
	r.Preview, r.UserMessage, r.Sandbox, r.Shadow, r.Deciders, r.Votes = "", "", "", "", "", ""
	if v := n.vote; v != nil {
		at := v.At
		r.ID = "vote:" + r.ID + ":" + v.By
		r.Decision, r.DecidedBy, r.Principal, r.Role, r.Reason, r.DecidedAt = v.Decision, DecidedByVote, v.By, v.Role, v.Reason, &at
		r.OnBehalfOf = v.OnBehalfOf
		return r
	}
	at := n.at
	r.ID = "escalation:" + r.ID + ":" + strconv.Itoa(n.step)
	r.DecidedBy, r.DecidedAt = DecidedByEscalation, &at
	r.Reason = "escalation step " + strconv.Itoa(n.step) + ": no decision yet, so " + strings.Join(n.to, ", ") + " may decide too"
	if len(n.deciders) > 0 {
		r.Reason += " (deciders now " + strings.Join(n.deciders, ", ") + ")"
	}
	return r
}

// auditEnded completes row r with a's decision (nil for a grant's row,
// which has its decision already), what ran (ran, when the person edited
// the arguments: normalized as the tool ran them) and the tool's result.
func auditEnded(ctx workflow.Context, r audit.Record, a *approval, ran string, result protocol.ToolResult) audit.Record {
	if a != nil {
		r = auditDecided(r, a)
		if ran != "" {
			r.EditedArguments, r.EditDiff = ran, audit.EditDiff(a.Call.Arguments, ran)
		}
	}
	r.Stage = audit.StageEnded
	switch result.Status {
	case protocol.StatusDeclined, protocol.StatusTimeout:
		r.Outcome = audit.OutcomeNotRun
	case protocol.StatusError:
		r.Outcome = audit.OutcomeError
	default:
		r.Outcome = audit.OutcomeOK
	}
	finished := workflow.Now(ctx)
	r.Result, r.FinishedAt = result.Result, &finished
	return r
}

// shadowAsked says which shadow rule of tool would have asked, and why
// it could not decide when it could not.
func (s Settings) shadowAsked(tool string, v *shadowCheck) string {
	if v.Problem != "" {
		return v.Problem + ", so it"
	}
	return "shadow " + ruleWords(s.shadowRule(tool))
}

// ruleWords names rule as the ledger and a backtest's report do: "rule
// Bash: when …", "rule Write: always".
func ruleWords(rule *Rule) string {
	if rule.Require == RequireWhen {
		return "rule " + rule.Tool + ": when " + rule.When
	}
	return "rule " + rule.Tool + ": " + rule.Require
}

// asked says what made a call of tool ask, for the ledger: the rule, the
// policy's failure, or the default list of protected tools.
func (s Settings) asked(tool string, c check) string {
	if c.Problem != "" {
		return c.Problem
	}
	if rule := s.rule(tool); rule != nil {
		return ruleWords(rule) // a rule that asks requires always or when
	}
	return "default: " + tool + " is a protected tool"
}
