package workflows

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// turn is the state of one running model/tool loop: a ChatTurn, or a
// Subagent, which runs the same loop with its own prompt and tools.
type turn struct {
	settings Settings
	// boundedLedger, once asked, says whether the loop follows
	// patchLedgerBehind; then unwritten are the ledger's rows that a
	// write has not taken yet, and ledgerBehind is true when a write of
	// the current batch failed (writeAudit).
	boundedLedger *bool
	unwritten     []audit.Record
	ledgerBehind  bool
	// inLedger are the ids of the rows the ledger has taken a stage of
	// (carried).
	inLedger map[string]bool
	// conversationID, input (the messages the loop starts from), system,
	// tools, model and bypass are what this loop runs with.
	conversationID string
	input          []protocol.Message
	system         string
	tools          []protocol.ToolSpec
	model          string
	bypass         bool
	// frozen reports whether the gate is frozen now (Workflows.Admin);
	// only vetBatch's SideEffect reads it.
	frozen func() bool
	// sender is the principal who sent the message the loop runs for.
	sender string
	// depth is 0 for a turn and n for a subagent nested n deep.
	depth int
	// agent names the subagent this loop runs, empty for a turn;
	// userMessage is the user's message the turn runs for.
	agent       string
	userMessage string
	// clientTools are run by the client, not the worker.
	clientTools []protocol.ToolSpec

	log  eventLog
	gate *gate
	// messages are those this loop added to the conversation.
	messages []protocol.Message

	// step numbers the model calls; modelRunning is true while the model
	// activity of that step runs, and answer publishes its text.
	step         int
	modelRunning bool
	answer       answerStream
	// live names the model call that streams its token events by heartbeat
	// while it runs (patchTokensByHeartbeat), nil otherwise; the events
	// query says it, and the API reads them from the call's details.
	live *contract.LiveTokens

	interrupted     bool
	interruptReason string

	// compact is what the loop did to fit the model's context within
	// itself (before patchConversationCompaction); view what it does of
	// the conversation's compaction.
	compact compaction
	view    viewState

	subagents subagentState

	// grants are the conversation's remembered decisions, those made during
	// this loop included; newGrants only the latter; grantsUsed counts the
	// calls each grant decided in this loop and its subagents.
	grants, newGrants []contract.Grant
	grantsUsed        map[string]int
	// floats are the grants' arguments as turns before patchGrantNarrowed
	// compared them, by grant id, read once (sameArguments).
	floats map[string]string
	// cost is what the batch's rules and grant scopes may still cost
	// (policy.BatchCostLimit), spent as they are evaluated: only where
	// their answers are recorded, or in a turn that never records them,
	// the same on every replay.
	cost *policy.Budget

	// used is what this loop spent (its subagents' included), spent what
	// the conversation's earlier turns did; limits are the bounds as
	// people raised them, raised the conversation bounds raised here;
	// budgetAsks numbers the budget requests (budget.go).
	used, spent contract.Usage
	startedAt   time.Time
	limits      limits
	raised      contract.Budgets
	budgetAsks  int
}

// remember adds a grant made during this loop.
func (t *turn) remember(g contract.Grant) {
	t.grants = append(t.grants, g)
	t.newGrants = append(t.newGrants, g)
}

// ChatTurn runs one chat turn: it calls the model, passes the tool calls it
// asks for through the approval gate, runs the approved ones and answers the
// model, until the model answers without tool calls or MaxSteps is reached.
// Its events are served by the events query.
func (w *Workflows) ChatTurn(ctx workflow.Context, in TurnInput) (contract.TurnOutput, error) {
	var settings Settings
	if err := workflow.SideEffect(ctx, func(workflow.Context) any {
		return w.Settings.recorded()
	}).Get(&settings); err != nil {
		return contract.TurnOutput{}, fmt.Errorf("turn %d of conversation %s: settings: %w", in.Turn, in.ConversationID, err)
	}
	// Settings recorded by an older worker may lack fields added since.
	settings = settings.withDefaults()
	t := &turn{
		settings:       settings,
		conversationID: in.ConversationID,
		input:          in.Messages,
		system:         settings.SystemPrompt,
		tools:          append(settings.toolsFor(nil, 0), in.ClientTools...),
		clientTools:    in.ClientTools,
		model:          settings.Model,
		bypass:         in.BypassApproval,
		frozen:         w.Admin.Frozen,
		sender:         in.Sender,
		grants:         slices.Clone(in.Grants),
		spent:          in.Spent,
		limits:         limitsOf(settings.Budgets, in.Raised),
		startedAt:      workflow.Now(ctx),
	}
	t.view.offset, t.view.kept = in.Offset, in.Compaction
	if n := len(in.Messages); n > 0 && in.Messages[n-1].Role == protocol.RoleUser {
		t.userMessage = in.Messages[n-1].Content
	}
	if err := t.start(ctx); err != nil {
		return contract.TurnOutput{}, err
	}
	reason, text := t.run(ctx)
	t.flushAudit(ctx)
	t.finish(reason, text)
	t.used.Time = workflow.Now(ctx).Sub(t.startedAt)
	out := contract.TurnOutput{FinishReason: reason, Text: text, Messages: t.messages, Events: t.log.events, Grants: t.newGrants, GrantsUsed: t.grantsUsed,
		Usage: t.used, Raised: t.raised}
	if t.view.changed {
		out.Compaction = &t.view.kept
	}
	return out, nil
}

