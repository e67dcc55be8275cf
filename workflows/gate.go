package workflows

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/internal/workflowtrace"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// Reasons for declines that no person typed.
const (
	reasonCancelled  = "the turn was cancelled"
	reasonTimeout    = "no decision came in time"
	reasonNewMessage = "the user sent a new message"
)

// approval is one call waiting for a person's decision.
type approval struct {
	RequestID   string
	Call        protocol.ToolCall
	RequestedAt time.Time
	ExpiresAt   time.Time
	// Preview says what the call will do, as the worker read it.
	Preview string

	decided   bool
	decision  string
	reason    string
	arguments string
	decidedAt time.Time
	// by names who decided: the API's principal, a signal's, or none;
	// role is the role of the API token they decided with, if any, and
	// teams its team roles (for a grant from this decision);
	// onBehalfOf whom by stood in for, if anyone.
	by, role, onBehalfOf string
	teams                []string
	// remember and sameArguments ask for a grant from this decision;
	// rememberFor, rememberUses and rememberWhen limit it.
	remember      bool
	sameArguments bool
	rememberFor   time.Duration
	rememberUses  int
	rememberWhen  string
	// decidedBy says what decided: one of the DecidedBy values.
	decidedBy string
	// sandboxed is true of a call that ran in the Bash sandbox before it
	// asked; unconfined of its approve when the person chose to run the
	// command for real instead of applying what it changed there.
	sandboxed, unconfined bool
	// votes are the votes cast so far on a request of a rule with a
	// quorum, in order; escalated who its rule's escalation steps have
	// added to its deciders so far.
	votes     []protocol.Vote
	escalated []string
}

// note is what happened to a request short of its decision, for the
// ledger: a vote cast (vote), or an escalation step passed (step, from 1,
// at at) that added to to who may decide, now deciders.
type note struct {
	a    *approval
	vote *protocol.Vote
	step int
	at   time.Time
	// to and deciders are the step's, and who may decide after it (empty
	// when anyone may).
	to, deciders []string
}

// gate is the approval gate of one workflow: the requests it has published,
// the decisions that came in, and a channel that wakes the waiting batch.
type gate struct {
	workflowID     string
	conversationID string
	log            *eventLog
	// all holds every request of the workflow in the order it was made;
	// byID finds one by id (never ranged over).
	all  []*approval
	byID map[string]*approval
	// clients are the calls of client-executed tools, in order.
	clients []*clientCall
	// batchIDs are the request ids of the batch the loop runs now, once
	// made (batchRequestID).
	batchIDs []string
	wake     workflow.Channel
	upserts  bool
	status   bool
	notify   bool
	// settings hold the policy's rules, which may say who decides; sender
	// is the principal who sent the message the loop runs for.
	settings Settings
	sender   string
	// agent names the subagent whose gate this is, empty for a turn's;
	// userMessage is the user's message the turn runs for.
	agent, userMessage string
	// notes are the votes and escalations since the wait last handed them
	// on (await).
	notes []note
	// span is the workflow run's span, the parent of the approval spans
	// (tracing.go); the zero Span when the worker does not trace.
	span workflowtrace.Span
	// statusOwed says a wait that ended left the search attributes to
	// settleStatus (await's later): levelStatusOffPath.
	statusOwed bool
}

func newGate(ctx workflow.Context, log *eventLog, conversationID, sender string, settings Settings) *gate {
	return &gate{
		workflowID:     workflow.GetInfo(ctx).WorkflowExecution.ID,
		conversationID: conversationID,
		log:            log,
		byID:           map[string]*approval{},
		wake:           workflow.NewBufferedChannel(ctx, 1),
		upserts:        settings.SearchAttributes,
		status:         settings.SearchAttributes && settings.StatusAttribute,
		notify:         settings.Notify,
		settings:       settings,
		sender:         sender,
		span:           workflowtrace.SpanOf(ctx),
	}
}

// request publishes an approval request for call and returns it. Its id
// names the workflow, so the API can find it from the id alone, and is bound
// to the call (see boundRequestID); it is made once and recorded in history.
func (g *gate) request(ctx workflow.Context, call protocol.ToolCall, timeout time.Duration, note, preview string) *approval {
	return g.requestAs(ctx, g.newRequestID(ctx, call), call, timeout, note, preview, nil)
}

