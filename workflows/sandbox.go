package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
)

// The Bash sandbox's place in a call's passage. A turn whose settings say
// protocol.SandboxPreview runs each Bash call that may ask in the sandbox
// first, over a copy-on-write view of the workspace (activities.SandboxBash),
// before the gate meets it: the approval request shows what the command
// did, an approve applies exactly those changes (activities.ApplySandbox,
// not a second run), a decline discards them, and an approve marked
// unconfined runs the command for real instead. Turns whose settings were
// recorded without the mode (every turn begun before it) issue none of
// these commands: the mode is recorded with the settings, so no patch is
// needed.

// sandboxRuns runs in the sandbox, at once, every Bash call of calls that
// may ask (previewed), when the turn's settings say so, and answers each
// call's run in its place (nil for the others). A run that could not be
// made says why (SandboxRun.Unavailable): an approve then runs the command
// as it would without a sandbox, and its preview says so.
func (t *turn) sandboxRuns(ctx workflow.Context, calls []protocol.ToolCall, vetted []vetting) []*protocol.SandboxRun {
	out := make([]*protocol.SandboxRun, len(calls))
	if t.settings.BashSandbox != protocol.SandboxPreview {
		return out
	}
	futures := make([]workflow.Future, len(calls))
	for i, c := range calls {
		if c.Name != protocol.ToolBash || !t.previewed(c, vetted[i]) {
			continue
		}
		opts := workflow.ActivityOptions{
			StartToCloseTimeout: t.settings.ToolTimeout,
			HeartbeatTimeout:    t.settings.ToolHeartbeatTimeout,
			// A run in the sandbox changes nothing outside it, but it may
			// take the command's whole time limit: one attempt, and a
			// failed one asks as without a sandbox.
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
			Summary:     "sandbox: " + callSummary(c),
		}
		futures[i] = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.SandboxBashActivity, activities.ToolInput{Call: c})
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		var run protocol.SandboxRun
		if err := f.Get(ctx, &run); err != nil {
			run = protocol.SandboxRun{Unavailable: "the sandbox run failed: " + activityErrorMessage(err)}
		}
		if !run.Ran() {
			run.Preview = fmt.Sprintf("(not run in the sandbox: %s; an approve runs the command unconfined, as without a sandbox)", run.Unavailable)
		}
		out[i] = &run
	}
	return out
}

// applySandbox applies what p's call changed in the sandbox to the
// workspace (the call's approve), carrying the ledger rows the turn owes
// like a tool does, and answers what the model reads: the command's
// output and exit status, and what was applied or refused.
func (t *turn) applySandbox(ctx workflow.Context, p *passage) activities.ToolOutput {
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: t.settings.ToolTimeout,
		HeartbeatTimeout:    t.settings.ToolHeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             "apply sandboxed: " + callSummary(p.call),
	}
	var out activities.ToolOutput
	rows := t.carried()
	in := activities.SandboxApplyInput{Call: p.call, Run: *p.sandbox, Ledger: rows}
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.ApplySandboxActivity, in).Get(ctx, &out)
	t.took(ctx, rows, out.LedgerRows)
	if err != nil {
		return activities.ToolOutput{
			Status: protocol.StatusError,
			Result: fmt.Sprintf("Error: the changes of %s did not finish applying and may be applied in part: %s", p.call.Name, activityErrorMessage(err)),
		}
	}
	return out
}

// sandboxed reports whether p's call runs by applying what it did in the
// sandbox: it ran there, and no person chose to run it unconfined.
func (p *passage) sandboxed() bool {
	return p.sandbox.Ran() && (p.approval == nil || !p.approval.unconfined)
}

// sandboxWord is what the ledger records of how p's call ran: its
// sandboxed changes applied, or unconfined by a person's choice; empty
// for a call that did not run in the sandbox.
func (p *passage) sandboxWord() string {
	switch {
	case !p.sandbox.Ran():
		return ""
	case p.sandboxed():
		return audit.SandboxApplied
	default:
		return audit.SandboxUnconfined
	}
}

// checkSandboxDecision refuses a decision that does not fit the way the
// call ran: unconfined is for a call that ran in the sandbox, and an
// edited command there was never run, so it can only be approved
// unconfined.
func checkSandboxDecision(a *approval, d protocol.ApprovalDecision) error {
	if d.Decision != protocol.DecisionApprove {
		return nil
	}
	switch {
	case d.Unconfined && !a.sandboxed:
		return rejection(protocol.RejectInvalid, fmt.Errorf("approval request %q: unconfined is for a call that ran in the sandbox, and this one did not", d.RequestID))
	case d.Arguments != "" && a.sandboxed && !d.Unconfined:
		return rejection(protocol.RejectInvalid, fmt.Errorf("approval request %q: the sandbox ran the command as the model wrote it, and an approve applies what that run changed: approve it as it is, or approve the edited command with unconfined to run it outside the sandbox", d.RequestID))
	}
	return nil
}