// start sets the loop's handlers and publishes turn_start.
func (t *turn) start(ctx workflow.Context) error {
	t.gate = newGate(ctx, &t.log, t.conversationID, t.sender, t.settings)
	t.gate.agent, t.gate.userMessage = t.agent, t.userMessage
	if err := t.setHandlers(ctx); err != nil {
		return err
	}
	info := workflow.GetInfo(ctx)
	t.log.append(protocol.Event{
		Type:           protocol.EventTurnStart,
		ConversationID: t.conversationID,
		TurnID:         info.WorkflowExecution.ID,
		WorkflowID:     info.WorkflowExecution.ID,
		RunID:          info.WorkflowExecution.RunID,
		Bypass:         t.bypass,
	})
	return nil
}

// finish publishes the finish event; a loop that ended in an error repeats
// the error's message there.
func (t *turn) finish(reason, text string) {
	e := protocol.Event{Type: protocol.EventFinish, Reason: reason, Text: text}
	if reason == protocol.FinishError || reason == protocol.FinishBudget {
		for i := len(t.log.events) - 1; i >= 0; i-- {
			if t.log.events[i].Type == protocol.EventError {
				e.Message = t.log.events[i].Message
				break
			}
		}
	}
	t.log.append(e)
}

// setHandlers registers the turn's query, update and signal handlers.
func (t *turn) setHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, contract.EventsQuery, t.queryEvents); err != nil {
		return fmt.Errorf("set %s query handler: %w", contract.EventsQuery, err)
	}
	if err := workflow.SetQueryHandler(ctx, contract.PendingQuery, t.queryPending); err != nil {
		return fmt.Errorf("set %s query handler: %w", contract.PendingQuery, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, contract.ApprovalUpdate, t.takeDecision,
		workflow.UpdateHandlerOptions{Validator: t.validateDecision},
	); err != nil {
		return fmt.Errorf("set %s update handler: %w", contract.ApprovalUpdate, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, contract.ApprovalsUpdate, t.takeBatch,
		workflow.UpdateHandlerOptions{Validator: t.validateBatch},
	); err != nil {
		return fmt.Errorf("set %s update handler: %w", contract.ApprovalsUpdate, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, contract.ClientToolResultUpdate, t.takeClientResult,
		workflow.UpdateHandlerOptions{Validator: t.validateClientResult},
	); err != nil {
		return fmt.Errorf("set %s update handler: %w", contract.ClientToolResultUpdate, err)
	}
	workflow.Go(ctx, t.receiveSignals)
	return nil
}

// queryEvents answers the events query: the events after req.After, and the
// model call that streams its tokens by heartbeat, if one does.
func (t *turn) queryEvents(req contract.EventsRequest) (contract.EventsResponse, error) {
	resp := t.log.after(req.After)
	resp.Live = t.live
	return resp, nil
}

// queryPending answers the pending query: the approvals the gate waits for.
func (t *turn) queryPending() ([]protocol.PendingApproval, error) {
	return t.gate.pending(), nil
}

// takeDecision is the approval Update's handler, after validateDecision.
func (t *turn) takeDecision(ctx workflow.Context, d protocol.ApprovalDecision) (protocol.ApprovalResult, error) {
	// The principal is the API's, from the caller's token, or whatever a
	// trusted Temporal client sent.
	if err := t.gate.take(ctx, d, d.Principal); err != nil {
		return protocol.ApprovalResult{}, err
	}
	// A vote that leaves its call waiting says so, and where the votes
	// stand.
	return t.gate.result(d.RequestID), nil
}

// takeBatch is the approvals Update's handler, after validateBatch.
func (t *turn) takeBatch(ctx workflow.Context, b protocol.ApprovalBatch) (protocol.ApprovalBatchResult, error) {
	// Validate the whole batch again, as take does one decision: a signal
	// or the timer may have decided one since the validator ran. Nothing
	// yields from here to the last take, so the batch is taken all or none.
	if err := t.validateBatch(ctx, b); err != nil {
		return protocol.ApprovalBatchResult{}, err
	}
	for _, d := range b.Decisions {
		if err := t.gate.take(ctx, d, d.Principal); err != nil {
			return protocol.ApprovalBatchResult{}, err // cannot happen: validated above
		}
	}
	return protocol.ApprovalBatchResult{Accepted: true, Decided: len(b.Decisions)}, nil
}

// validateClientResult is the client tool result Update's validator.
func (t *turn) validateClientResult(ctx workflow.Context, r contract.ClientToolResult) error {
	return t.gate.validateClientResult(ctx, r)
}

// takeClientResult is the client tool result Update's handler, after
// validateClientResult.
func (t *turn) takeClientResult(_ workflow.Context, r contract.ClientToolResult) error {
	t.gate.takeClientResult(r)
	return nil
}

// receiveSignals takes the turn's signals as they come, for as long as the
// turn runs.
func (t *turn) receiveSignals(ctx workflow.Context) {
	sel := workflow.NewSelector(ctx)
	onSignal(ctx, sel, contract.ApprovalSignal, t.approvalSignal)
	onSignal(ctx, sel, contract.TokensSignal, t.tokensSignal)
	onSignal(ctx, sel, contract.InterruptSignal, t.interruptSignal)
	onSignal(ctx, sel, contract.SubagentEventsSignal, t.subagentEventsSignal)
	for {
		sel.Select(ctx)
	}
}

// onSignal makes sel receive the named signal's values, each into a T that
// handle takes.
func onSignal[T any](ctx workflow.Context, sel workflow.Selector, name string, handle func(workflow.Context, T)) {
	sel.AddReceive(workflow.GetSignalChannel(ctx, name), func(c workflow.ReceiveChannel, _ bool) {
		var v T
		c.Receive(ctx, &v)
		handle(ctx, v)
	})
}

// approvalSignal takes a decision sent by the approval signal.
func (t *turn) approvalSignal(ctx workflow.Context, d protocol.ApprovalDecision) {
	// A signal comes from someone with Temporal access: trusted, and
	// recorded as who they say they are.
	d.Principal = cmp.Or(d.Principal, protocol.PrincipalTemporal)
	if err := t.gate.take(ctx, d, d.Principal); err != nil {
		workflow.GetLogger(ctx).Info("approval signal ignored", "requestId", d.RequestID, "error", err)
	}
}

// tokensSignal takes a batch of the model's tokens (onTokens).
func (t *turn) tokensSignal(_ workflow.Context, b activities.TokenBatch) {
	t.onTokens(b)
}

// interruptSignal interrupts the turn (interrupt).
func (t *turn) interruptSignal(ctx workflow.Context, i Interrupt) {
	t.interrupt(ctx, i.Reason)
}

// subagentEventsSignal takes a subagent's forwarded events
// (onSubagentEvents).
func (t *turn) subagentEventsSignal(_ workflow.Context, in SubagentEvents) {
	t.onSubagentEvents(in)
}

// onTokens publishes what a token batch adds to the answer, while the model
// call it belongs to runs; batches of an earlier step are dropped.
func (t *turn) onTokens(b activities.TokenBatch) {
	if !t.modelRunning || b.Step != t.step || t.live != nil {
		// A call that streams by heartbeat logs its text when it ends.
		return
	}
	if e, ok := t.answer.take(b); ok {
		t.log.append(e)
	}
}

// interrupt declines every pending approval and makes the turn finish at its
// next step.
func (t *turn) interrupt(ctx workflow.Context, reason string) {
	if reason == "" {
		reason = reasonNewMessage
	}
	t.interrupted, t.interruptReason = true, reason
	t.gate.declinePending(ctx, reason)
	t.subagents.interrupt(ctx, reason)
}

// run is the model/tool loop. It returns the finish reason and final text.
func (t *turn) run(ctx workflow.Context) (string, string) {
	for t.step < t.settings.MaxSteps {
		if t.interrupted {
			return protocol.FinishCancelled, ""
		}
		if !t.checkBudgets(ctx) {
			if ctx.Err() != nil || t.interrupted {
				return protocol.FinishCancelled, ""
			}
			return protocol.FinishBudget, ""
		}
		if t.outgrewHistory(ctx) {
			info := workflow.GetInfo(ctx)
			t.log.append(protocol.Event{Type: protocol.EventError, Message: fmt.Sprintf(
				"this turn's history has grown to %d events and %d MiB, near Temporal's limits, so it ends here; "+
					"everything it did is kept in the conversation: send a new message to go on",
				info.GetCurrentHistoryLength(), info.GetCurrentHistorySize()>>20)})
			return protocol.FinishError, ""
		}
		history, err := t.modelView(ctx)
		if err != nil {
			if isCancelled(ctx, err) {
				return protocol.FinishCancelled, ""
			}
			t.log.append(protocol.Event{Type: protocol.EventError, Message: "the conversation no longer fits the model's context, and it could not be summarized: " + activityErrorMessage(err)})
			return protocol.FinishError, ""
		}
		out, err := t.callModel(ctx, history)
		if err != nil && isContextTooLong(err) && t.askCompactionPath(ctx) == pathConversation {
			var failed string
			if out, failed, err = t.refit(ctx, history, err); failed != "" && !isCancelled(ctx, err) {
				t.log.append(protocol.Event{Type: protocol.EventError, Message: failed})
				return protocol.FinishError, ""
			}
		}
		if err != nil && isContextTooLong(err) && t.view.path == pathInTurn && !t.compact.retried {
			// The model's window is smaller than the budget: compact to
			// half of what it refused, and ask once more.
			requirePatched(ctx, t.settings, patchContextCompaction)
			t.compact.retried = true
			t.compact.budget = viewSize(history) / 2
			if history, err = t.modelView(ctx); err == nil {
				out, err = t.callModel(ctx, history)
			}
			if err != nil && isContextTooLong(err) {
				t.log.append(protocol.Event{Type: protocol.EventError, Message: "the conversation no longer fits the model's context, even compacted: " + activityErrorMessage(err) +
					". Start a new conversation, or lower TOLLGATE_CONTEXT_BUDGET for this model."})
				return protocol.FinishError, ""
			}
		}
		if err != nil {
			if isCancelled(ctx, err) {
				return protocol.FinishCancelled, ""
			}
			t.log.append(protocol.Event{Type: protocol.EventError, Message: modelErrorMessage(err)})
			return protocol.FinishError, ""
		}
		reply := protocol.Message{Role: protocol.RoleAssistant, Content: out.Content, ToolCalls: out.ToolCalls}
		t.messages = append(t.messages, reply)
		if len(out.ToolCalls) == 0 {
			return protocol.FinishStop, out.Content
		}
		results := t.runBatch(ctx, out.ToolCalls)
		for _, r := range results {
			t.messages = append(t.messages, protocol.Message{
				Role: protocol.RoleTool, ToolCallID: r.ID, Name: r.Name, Content: r.Result,
			})
		}
		if ctx.Err() != nil || t.interrupted {
			return protocol.FinishCancelled, ""
		}
	}
	return protocol.FinishMaxSteps, ""
}

// callModel runs one model activity and publishes its text as token events:
// what streamed in while it ran, then whatever the result adds.
func (t *turn) callModel(ctx workflow.Context, messages []protocol.Message) (activities.ModelOutput, error) {
	t.step++
	t.answer = answerStream{}
	t.modelRunning = true
	info := workflow.GetInfo(ctx)
	in := activities.ModelInput{
		Messages: messages,
		Tools:    t.tools,
		Model:    t.model,
		Tokens: &activities.TokenTarget{
			WorkflowID: info.WorkflowExecution.ID,
			RunID:      info.WorkflowExecution.RunID,
			Step:       t.step,
		},
		WantUsage: wantsUsage(t.settings.Budgets),
		Ledger:    t.carried(),
	}
	var out activities.ModelOutput
	opts := modelActivityOptions(t.settings)
	opts.Summary = fmt.Sprintf("model call %d", t.step)
	// A turn's answer streams in the call's heartbeat details, which cost
	// its history nothing; a subagent's keeps the tokens signal, as its
	// events reach the parent's stream only through the parent's log. A
	// turn of level 0 asks for patchTokensByHeartbeat (retired) here.
	byHeartbeat := t.agent == ""
	if byHeartbeat {
		requirePatched(ctx, t.settings, patchTokensByHeartbeat)
		in.Tokens.Heartbeat = true
		opts.ActivityID = fmt.Sprintf("model-%d", t.step)
		// The call's token events end in the log however it ends; a
		// cancelled call answers with those it made.
		opts.WaitForCancellation = true
		t.live = &contract.LiveTokens{ActivityID: opts.ActivityID, After: len(t.log.events)}
	}
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.ModelActivity, in).Get(ctx, &out)
	t.modelRunning = false
	t.took(ctx, in.Ledger, out.LedgerRows)
	if byHeartbeat {
		// Nothing else is logged while the call runs, so these take the
		// ids the API gave them from the details.
		t.live = nil
		pieces := out.Pieces
		if err != nil {
			pieces = tokenProgress(err)
		} else if p, ok := activities.NextPiece(activities.Spell(pieces), out.Content, true); ok {
			// An activity worker older than the patch sends no pieces.
			pieces = append(pieces, p)
		}
		for _, p := range pieces {
			t.log.append(protocol.Event{Type: protocol.EventToken, Data: p.Data, Reset: p.Reset})
		}
	}
	if err != nil {
		return out, err
	}
	t.used.Tokens += out.Tokens
	if byHeartbeat {
		return out, nil
	}
	if e, ok := t.answer.finish(out.Content); ok {
		t.log.append(e)
	}
	return out, nil
}

// tokenProgress returns the token events a model call that streamed by
// heartbeat made before it failed: its error's details, or the last details
// it recorded when it timed out.
func tokenProgress(err error) []protocol.TokenPiece {
	var (
		p        protocol.TokenProgress
		canceled *temporal.CanceledError
		timeout  *temporal.TimeoutError
		appErr   *temporal.ApplicationError
	)
	switch {
	case errors.As(err, &canceled) && canceled.HasDetails():
		_ = canceled.Details(&p)
	case errors.As(err, &timeout) && timeout.HasLastHeartbeatDetails():
		_ = timeout.LastHeartbeatDetails(&p)
	case errors.As(err, &appErr) && appErr.HasDetails():
		_ = appErr.Details(&p)
	}
	return p.Pieces
}

// modelActivityOptions retry 429s, 5xx and network errors with backoff; the
// model activity marks other 4xx answers non-retryable. The model activity
// heartbeats with every chunk, so the heartbeat timeout is the longest
// silence of the model server (or a lost worker) before an attempt is
// given up and retried.
func modelActivityOptions(s Settings) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		HeartbeatTimeout:    s.ModelHeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
			MaximumAttempts:    8,
		},
	}
}