// requestAs is request with the request's id made already (batchRequestID),
// for a call that did what sandbox says in the Bash sandbox (nil when it
// did not run there).
func (g *gate) requestAs(ctx workflow.Context, id string, call protocol.ToolCall, timeout time.Duration, note, preview string, sandbox *protocol.SandboxRun) *approval {
	now := workflow.Now(ctx)
	a := &approval{
		RequestID:   id,
		Call:        call,
		RequestedAt: now,
		ExpiresAt:   now.Add(timeout),
		Preview:     preview,
		sandboxed:   sandbox.Ran(),
	}
	var shown *protocol.SandboxRun
	if sandbox != nil {
		s := sandbox.Shown()
		shown = &s
	}
	g.all = append(g.all, a)
	g.byID[a.RequestID] = a
	expires := a.ExpiresAt
	rule := g.ruleOf(a)
	g.log.append(protocol.Event{
		Type:       protocol.EventApprovalRequest,
		RequestID:  a.RequestID,
		ToolCallID: call.ID,
		ToolName:   call.Name,
		Arguments:  call.Arguments,
		WorkflowID: g.workflowID,
		ExpiresAt:  &expires,
		Reason:     note,
		Preview:    preview,
		Sandbox:    shown,
		Kind:       requestKind(call),
		Deciders:   deciders(rule),
		Votes:      g.votesOf(rule, a),
	})
	countRequest(ctx)
	g.sendNotice(ctx, a, activities.NoticeApprovalRequest)
	return a
}

// requestKind is the kind of a request about call: KindBudget for a
// budget's, empty for a tool call's.
func requestKind(call protocol.ToolCall) string {
	if call.Name == protocol.BudgetTool {
		return protocol.KindBudget
	}
	return ""
}

// newRequestID makes the id of a request about call, an approval's or a
// client tool's (see boundRequestID), once. The whole id is recorded, not
// its secret, so a replay under another workflow ID (the replayer's) still
// matches recorded decisions.
func (g *gate) newRequestID(ctx workflow.Context, call protocol.ToolCall) string {
	var id string
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		secret := make([]byte, requestSecretBytes)
		_, _ = rand.Read(secret) // crypto/rand.Read never fails on supported platforms
		return boundRequestID(g.workflowID, secret, call)
	}).Get(&id)
	if err != nil {
		// A SideEffect result only fails to decode on a corrupt history.
		panic(fmt.Errorf("request id for call %s: %w", call.ID, err))
	}
	return id
}

// batchRequestID is the id of the request about calls[i], the i-th call of
// the batch the loop runs now (levelBatchIDs): the ids of every call of the
// batch are made, and recorded, in one SideEffect at its first request,
// not one a request; a call that does not ask leaves its id unused.
// newBatch forgets the last batch's.
func (g *gate) batchRequestID(ctx workflow.Context, calls []protocol.ToolCall, i int) string {
	if g.batchIDs == nil {
		err := workflow.SideEffect(ctx, func(workflow.Context) any {
			ids := make([]string, len(calls))
			for j, call := range calls {
				secret := make([]byte, requestSecretBytes)
				_, _ = rand.Read(secret) // crypto/rand.Read never fails on supported platforms
				ids[j] = boundRequestID(g.workflowID, secret, call)
			}
			return ids
		}).Get(&g.batchIDs)
		if err != nil || len(g.batchIDs) != len(calls) {
			// A SideEffect result only fails to decode on a corrupt history.
			panic(fmt.Errorf("request ids for a batch of %d calls: %v (%d ids)", len(calls), err, len(g.batchIDs)))
		}
	}
	return g.batchIDs[i]
}

// newBatch forgets the request ids of the last batch (batchRequestID).
func (g *gate) newBatch() { g.batchIDs = nil }

// requestSecretBytes is the size of the random secret in a request id.
const requestSecretBytes = 16

// boundRequestID makes the id of the approval request for call in workflow
// workflowID: the workflow's ID, then hex(sha256(secret || call ID ||
// sha256(arguments))) cut to 128 bits. The secret makes the id unguessable
// and unique even when a model repeats a call id with the same arguments;
// the call id and the digest of its arguments make it name one call, the
// one a person is shown. The secret and the digest have fixed sizes, so the
// call id between them is never ambiguous.
func boundRequestID(workflowID string, secret []byte, call protocol.ToolCall) string {
	args := sha256.Sum256([]byte(call.Arguments))
	h := sha256.New()
	h.Write(secret)
	h.Write([]byte(call.ID))
	h.Write(args[:])
	return contract.NewRequestID(workflowID, hex.EncodeToString(h.Sum(nil))[:2*requestSecretBytes])
}