// reasonContained is the reason shown for a call that its sandboxed run
// answered (routeContained).
const reasonContained = "contained: its run in the sandbox touched no file the policy protects"

// DecidedBySandbox: a call's run in the sandbox touched no protected file,
// and Bash's rule lets such calls go on unasked (sandbox: auto).
const DecidedBySandbox = "sandbox"

// containedRuns says of each run of runs whether it may go on without a
// person: Bash's rule says sandbox: auto, the run held its changes, and
// none of them touches a file the policy protects (protects). The answers
// are recorded in one SideEffect, as the batch's checks are (vetBatch), so
// a replay, or a later policy engine, never changes which calls ask.
func (t *turn) containedRuns(ctx workflow.Context, runs []*protocol.SandboxRun) []bool {
	out := make([]bool, len(runs))
	if r := t.settings.rule(protocol.ToolBash); r == nil || r.Sandbox != policy.SandboxAuto ||
		!slices.ContainsFunc(runs, func(r *protocol.SandboxRun) bool { return r.Ran() }) {
		return out
	}
	contained := func() []bool {
		out := make([]bool, len(runs))
		for i, r := range runs {
			out[i] = r.Ran() && r.TooLarge == "" && !slices.ContainsFunc(r.Changes, t.protects)
		}
		return out
	}
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return contained() }).Get(&out); err != nil {
		panic(fmt.Errorf("containment of %d sandboxed runs: %w", len(runs), err))
	}
	return out
}

// protects reports whether the policy protects the file change c touches:
// whether a Write of its path (and of the path it was renamed from), with
// its new content, would ask. So the rules a policy has for files ("writes
// outside docs/ ask") hold for what a command really wrote, whatever the
// command's text said. A symbolic link that c makes is always protected:
// no Write makes one, and where it leads (a protected file, a folder
// outside the workspace) is what follows it later reads and writes, which
// no rule on its own path sees.
func (t *turn) protects(c protocol.FileChange) bool {
	if c.Kind == "symlink" && c.Op != protocol.ChangeDeleted {
		return true
	}
	paths := []string{c.Path}
	if c.From != "" {
		paths = append(paths, c.From)
	}
	content := ""
	if !c.Binary {
		content = string(c.Content)
	}
	for _, path := range paths {
		args, err := json.Marshal(map[string]string{"file_path": path, "content": content})
		if err != nil {
			return true
		}
		if t.settings.check(protocol.ToolCall{Name: protocol.ToolWrite, Arguments: string(args)}, nil).Required {
			return true
		}
	}
	return false
}

// passContained publishes that p's call goes on without a person (its
// sandboxed changes apply when it runs), and its ledger row.
func passContained(t *turn, ctx workflow.Context, _ *batch, p *passage) {
	t.gate.traceAnswer(ctx, p.call, DecidedBySandbox, nil)
	if t.auditing(ctx) {
		r := t.auditContained(ctx, p)
		p.row = &r
	}
	shown := p.sandbox.Shown()
	t.log.append(protocol.Event{Type: protocol.EventApprovalDecision, ToolCallID: p.call.ID, Decision: protocol.DecisionApprove,
		Reason: reasonContained, By: DecidedBySandbox, Sandbox: &shown})
}

// auditContained is the ledger's row of a call its sandboxed run
// answered: decided by the sandbox, with the run's change list as its
// preview.
func (t *turn) auditContained(ctx workflow.Context, p *passage) audit.Record {
	workflowID := workflow.GetInfo(ctx).WorkflowExecution.ID
	now := workflow.Now(ctx)
	id := "sandbox:" + workflowID + ":" + strconv.Itoa(t.step) + ":" + strconv.Itoa(p.index) + ":" + p.call.ID
	r := t.auditRow(ctx, id, p.call, p.vetting.Check, now, nil)
	r.Decision, r.DecidedBy, r.Reason, r.DecidedAt, r.Preview = protocol.DecisionApprove, DecidedBySandbox, reasonContained, &now, p.sandbox.Preview
	r.Sandbox = audit.SandboxPreview
	return r
}