// runBatch passes one batch of tool calls through the approval gate, runs
// the calls it lets through and returns one result per call, in the order
// the model made the calls. Each call's passage is one value (passage.go):
// the gate vets, routes and asks about every call in order, waits for the
// decisions, then each call in turn gets its verdict and runs.
func (t *turn) runBatch(ctx workflow.Context, calls []protocol.ToolCall) []protocol.ToolResult {
	t.log.append(protocol.Event{Type: protocol.EventToolCall, ToolCalls: calls})
	b := t.openBatch(ctx, calls)
	for _, p := range b.passages {
		t.route(ctx, b, p)
	}
	t.awaitDecisions(ctx, b)
	for _, p := range b.passages {
		if call, runs := t.verdict(ctx, b, p); runs {
			t.runCall(ctx, p, call)
		}
	}
	t.recordOutcomes(ctx, b)
	results := b.results()
	t.log.append(protocol.Event{Type: protocol.EventToolResult, ToolResults: results})
	t.gate.settleStatus(ctx)
	return results
}

// runCall runs the call of p that its verdict let run, as call: a
// subagent, a client's tool or the worker's; the model reads its result.
func (t *turn) runCall(ctx workflow.Context, p *passage, call protocol.ToolCall) {
	var out activities.ToolOutput
	switch {
	case call.Name == protocol.TaskTool:
		t.writeOwed(ctx)
		out = t.runSubagent(ctx, call)
	case offers(t.clientTools, call.Name):
		t.writeOwed(ctx)
		out = t.gate.runClientTool(ctx, call, p.vetting.Check.Timeout)
	case p.sandboxed():
		out = t.applySandbox(ctx, p)
	default:
		out = t.runTool(ctx, call)
	}
	if a := p.approval; a != nil && a.arguments != "" {
		out.Result = "The user edited the arguments before approving; the tool ran with: " + a.arguments + "\n" + out.Result
	}
	p.answer(out.Result, out.Status)
	t.used.ToolCalls++
}