// validate says why decision d cannot be taken now, or nil when it can.
func (g *gate) validate(ctx workflow.Context, d protocol.ApprovalDecision) error {
	a := g.byID[d.RequestID]
	switch {
	case a == nil:
		return rejection(protocol.RejectUnknown, fmt.Errorf("approval request %q: %w", d.RequestID, errUnknownRequest))
	case a.decided && a.decidedBy == DecidedByTimer:
		// Its time ran out: that is what a late decider is told, not that
		// someone decided it (the timer decides it as a timeout).
		return rejection(protocol.RejectExpired, fmt.Errorf("approval request %q: %w", d.RequestID, errExpired))
	case a.decided:
		return rejection(protocol.RejectDecided, fmt.Errorf("approval request %q: %w", d.RequestID, errAlreadyDecided))
	case !workflow.Now(ctx).Before(a.ExpiresAt):
		return rejection(protocol.RejectExpired, fmt.Errorf("approval request %q: %w", d.RequestID, errExpired))
	}
	// Rules recorded before deciders existed name none: nothing changes
	// for them on replay.
	rule := g.ruleOf(a)
	if err := rule.MayDecideFor(d.Principal, d.Role, d.Teams, d.OnBehalfOf, g.sender); err != nil {
		return rejection(protocol.RejectForbidden, fmt.Errorf("approval request %q: %w", d.RequestID, err))
	}
	if rule != nil && rule.SecondPerson && g.settings.LinksNotSecondPerson && d.Principal == protocol.PrincipalLink {
		return rejection(protocol.RejectForbidden, fmt.Errorf("approval request %q: %s calls need a second person, and a signed link names no one, so it cannot show its holder did not send the message: decide with an API token", d.RequestID, a.Call.Name))
	}
	if err := d.Check(); err != nil {
		return fmt.Errorf("approval request %q: %w", d.RequestID, err)
	}
	if rule.Voting() {
		if err := checkVote(a, d); err != nil {
			return err
		}
	}
	return nil
}

// ruleOf is the rule of a's tool as it stands now: with the deciders its
// escalation steps have added (nil when the tool has none).
func (g *gate) ruleOf(a *approval) *Rule {
	return g.settings.rule(a.Call.Name).WithDeciders(a.escalated)
}

// voterOf is who casts decision d as a vote: a principal votes once on a
// request.
func voterOf(d protocol.ApprovalDecision) string {
	return d.Principal
}

// checkVote says why d cannot be a vote on a, a request of a rule with a
// quorum: it names nobody (no principal, a signed link's, or a signal's
// that named none: whoever holds a link may also hold a token, and would
// count twice), its voter has voted, or it asks for what votes cannot
// share (edited arguments, a grant, an unconfined run).
func checkVote(a *approval, d protocol.ApprovalDecision) error {
	voter := voterOf(d)
	reason, err := "", error(nil)
	switch {
	case voter == "", voter == protocol.PrincipalLink, voter == protocol.PrincipalTemporal:
		reason, err = protocol.RejectForbidden, fmt.Errorf("its rule needs a quorum of votes from distinct people, and this one names nobody (%s): vote with an API token", cmp.Or(voter, "no principal"))
	case slices.ContainsFunc(a.votes, func(v protocol.Vote) bool { return v.Voted(voter) }):
		reason, err = protocol.RejectVoted, fmt.Errorf("%q has voted on it already: its rule needs votes from distinct people", voter)
	case slices.ContainsFunc(a.votes, func(v protocol.Vote) bool { return v.Voted(d.OnBehalfOf) }):
		reason, err = protocol.RejectVoted, fmt.Errorf("%q, for whom %q stands in, has voted on it already: its rule needs votes from distinct people", d.OnBehalfOf, voter)
	case d.Arguments != "":
		reason, err = protocol.RejectInvalid, errors.New("its rule needs a quorum, and votes must be on the same arguments: edited arguments are refused (decline, and ask the model for the call you want)")
	case d.Remember != "":
		reason, err = protocol.RejectInvalid, errors.New("its rule needs a quorum, and a remembered decision never stands in for one: vote without remember")
	case d.Unconfined:
		reason, err = protocol.RejectInvalid, errors.New("its rule needs a quorum, and votes must be on the same run: unconfined is refused")
	default:
		return nil
	}
	return rejection(reason, fmt.Errorf("approval request %q: %w", a.RequestID, err))
}

// deciders are who may decide a request now under rule (ruleOf), for its
// events and the pending query: nil when anyone may.
func deciders(rule *Rule) []string {
	if rule == nil {
		return nil
	}
	return slices.Clone(rule.Deciders)
}

// votesOf is where the voting on a stands, nil unless rule votes.
func (g *gate) votesOf(rule *Rule, a *approval) *protocol.Votes {
	if !rule.Voting() {
		return nil
	}
	approvals, declines := rule.Needed()
	v := &protocol.Votes{Quorum: approvals, Declines: declines, Cast: slices.Clone(a.votes)}
	if v.Cast == nil {
		v.Cast = []protocol.Vote{}
	}
	for _, d := range rule.Deciders {
		if rule.SecondPerson && d == g.sender {
			continue // the sender may not vote on what their message led to
		}
		if !slices.ContainsFunc(a.votes, func(v protocol.Vote) bool { return v.Voted(d) }) {
			v.MayVote = append(v.MayVote, d)
		}
	}
	return v
}

// standing is what the ledger's row of a says of who may decide it now
// and where its voting stands (audit.Record.Deciders and Votes), as the
// pending query says them: JSON, each empty when there is nothing to say.
func (g *gate) standing(a *approval) (deciderList, votes string) {
	rule := g.ruleOf(a)
	if d := deciders(rule); len(d) > 0 {
		b, _ := json.Marshal(d) // strings: cannot fail
		deciderList = string(b)
	}
	if v := g.votesOf(rule, a); v != nil {
		b, _ := json.Marshal(v) // strings, numbers and times: cannot fail
		votes = string(b)
	}
	return deciderList, votes
}

// vote casts d, validated, as a vote on a, and decides a once the votes
// do: a quorum of approvals approves, the rule's declines decline.
func (g *gate) vote(ctx workflow.Context, a *approval, rule *Rule, d protocol.ApprovalDecision) {
	v := protocol.Vote{By: voterOf(d), Role: d.Role, OnBehalfOf: d.OnBehalfOf, Decision: d.Decision, Reason: d.Reason, At: workflow.Now(ctx)}
	a.votes = append(a.votes, v)
	votes := g.votesOf(rule, a)
	g.log.append(protocol.Event{
		Type:       protocol.EventApprovalVote,
		RequestID:  a.RequestID,
		ToolCallID: a.Call.ID,
		Decision:   v.Decision,
		Reason:     v.Reason,
		By:         v.By,
		Role:       v.Role,
		OnBehalfOf: v.OnBehalfOf,
		Votes:      votes,
	})
	g.notes = append(g.notes, note{a: a, vote: &v})
	a.role, a.teams, a.onBehalfOf = d.Role, d.Teams, d.OnBehalfOf
	switch {
	case votes.Approvals() >= votes.Quorum:
		g.decide(ctx, a, protocol.DecisionApprove, d.Reason, "", v.By, DecidedByPerson)
	case votes.Declined() >= votes.Declines:
		g.decide(ctx, a, protocol.DecisionDecline, d.Reason, "", v.By, DecidedByPerson)
	default:
		// The wait hands the vote to the ledger.
		g.wake.SendAsync(struct{}{})
	}
}

// result answers the decision on request id just taken: accepted, and
// for a vote that did not decide it, pending with where the votes stand.
func (g *gate) result(id string) protocol.ApprovalResult {
	a := g.byID[id]
	if a == nil || a.decided || len(a.votes) == 0 {
		return protocol.ApprovalResult{Accepted: true}
	}
	v := g.votesOf(g.ruleOf(a), a)
	return protocol.ApprovalResult{Accepted: true, Pending: true, Votes: v,
		Message: fmt.Sprintf("vote recorded, %d of %d approvals (%d of %d declines); the call waits for more votes", v.Approvals(), v.Quorum, v.Declined(), v.Declines)}
}

// rejection makes err the validator's answer for reason.
func rejection(reason string, err error) error {
	return temporal.NewApplicationErrorWithOptions(err.Error(), reason, temporal.ApplicationErrorOptions{NonRetryable: true, Cause: err})
}

var (
	errUnknownRequest = errors.New("unknown request")
	errAlreadyDecided = errors.New("already decided")
	errExpired        = errors.New("expired")
	errUnknownGrant   = errors.New("unknown grant")
)