// vetting is what a turn records of a call before the gate looks at it:
// why its arguments were refused, or what the policy says of it, and the
// workspace paths that symbolic links made other than the model wrote
// them.
type vetting struct {
	Refused string `json:"refused,omitempty"`
	Check   check  `json:"check"`
	// Paths are the workspace paths of the call that lead through a
	// symbolic link, each as the file it reaches, by argument name
	// (activities.ResolveArguments). Histories recorded before links were
	// resolved have none.
	Paths map[string]string `json:"paths,omitempty"`
	// Shadow is what the shadow rule of the call's tool says of it
	// (Settings.shadow): nil without one, and in histories recorded
	// before shadow rules.
	Shadow *shadowCheck `json:"shadow,omitempty"`
	// Frozen is true when the gate was frozen as the batch was vetted
	// (Workflows.Admin): the call asks where its rule protects it, and
	// no grant, sandbox: auto or bypassApproval answers it. False in
	// histories recorded before the freeze.
	Frozen bool `json:"frozen,omitempty"`
}

// vetBatch gives the calls of a batch as the gate, the policy, a grant and
// the tool will all see them, and what is known of each before the gate.
//
// Every call's arguments are normalized (activities.NormalizeArguments: one
// exact view, workspace paths relative to the workspace) before the policy
// reads them (patchNormalizedCalls, retired), and a call whose arguments
// are refused answers the model with why and never runs; the refusals and
// the checks are recorded in one SideEffect, so a replay (or a stricter
// normalizer, or a cel-go whose answer changed) never changes which calls
// ask or run. The normalized arguments themselves are made again on replay rather
// than recorded, keeping large arguments (a Write's content) out of
// history; a call that the recorded answer let through but today's
// normalizer refuses keeps its arguments as sent, and the tool, which
// normalizes too, refuses it. Turns recorded before the patch, which saw
// the arguments as the model sent them, no longer run.
//
// The SideEffect also follows the symbolic links of every workspace path
// (activities.ResolveArguments), so that the policy reads the file the
// tool will reach, and records the paths a link changed (vetting.Paths),
// which the view made again on replay takes. This reads the workspace from
// the workflow's worker, which production.md has share it with every
// worker of the task queue; it only lstats and reads links, and its answer
// is recorded, so a replay never reads the file system. A history recorded
// before links were resolved has no paths, and keeps the view it had.
//
// A tool's shadow rule is evaluated in the same SideEffect, on the same
// view, with a budget of its own (Settings.shadow), and recorded beside
// the check: only the ledger reads it (turn.shadowRow).
//
// Whether the gate is frozen is read in the same SideEffect (vetting.Frozen),
// so a batch vetted while frozen asks on every replay, whatever the
// control workflow says then; a turn that is not frozen records nothing
// more and issues no command more.
func (t *turn) vetBatch(ctx workflow.Context, calls []protocol.ToolCall) (out []protocol.ToolCall, vetted []vetting) {
	requirePatched(ctx, t.settings, patchNormalizedCalls)
	vet := func() []vetting {
		vetted := make([]vetting, len(calls))
		shadowCost := policy.NewBudget()
		frozen := t.frozen != nil && t.frozen()
		for i, call := range calls {
			vetted[i].Frozen = frozen
			if !offers(t.tools, call.Name) {
				continue // answered as an unknown tool
			}
			args, paths, err := t.resolve(call)
			if err != nil {
				vetted[i].Refused = err.Error()
				continue
			}
			call.Arguments = args
			vetted[i].Paths = paths
			vetted[i].Check = t.settings.check(call, t.cost)
			vetted[i].Shadow = t.settings.shadow(call, shadowCost)
		}
		return vetted
	}
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return vet() }).Get(&vetted); err != nil {
		// A SideEffect result only fails to decode on a corrupt history.
		panic(fmt.Errorf("vetting of %d calls: %w", len(calls), err))
	}
	out = slices.Clone(calls)
	for i := range out {
		if vetted[i].Refused != "" || !offers(t.tools, out[i].Name) {
			continue
		}
		if args, err := t.normalizeWith(out[i], vetted[i].Paths); err == nil {
			out[i].Arguments = args
		}
	}
	return out, vetted
}