// take records decision d, made by by, when it can still be taken, and
// otherwise says why not. It validates again because an Update's validator
// and its handler do not run at the same instant: a signal, or the timer,
// may decide the request in between, and then the Update must not say it
// was taken.
func (g *gate) take(ctx workflow.Context, d protocol.ApprovalDecision, by string) error {
	if err := g.validate(ctx, d); err != nil {
		return err
	}
	a := g.byID[d.RequestID]
	// A signal's decision reaches here unvalidated: unconfined, and an
	// edit of a sandboxed command, must fit the way the call ran for it
	// as for the Update.
	if err := checkSandboxDecision(a, d); err != nil {
		return err
	}
	a.remember, a.sameArguments = d.Remember == protocol.RememberConversation, d.SameArguments
	// Check refused a bad duration already (validate asks it).
	a.rememberFor, _ = d.RememberDuration()
	a.rememberUses, a.rememberWhen = d.RememberUses, d.RememberWhen
	if rule := g.ruleOf(a); rule.Voting() {
		g.vote(ctx, a, rule, d)
		return nil
	}
	a.role, a.teams, a.onBehalfOf = d.Role, d.Teams, d.OnBehalfOf
	a.unconfined = d.Unconfined && d.Decision == protocol.DecisionApprove
	g.decide(ctx, a, d.Decision, d.Reason, d.Arguments, by, DecidedByPerson)
	return nil
}

// decide records the decision on a, made by by (decidedBy says what
// answered), publishes it and wakes the batch. The first decision wins; any
// later one is dropped.
func (g *gate) decide(ctx workflow.Context, a *approval, decision, reason, arguments, by, decidedBy string) {
	if a.decided {
		return
	}
	a.decided, a.decision, a.reason, a.decidedAt, a.by, a.decidedBy = true, decision, reason, workflow.Now(ctx), by, decidedBy
	if decision == protocol.DecisionApprove {
		a.arguments = arguments
	}
	g.log.append(protocol.Event{
		Type:       protocol.EventApprovalDecision,
		RequestID:  a.RequestID,
		ToolCallID: a.Call.ID,
		Decision:   decision,
		Reason:     reason,
		By:         by,
		Role:       a.role,
		OnBehalfOf: a.onBehalfOf,
		Unconfined: a.unconfined,
		Votes:      g.votesOf(g.ruleOf(a), a),
	})
	countDecision(ctx, decision, a.RequestedAt)
	g.traceDecision(ctx, a, decidedBy)
	// The Web UI stops listing the call at once, not when the batch ends.
	workflow.SetCurrentDetails(ctx, g.details())
	g.wake.SendAsync(struct{}{})
}

// declinePending declines every undecided request with reason, and every
// client tool call still waiting for its answer.
func (g *gate) declinePending(ctx workflow.Context, reason string) {
	for _, a := range g.all {
		if !a.decided {
			g.decide(ctx, a, protocol.DecisionDecline, reason, "", "", DecidedByTurn)
		}
	}
	for _, cc := range g.clients {
		if !cc.answered {
			cc.answered, cc.declined = true, reason
			g.wake.SendAsync(struct{}{})
		}
	}
}

// pending lists the requests still waiting, in the order they were made.
func (g *gate) pending() []protocol.PendingApproval {
	out := []protocol.PendingApproval{}
	for _, a := range g.all {
		if a.decided {
			continue
		}
		out = append(out, protocol.PendingApproval{
			RequestID:      a.RequestID,
			WorkflowID:     g.workflowID,
			TurnID:         contract.TurnOfWorkflowID(g.workflowID),
			ConversationID: g.conversationID,
			ToolCallID:     a.Call.ID,
			ToolName:       a.Call.Name,
			Arguments:      a.Call.Arguments,
			RequestedAt:    a.RequestedAt,
			ExpiresAt:      a.ExpiresAt,
			Preview:        a.Preview,
			Subagent:       g.agent,
			UserMessage:    text.Truncate(g.userMessage, pendingMessageBytes),
			Sandboxed:      a.sandboxed,
			Deciders:       deciders(g.ruleOf(a)),
			Votes:          g.votesOf(g.ruleOf(a), a),
		})
	}
	return out
}

// pendingMessageBytes bounds the user's message a pending approval shows,
// in the pending query and in the ledger's row (GET /approvals reads either).
const pendingMessageBytes = audit.UserMessageBytes

// await blocks until every request in reqs is decided: by a person, by its
// own durable timer (timeout), or by cancellation of ctx (decline). After
// each wake, onNews (when set) gets the requests decided since the last,
// and the votes cast and escalation steps passed (notes).
func (g *gate) await(ctx workflow.Context, reqs []*approval, onNews func([]*approval, []note), later bool) {
	g.upsertPending(ctx)
	defer g.waitEnded(ctx, later)

	timerCtx, cancelTimers := workflow.WithCancel(ctx)
	defer cancelTimers()
	sel := workflow.NewSelector(ctx)
	oneTimer := g.settings.PatchLevel >= levelOneTimer
	var expire func()
	if oneTimer {
		expire = g.expireTogether(ctx, timerCtx, sel, reqs)
		expire()
	}
	for _, a := range reqs {
		if !oneTimer {
			g.expireAlone(ctx, timerCtx, sel, a)
		}
		if g.notify {
			g.remind(ctx, timerCtx, sel, a)
		}
		// Only a rule recorded with escalation steps has timers for them.
		g.escalations(ctx, timerCtx, sel, a)
	}
	sel.AddReceive(g.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
	cancelled := false
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { cancelled = true })
	told := make([]bool, len(reqs))
	for !allDecided(reqs) {
		sel.Select(ctx)
		if cancelled {
			g.declinePending(ctx, reasonCancelled)
		}
		news, notes := newlyDecided(reqs, told), g.takeNotes()
		if onNews != nil && (len(news) > 0 || len(notes) > 0) {
			onNews(news, notes)
		}
	}
	// Votes cast before the wait began, when they decided every request
	// at once (only a rule with a quorum has any).
	if notes := g.takeNotes(); onNews != nil && len(notes) > 0 {
		onNews(nil, notes)
	}
}

// waitEnded brings the search attributes up to date when a wait ends, or,
// later, only the workflow's current details (which issue no command: the
// Web UI's page of the turn follows the decision at once) and owes the
// upsert to settleStatus. An upsert is a visibility write on the server,
// and on the dev server, whose SQLite takes one statement at a time, that
// write held up the tool's completion behind it (levelStatusOffPath).
func (g *gate) waitEnded(ctx workflow.Context, later bool) {
	if !later {
		g.upsertPending(ctx)
		return
	}
	workflow.SetCurrentDetails(ctx, g.details())
	g.statusOwed = true
}

// settleStatus makes the upsert that waitEnded owed, if it did.
func (g *gate) settleStatus(ctx workflow.Context) {
	if g.statusOwed {
		g.statusOwed = false
		g.upsertPending(ctx)
	}
}

// takeNotes hands on the notes since the last call.
func (g *gate) takeNotes() []note {
	notes := g.notes
	g.notes = nil
	return notes
}

// escalations start the timers of the escalation steps of a's rule, one
// a step, each at its share of a's time: when one fires and a still
// waits, the step's principals and roles may decide too (ruleOf), are
// told (a notice), and the stream and the ledger say so.
func (g *gate) escalations(ctx, timerCtx workflow.Context, sel workflow.Selector, a *approval) {
	rule := g.settings.rule(a.Call.Name)
	if rule == nil {
		return
	}
	timeout := a.ExpiresAt.Sub(a.RequestedAt)
	for i, step := range rule.Escalate {
		at := a.RequestedAt.Add(step.Offset(timeout))
		if !at.Before(a.ExpiresAt) {
			continue // past the call's own timeout: it never escalates
		}
		// A step whose time passed before the wait began (a call that
		// waited for others of its batch first) passes at once.
		timer := workflow.NewTimerWithOptions(timerCtx, max(at.Sub(workflow.Now(ctx)), 0),
			workflow.TimerOptions{Summary: fmt.Sprintf("escalation %d: %s", i+1, callSummary(a.Call))})
		sel.AddFuture(timer, func(f workflow.Future) {
			if f.Get(ctx, nil) == nil && !a.decided {
				g.escalate(ctx, a, i+1, step.To)
			}
		})
	}
}

// escalate adds to to who may decide a, at step n of its rule's
// escalation, and says so: an approval_escalated event, a notice, a note
// for the ledger.
func (g *gate) escalate(ctx workflow.Context, a *approval, n int, to []string) {
	for _, d := range to {
		if !slices.Contains(a.escalated, d) {
			a.escalated = append(a.escalated, d)
		}
	}
	rule := g.ruleOf(a)
	g.log.append(protocol.Event{
		Type:       protocol.EventApprovalEscalated,
		RequestID:  a.RequestID,
		ToolCallID: a.Call.ID,
		ToolName:   a.Call.Name,
		Deciders:   deciders(rule),
		Escalated:  slices.Clone(to),
		Votes:      g.votesOf(rule, a),
	})
	g.notes = append(g.notes, note{a: a, step: n, at: workflow.Now(ctx), to: slices.Clone(to), deciders: deciders(rule)})
	g.sendNoticeTo(ctx, a, activities.NoticeEscalation, to)
}