// validateDecision says why the approval Update cannot take d now, or nil
// when it can: the gate's checks, then the edit's and the grant scope's.
func (t *turn) validateDecision(ctx workflow.Context, d protocol.ApprovalDecision) error {
	if err := t.gate.validate(ctx, d); err != nil {
		return err
	}
	if err := t.checkEdit(d); err != nil {
		return err
	}
	if err := checkSandboxDecision(t.gate.byID[d.RequestID], d); err != nil {
		return err
	}
	return checkGrantScope(d)
}

// validateBatch says why the approvals Update cannot take b now, or nil
// when it can take every decision: each passes validateDecision (so a
// rule's deciders and second person apply to each), none names a
// request twice, and there are 1 to MaxBatchDecisions of them.
func (t *turn) validateBatch(ctx workflow.Context, b protocol.ApprovalBatch) error {
	switch n := len(b.Decisions); {
	case n == 0:
		return rejection(protocol.RejectInvalid, errors.New("the batch holds no decisions"))
	case n > protocol.MaxBatchDecisions:
		return rejection(protocol.RejectInvalid, fmt.Errorf("the batch holds %d decisions, more than the limit of %d: send them in several", n, protocol.MaxBatchDecisions))
	}
	seen := make(map[string]bool, len(b.Decisions))
	for _, d := range b.Decisions {
		if seen[d.RequestID] {
			return batchRejection(d.RequestID, rejection(protocol.RejectInvalid, fmt.Errorf("approval request %q is decided twice in the batch", d.RequestID)))
		}
		seen[d.RequestID] = true
		if err := t.validateDecision(ctx, d); err != nil {
			return batchRejection(d.RequestID, err)
		}
	}
	return nil
}