// expireAlone gives request a a durable timer of its own, which times it
// out when it fires (before levelOneTimer). The Web UI shows a timer by
// its summary: it names the call it waits for (a summary is metadata, not
// part of what replay matches).
func (g *gate) expireAlone(ctx, timerCtx workflow.Context, sel workflow.Selector, a *approval) {
	timer := workflow.NewTimerWithOptions(timerCtx, a.ExpiresAt.Sub(workflow.Now(ctx)),
		workflow.TimerOptions{Summary: "approval: " + callSummary(a.Call)})
	sel.AddFuture(timer, func(f workflow.Future) {
		if f.Get(ctx, nil) == nil {
			g.decide(ctx, a, protocol.DecisionTimeout, reasonTimeout, "", "", DecidedByTimer)
		}
	})
}

// remind starts the timer of request a's reminder: Settings.ReminderBefore
// its timeout, or when four fifths of its time have passed.
func (g *gate) remind(ctx, timerCtx workflow.Context, sel workflow.Selector, a *approval) {
	before := a.ExpiresAt.Sub(a.RequestedAt) / 5
	if r := g.settings.ReminderBefore; r > 0 && r < a.ExpiresAt.Sub(a.RequestedAt) {
		before = r
	}
	remindAt := a.ExpiresAt.Add(-before)
	reminder := workflow.NewTimerWithOptions(timerCtx, remindAt.Sub(workflow.Now(ctx)),
		workflow.TimerOptions{Summary: "reminder: " + callSummary(a.Call)})
	sel.AddFuture(reminder, func(f workflow.Future) {
		if f.Get(ctx, nil) == nil && !a.decided {
			g.sendNotice(ctx, a, activities.NoticeReminder)
		}
	})
}

// newlyDecided gives the requests of reqs decided since the last call,
// marking them in told.
func newlyDecided(reqs []*approval, told []bool) []*approval {
	var news []*approval
	for i, a := range reqs {
		if a.decided && !told[i] {
			told[i] = true
			news = append(news, a)
		}
	}
	return news
}

// expireTogether gives the requests of a batch one durable timer, not one
// each (levelOneTimer): it runs to the soonest expiry of those still
// waiting; when it fires, every request whose time is up is timed out,
// and the returned arm starts the next timer for the rest, if any wait.
// A batch of n calls with one timeout costs its history two timer events,
// not 2n. The caller arms the first.
func (g *gate) expireTogether(ctx, timerCtx workflow.Context, sel workflow.Selector, reqs []*approval) (arm func()) {
	arm = func() {
		var next time.Time
		waiting := 0
		for _, a := range reqs {
			if a.decided {
				continue
			}
			waiting++
			if next.IsZero() || a.ExpiresAt.Before(next) {
				next = a.ExpiresAt
			}
		}
		if waiting == 0 {
			return
		}
		var calls []protocol.ToolCall
		for _, a := range reqs {
			if !a.decided {
				calls = append(calls, a.Call)
			}
		}
		timer := workflow.NewTimerWithOptions(timerCtx, next.Sub(workflow.Now(ctx)), workflow.TimerOptions{Summary: batchSummary("approval: ", calls)})
		sel.AddFuture(timer, func(f workflow.Future) {
			if f.Get(ctx, nil) != nil {
				return
			}
			now := workflow.Now(ctx)
			for _, a := range reqs {
				if !a.decided && !a.ExpiresAt.After(now) {
					g.decide(ctx, a, protocol.DecisionTimeout, reasonTimeout, "", "", DecidedByTimer)
				}
			}
			arm()
		})
	}
	return arm
}

// upsertPending keeps the pending-approvals search attribute current, so
// visibility (the Web UI, GET /approvals) can find turns that wait.
func (g *gate) upsertPending(ctx workflow.Context) {
	// Details issue no command: they are kept current with or without
	// search attributes.
	workflow.SetCurrentDetails(ctx, g.details())
	if !g.upserts {
		return
	}
	// A client tool call is listed as tool:<toolCallId>, so the API can
	// find its turn from the tool call id alone; it goes first, since only
	// it is looked up by value. Request ids follow while they fit.
	ids := []string{}
	for _, cc := range g.clients {
		if !cc.answered {
			ids = append(ids, contract.ClientToolSearchValue(cc.Call.ID))
		}
	}
	for _, a := range g.all {
		if !a.decided {
			ids = append(ids, a.RequestID)
		}
	}
	ids = boundedKeywords(ids, pendingAttributeBudget)
	key := temporal.NewSearchAttributeKeyKeywordList(contract.PendingApprovalsAttribute)
	updates := []temporal.SearchAttributeUpdate{key.ValueSet(ids)}
	status := contract.StatusWaiting
	if len(ids) == 0 {
		updates[0], status = key.ValueUnset(), contract.StatusRunning
	}
	if g.status {
		updates = append(updates, temporal.NewSearchAttributeKeyKeyword(contract.StatusAttribute).ValueSet(status))
	}
	// Upsert fails only for an unregistered attribute, which the worker
	// rules out before it sets upserts; a log line is enough here.
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		workflow.GetLogger(ctx).Warn("upsert pending approvals", "error", err)
	}
}

// details is the workflow's current details, which the Web UI shows on a
// workflow's page (Markdown): the calls it waits for, with their arguments
// and expiry, or nothing.
func (g *gate) details() string {
	var b strings.Builder
	for _, a := range g.all {
		if !a.decided {
			if b.Len() == 0 {
				b.WriteString("**Waiting for approval**\n\n")
			}
			fmt.Fprintf(&b, "- `%s` `%s` — expires %s (request `%s`)\n", a.Call.Name, text.Truncate(strings.ReplaceAll(a.Call.Arguments, "`", "'"), 300),
				a.ExpiresAt.UTC().Format(time.RFC3339), a.RequestID)
		}
	}
	for _, cc := range g.clients {
		if !cc.answered {
			fmt.Fprintf(&b, "- waiting for the client to run `%s` (tool call `%s`)\n", cc.Call.Name, cc.Call.ID)
		}
	}
	return b.String()
}

// callSummary names a call in one short line: its tool and arguments.
func callSummary(call protocol.ToolCall) string {
	return call.Name + " " + text.Truncate(strings.Join(strings.Fields(call.Arguments), " "), 120)
}

// batchSummaryBytes bounds a summary that names several calls: Temporal
// refuses a summary past 400 bytes by default (limit.userMetadataSummarySize).
const batchSummaryBytes = 300

// batchSummary names the calls a timer or an activity of a batch is for,
// for the Web UI: prefix, then each call's summary, cut to
// batchSummaryBytes.
func batchSummary(prefix string, calls []protocol.ToolCall) string {
	parts := make([]string, len(calls))
	for i, c := range calls {
		parts[i] = callSummary(c)
	}
	return text.Truncate(prefix+strings.Join(parts, "; "), batchSummaryBytes)
}

// pendingAttributeBudget bounds the bytes of the values upsertPending
// writes: Temporal refuses a search attribute value past 2 KB by default,
// and terminates the workflow that sets one (a batch of 22 protected calls
// did). The attribute only has to say that a turn waits, and name its
// client tool call; GET /approvals asks each waiting turn for the rest.
const pendingAttributeBudget = 1024

// PendingMoreValue ends the pending-approvals attribute when more requests
// wait than it lists.
const PendingMoreValue = "more"

// boundedKeywords keeps the first values of ids whose JSON fits in budget
// bytes, and PendingMoreValue after them when some did not fit.
func boundedKeywords(ids []string, budget int) []string {
	used := len(`[""]`) + len(PendingMoreValue) + 3
	for i, id := range ids {
		used += len(id) + 3 // quotes and a comma
		if used > budget {
			return append(slices.Clip(ids[:i]), PendingMoreValue)
		}
	}
	return ids
}

// noticeOptions retry a notice a few times; nothing waits for it.
var noticeOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumAttempts:    5,
	},
}

// sendNotice starts the notice activity for a and does not wait for it: a
// notice never holds up the turn.
func (g *gate) sendNotice(ctx workflow.Context, a *approval, kind string) {
	g.sendNoticeTo(ctx, a, kind, nil)
}

// sendNoticeTo is sendNotice for a notice that names who it is for (an
// escalation's).
func (g *gate) sendNoticeTo(ctx workflow.Context, a *approval, kind string, to []string) {
	if !g.notify {
		return
	}
	workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, noticeOptions), activities.NotifyActivity, activities.Notice{
		Kind:           kind,
		RequestID:      a.RequestID,
		Tool:           a.Call.Name,
		Arguments:      a.Call.Arguments,
		ConversationID: g.conversationID,
		WorkflowID:     g.workflowID,
		ExpiresAt:      a.ExpiresAt,
		Preview:        a.Preview,
		Subagent:       g.agent,
		EscalatedTo:    to,
	})
}

func allDecided(reqs []*approval) bool {
	for _, a := range reqs {
		if !a.decided {
			return false
		}
	}
	return true
}