// batchRejection makes err, the refusal of request id's decision, the
// refusal of its whole batch: the same reason (invalid for a decision
// that is not one), with the request's id in its details
// (contract.RejectedRequest) and its message.
func batchRejection(id string, err error) error {
	reason := contract.RejectionReason(err)
	if reason == "" {
		reason = protocol.RejectInvalid
	}
	msg := err.Error()
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		msg = app.Message()
	}
	if !strings.Contains(msg, id) {
		msg = fmt.Sprintf("approval request %q: %s", id, msg)
	}
	return temporal.NewApplicationErrorWithOptions(msg, reason, temporal.ApplicationErrorOptions{NonRetryable: true, Details: []any{id}})
}

// checkGrantScope refuses a decision whose grant scope (rememberWhen) is
// not an expression the policy's CEL can evaluate. Only the Update's
// validator asks it, which never runs on replay: a later cel-go that
// compiles differently never changes a recorded decision. A signal's bad
// scope makes a grant that decides nothing (its calls ask).
func checkGrantScope(d protocol.ApprovalDecision) error {
	if d.RememberWhen == "" {
		return nil
	}
	if err := policy.CheckWhen(d.RememberWhen); err != nil {
		return rejection(protocol.RejectInvalid, fmt.Errorf("rememberWhen %q: %w", d.RememberWhen, err))
	}
	return nil
}

// checkEdit refuses an approval whose edited arguments the tool would
// refuse, so the person hears why at once instead of the model later. Only
// the Update's validator asks it (a validator never runs on replay); a
// signal's edits are refused by the tool.
func (t *turn) checkEdit(d protocol.ApprovalDecision) error {
	a := t.gate.byID[d.RequestID]
	if d.Decision != protocol.DecisionApprove || d.Arguments == "" || a == nil {
		return nil
	}
	call := a.Call
	call.Arguments = d.Arguments
	if call.Name == protocol.BudgetTool {
		return checkBudgetEdit(a.Call.Arguments, d.Arguments)
	}
	_, paths, err := t.resolve(call)
	if err != nil {
		return rejection(protocol.RejectInvalid, fmt.Errorf("the edited arguments of %s: %w", call.Name, err))
	}
	// The edit runs as written (checked by no policy), and the tool
	// refuses a path that leads through a link: say so now.
	if len(paths) > 0 {
		name := slices.Sorted(maps.Keys(paths))[0]
		return rejection(protocol.RejectInvalid, fmt.Errorf("the edited arguments of %s: %s leads through a symbolic link to %q: name that file", call.Name, name, paths[name]))
	}
	return nil
}

// normalize gives call's arguments as NormalizeArguments makes them for the
// tool the loop offers under its name.
func (t *turn) normalize(call protocol.ToolCall) (string, error) {
	return t.normalizeWith(call, nil)
}

// normalizeWith is normalize with the workspace paths that links lead to
// (vetting.Paths) in place.
func (t *turn) normalizeWith(call protocol.ToolCall, paths map[string]string) (string, error) {
	spec, err := t.spec(call)
	if err != nil {
		return "", err
	}
	return activities.NormalizeArgumentsWith(spec, t.settings.WorkspaceRoots, call.Arguments, paths)
}

// resolve gives call's arguments as ResolveArguments makes them for the
// tool the loop offers under its name: it reads the workspace, and so runs
// only where its answer is recorded (vetBatch) or never replayed (an
// Update's validator).
func (t *turn) resolve(call protocol.ToolCall) (string, map[string]string, error) {
	spec, err := t.spec(call)
	if err != nil {
		return "", nil, err
	}
	return activities.ResolveArguments(spec, t.settings.WorkspaceRoots, call.Arguments)
}

// spec is the ToolSpec of the tool the loop offers under call's name.
func (t *turn) spec(call protocol.ToolCall) (protocol.ToolSpec, error) {
	i := slices.IndexFunc(t.tools, func(s protocol.ToolSpec) bool { return s.Name == call.Name })
	if i < 0 {
		return protocol.ToolSpec{}, fmt.Errorf("there is no tool named %q", call.Name)
	}
	return t.tools[i], nil
}

// previews asks the worker, in parallel, what each call of the batch that
// may wait for a person will do (activities.Tools.Preview), so the request
// shows it. An MCP tool's call has no preview beyond its arguments, which
// the request shows anyway, so it is not asked for one. A preview that
// fails is said to, and never holds up the request. A turn of level 0 asks
// for patchApprovalPreview (retired) at each batch with such a call.
//
// From patch level 1 on, a preview is a local activity: it only reads the
// workspace, is safe to repeat and takes milliseconds, and so it costs the
// turn a marker in the workflow task that publishes the request instead
// of an activity task and another workflow task. From level 3 on, one
// local activity previews the whole batch (levelOnePreview): one marker,
// not one a call.
func (t *turn) previews(ctx workflow.Context, calls []protocol.ToolCall, vetted []vetting) []string {
	out := make([]string, len(calls))
	var wanted []int
	for i, c := range calls {
		if t.previewed(c, vetted[i]) {
			wanted = append(wanted, i)
		}
	}
	if len(wanted) == 0 {
		return out
	}
	requirePatched(ctx, t.settings, patchApprovalPreview)
	if t.settings.PatchLevel >= levelOnePreview {
		t.previewTogether(ctx, calls, wanted, out)
	} else {
		t.previewEach(ctx, calls, wanted, out)
	}
	return out
}

// previewTimeout and previewAttempts bound a preview's local activity.
const previewTimeout, previewAttempts = 10 * time.Second, 2

// previewed reports whether call c, vetted as v, gets a preview: the
// policy may make it wait for a person, and its tool is the worker's own
// (not a subagent, a client tool or an MCP server's).
func (t *turn) previewed(c protocol.ToolCall, v vetting) bool {
	mayAsk := v.Refused == "" && v.Check.Required && !(t.bypass && !v.Check.Always && !v.Frozen)
	return mayAsk && c.Name != protocol.TaskTool && !offers(t.clientTools, c.Name) && offers(t.tools, c.Name) &&
		t.settings.mcpServerName(c.Name) == ""
}

// previewTogether previews the wanted calls in one local activity
// (levelOnePreview) and puts each preview in out.
func (t *turn) previewTogether(ctx workflow.Context, calls []protocol.ToolCall, wanted []int, out []string) {
	const timeout, attempts = previewTimeout, previewAttempts
	ins := make([]activities.ToolInput, len(wanted))
	for j, i := range wanted {
		ins[j] = activities.ToolInput{Call: calls[i]}
	}
	var previewed []protocol.ToolCall
	for _, i := range wanted {
		previewed = append(previewed, calls[i])
	}
	summary := batchSummary("preview: ", previewed)
	var got []string
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: timeout, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: attempts}, Summary: summary,
	}), activities.PreviewsActivity, ins).Get(ctx, &got)
	for j, i := range wanted {
		switch {
		case err != nil:
			out[i] = "(no preview: " + activityErrorMessage(err) + ")"
		case j < len(got):
			out[i] = got[j]
		}
	}
}

// previewEach previews each wanted call in an activity of its own (a local
// one from levelLocalPreviews on) and puts each preview in out.
func (t *turn) previewEach(ctx workflow.Context, calls []protocol.ToolCall, wanted []int, out []string) {
	const timeout, attempts = previewTimeout, previewAttempts
	futures := make([]workflow.Future, len(wanted))
	for j, i := range wanted {
		summary, in := "preview: "+callSummary(calls[i]), activities.ToolInput{Call: calls[i]}
		if t.settings.PatchLevel >= levelLocalPreviews {
			futures[j] = workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
				StartToCloseTimeout: timeout, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: attempts}, Summary: summary,
			}), activities.PreviewActivity, in)
			continue
		}
		futures[j] = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: timeout, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: attempts}, Summary: summary,
		}), activities.PreviewActivity, in)
	}
	for j, i := range wanted {
		if err := futures[j].Get(ctx, &out[i]); err != nil {
			out[i] = "(no preview: " + activityErrorMessage(err) + ")"
		}
	}
}

// outgrewHistory reports whether the turn should end before its history
// reaches Temporal's limits (51,200 events or 50 MB by default), which would
// terminate it without a finish event: the server suggests continuing as
// new past a share of them. Only a turn of level 0 that gets that far asks
// for patchHistoryLimit (retired).
func (t *turn) outgrewHistory(ctx workflow.Context) bool {
	if !workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
		return false
	}
	requirePatched(ctx, t.settings, patchHistoryLimit)
	return true
}

// strictGate asks for patchStrictGate (a bypassed turn still asks where a
// rule says always, and client tools follow the policy like the
// worker's), retired: every batch follows it. A turn of level 0 asks for
// it where it asked before, at a batch the patch changes, so its markers
// replay where they were.
func (t *turn) strictGate(ctx workflow.Context, calls []protocol.ToolCall) {
	if t.bypass || slices.ContainsFunc(calls, func(c protocol.ToolCall) bool { return offers(t.clientTools, c.Name) }) {
		requirePatched(ctx, t.settings, patchStrictGate)
	}
}

// runTool runs one tool activity. A tool never runs twice: a failure of the
// activity itself (a lost worker, a timeout) is answered as an error.
func (t *turn) runTool(ctx workflow.Context, call protocol.ToolCall) activities.ToolOutput {
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: t.settings.ToolTimeout,
		HeartbeatTimeout:    t.settings.ToolHeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             callSummary(call),
	}
	var out activities.ToolOutput
	rows := t.carried()
	if t.settings.PatchLevel >= levelFileToolsCarryNone && fileTool(call.Name) {
		// The model call after it carries them (levelFileToolsCarryNone).
		rows = nil
	}
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), call.Name, activities.ToolInput{Call: call, Ledger: rows}).Get(ctx, &out)
	t.took(ctx, rows, out.LedgerRows)
	if err != nil {
		return activities.ToolOutput{
			Status: protocol.StatusError,
			Result: fmt.Sprintf("Error: %s did not complete and may have run partly: %s", call.Name, activityErrorMessage(err)),
		}
	}
	return out
}

// Why a call did not run, for notRun.
const (
	notRunDeclined    = iota // a person declined it; the detail is their reason
	notRunRemembered         // a remembered decision declined it
	notRunTimeout            // no decision came in time
	notRunCancelled          // the turn was cancelled
	notRunInterrupted        // the turn was stopped; the detail says why (a new message)
)

// notRun is the tool result the model reads for a call that did not run:
// it says plainly that the call was not executed, why, and that it is not
// to be retried unasked (patchPlainNotRun, retired: a turn of level 0 asks
// for it at its first such call, and GetVersion answers later ones from
// what it recorded, with no new marker).
func (t *turn) notRun(ctx workflow.Context, why int, detail string) string {
	requirePatched(ctx, t.settings, patchPlainNotRun)
	switch why {
	case notRunTimeout:
		return protocol.NoDecision + protocol.DoNotRetry
	case notRunRemembered:
		return protocol.NotExecuted + "a person declined calls like this one earlier in this conversation, and that decision stands." + protocol.DoNotRetry
	case notRunCancelled:
		return protocol.NotExecuted + "the turn was cancelled before this call ran." + protocol.DoNotRetry
	case notRunInterrupted:
		if detail == reasonNewMessage || detail == "" {
			return protocol.NotExecuted + "the user sent a new message before this call was decided; answer that instead." + protocol.DoNotRetry
		}
		return protocol.NotExecuted + "the turn was stopped before this call ran (" + detail + ")." + protocol.DoNotRetry
	default:
		out := protocol.PersonDeclined + protocol.DoNotRetry
		if detail != "" {
			out += protocol.TheirReason + detail
		}
		return out
	}
}

// declined is the tool result of a client tool its client declined (and
// was that of every declined call before patchPlainNotRun).
func declined(reason string) string {
	if reason == "" {
		return protocol.DeclinedResponse
	}
	return protocol.DeclinedResponse + " Reason: " + reason
}

// isCancelled reports whether err comes from the cancellation of ctx.
func isCancelled(ctx workflow.Context, err error) bool {
	var canceled *temporal.CanceledError
	return errors.As(err, &canceled) || ctx.Err() != nil
}

// modelErrorMessage says why the model call failed, without the SDK's
// wrapping.
func modelErrorMessage(err error) string {
	return "the model call failed: " + activityErrorMessage(err)
}

func activityErrorMessage(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Error()
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		return "timed out (" + timeoutErr.TimeoutType().String() + ")"
	}
	return err.Error()
}
