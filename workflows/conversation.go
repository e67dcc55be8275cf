package workflows

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/internal/workflowtrace"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// conversation is the state of a Conversation workflow.
type conversation struct {
	id       string
	messages []protocol.Message
	turns    int
	queue    []contract.QueuedMessage
	// running is the turn that runs now, if any; runningTurn its child future.
	running     string
	runningTurn workflow.ChildWorkflowFuture
	grants      []contract.Grant
	// spent and raised are what the turns spent and the conversation
	// budgets people raised (budget.go).
	spent  contract.Usage
	raised contract.Budgets
	// traces holds, by turn number, the span of the message Update that
	// queued the turn, so that the turn is traced as part of the request
	// that sent its message rather than of the conversation's run, which
	// lasts for many messages. Kept in memory only: a message queued when
	// the conversation continues as new is traced under the new run.
	traces map[int]workflowtrace.Span
	// settings are those the run recorded at its start.
	settings Settings
	// idle is true while the run has no turn to run and will start the
	// next message's turn at once; started is the number of the last turn
	// whose workflow has started (or failed to).
	idle    bool
	started int
	// keys are the idempotency keys of the messages taken in the last
	// messageKeyWindow (idempotency.go).
	keys []contract.TakenKey
	// compaction is the summary the turns read in place of the first
	// messages; compacting is true while a person's compaction runs, and
	// compactNext holds one asked for while a turn ran (context.go).
	compaction  contract.Compaction
	compacting  bool
	compactNext *protocol.CompactRequest
}

// Conversation owns a conversation's message log. Each user message, taken
// by the message Update, runs as a child ChatTurn, one turn at a time; a
// message that arrives while a turn runs interrupts that turn (its pending
// approvals are declined) and runs next. The workflow continues as new,
// carrying the full message log, before its history grows large.
func (w *Workflows) Conversation(ctx workflow.Context, in contract.ConversationInput) error {
	c := &conversation{id: in.ConversationID, messages: in.Messages, turns: in.Turns, queue: in.Queue, grants: in.Grants, spent: in.Spent, raised: in.Raised, keys: in.Keys, traces: map[int]workflowtrace.Span{},
		compaction: in.Compaction,
		// A run with nothing queued goes idle before it does anything else;
		// a message can come before its loop gets there (with the start).
		idle: len(in.Queue) == 0}
	if err := workflow.SideEffect(ctx, func(workflow.Context) any {
		return w.Settings.recorded()
	}).Get(&c.settings); err != nil {
		return fmt.Errorf("conversation %s: settings: %w", c.id, err)
	}
	if err := workflow.SetQueryHandler(ctx, contract.StateQuery, func() (contract.ConversationState, error) {
		return contract.ConversationState{
			ConversationID: c.id, Turns: c.turns, Running: c.running,
			Messages: len(c.messages), Queued: len(c.queue), Summarized: c.compaction.Covers,
		}, nil
	}); err != nil {
		return fmt.Errorf("set %s query handler: %w", contract.StateQuery, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, contract.SendMessageUpdate, c.onMessage,
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, m contract.UserMessage) error {
			if strings.TrimSpace(m.Query) == "" {
				return errors.New("the message is empty")
			}
			if err := c.checkKey(m); err != nil {
				return err
			}
			return validateClientTools(m.ClientTools, c.settings)
		}},
	); err != nil {
		return fmt.Errorf("set %s update handler: %w", contract.SendMessageUpdate, err)
	}
	if err := workflow.SetQueryHandler(ctx, contract.MessagesQuery, func(req contract.MessagesRequest) (contract.MessagesPage, error) {
		return page(c.messages, req), nil
	}); err != nil {
		return fmt.Errorf("set %s query handler: %w", contract.MessagesQuery, err)
	}
	if err := c.setCompactHandler(ctx); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, contract.GrantsQuery, func() ([]contract.Grant, error) {
		return append([]contract.Grant{}, c.grants...), nil
	}); err != nil {
		return fmt.Errorf("set %s query handler: %w", contract.GrantsQuery, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, contract.RevokeGrantUpdate,
		func(ctx workflow.Context, r contract.RevokeGrant) error {
			var err error
			c.grants, err = revoke(c.grants, r.GrantID)
			return err
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, r contract.RevokeGrant) error {
			_, err := revoke(slices.Clone(c.grants), r.GrantID)
			return err
		}},
	); err != nil {
		return fmt.Errorf("set %s update handler: %w", contract.RevokeGrantUpdate, err)
	}

	ran := 0
	for {
		if len(c.queue) == 0 {
			c.setStatus(ctx, contract.StatusIdle)
		}
		c.idle = len(c.queue) == 0
		err := workflow.Await(ctx, func() bool { return len(c.queue) > 0 && !c.compacting })
		c.idle = false
		if err != nil {
			return err // cancelled while idle
		}
		next := c.queue[0]
		c.queue = c.queue[1:]
		c.setStatus(ctx, contract.StatusRunning)
		c.runTurn(ctx, next)
		c.compactQueued(ctx)
		ran++

		if ran >= c.settings.TurnsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// Let message handlers that already run finish, so no accepted
			// message is lost, then carry everything into the new run.
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			return workflow.NewContinueAsNewError(ctx, contract.ConversationWorkflow, contract.ConversationInput{
				ConversationID: c.id, Messages: c.messages, Turns: c.turns, Queue: c.queue, Grants: c.grants, Spent: c.spent, Raised: c.raised,
				Keys:       c.keys,
				Compaction: c.compaction,
			})
		}
	}
}

// onMessage queues a user message, interrupts the running turn, if any, and
// names the turn that will run the message.
//
// From patch level 2, a message that an idle conversation runs at once is
// answered once its turn's workflow has started: the caller can read the
// turn from then on, instead of looking for a workflow that does not exist
// yet (each look a lookup on the server that finds nothing, which under
// load cost the server more than anything else a watcher does). The answer
// waits for no extra workflow task: the child's start wakes the
// conversation anyway. A message queued behind a running turn is answered
// at once, as before: its turn may start much later.
//
// A message with the idempotency key of one the conversation took
// (patchIdempotentMessages) is answered with that message's turn, at once,
// and queues nothing.
func (c *conversation) onMessage(ctx workflow.Context, m contract.UserMessage) (contract.TurnRef, error) {
	if k, ok := c.takenKey(m.IdempotencyKey); ok && patched(ctx, c.settings, patchIdempotentMessages) {
		if k.Digest != m.Digest() {
			return contract.TurnRef{}, errKeyReused
		}
		return contract.TurnRef{ConversationID: c.id, Turn: k.Turn, TurnID: contract.TurnWorkflowID(c.id, k.Turn)}, nil
	}
	startsNow := c.idle && len(c.queue) == 0
	c.turns++
	n := c.turns
	c.queue = append(c.queue, contract.QueuedMessage{Turn: n, Message: m})
	c.rememberKey(workflow.Now(ctx), m, n)
	c.traces[n] = workflowtrace.SpanOf(ctx)
	if c.runningTurn != nil {
		// The interrupted turn finishes at its next step; this message's
		// turn starts right after. A failed signal only means that turn
		// has already finished.
		err := c.runningTurn.SignalChildWorkflow(ctx, contract.InterruptSignal, Interrupt{Reason: reasonNewMessage}).Get(ctx, nil)
		if err != nil {
			workflow.GetLogger(ctx).Info("interrupt running turn", "turnId", c.running, "error", err)
		}
	}
	ref := contract.TurnRef{ConversationID: c.id, Turn: n, TurnID: contract.TurnWorkflowID(c.id, n)}
	if startsNow && c.settings.PatchLevel >= levelAnswerOnStart {
		// Cancelled while it waits, the conversation still answers: the
		// message was taken.
		_ = workflow.Await(ctx, func() bool { return c.started >= n })
	}
	return ref, nil
}

// runTurn runs one queued message as a child ChatTurn and adds the user
// message and the turn's messages to the log.
func (c *conversation) runTurn(ctx workflow.Context, q contract.QueuedMessage) {
	user := protocol.Message{Role: protocol.RoleUser, Content: q.Message.Query}
	// The turn reads the summary in place of the messages it stands for.
	offset := min(c.compaction.Covers, len(c.messages))
	messages := make([]protocol.Message, 0, len(c.messages)-offset+1)
	messages = append(append(messages, c.messages[offset:]...), user)

	opts := workflow.ChildWorkflowOptions{
		WorkflowID:        contract.TurnWorkflowID(c.id, q.Turn),
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		StaticSummary:     text.Truncate(q.Message.Query, 200),
	}
	if c.settings.SearchAttributes {
		opts.TypedSearchAttributes = temporal.NewSearchAttributes(startAttributes(c.id, c.settings)...)
	}
	// The child's span is no command: choosing its parent changes nothing
	// in history.
	trace := c.traces[q.Turn]
	delete(c.traces, q.Turn)
	child := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(workflowtrace.WithSpan(ctx, trace), opts), contract.ChatTurnWorkflow, TurnInput{
		ConversationID: c.id,
		Turn:           q.Turn,
		Messages:       messages,
		BypassApproval: q.Message.BypassApproval,
		Sender:         q.Message.Sender,
		Grants:         c.grants,
		ClientTools:    q.Message.ClientTools,
		Spent:          c.spent,
		Raised:         c.raised,
		Offset:         offset,
		Compaction:     c.compaction,
	})
	c.running, c.runningTurn = opts.WorkflowID, child
	// Waiting for the start issues no command: the start's event wakes the
	// conversation whether anything waits for it or not.
	_ = child.GetChildWorkflowExecution().Get(ctx, nil)
	c.started = q.Turn
	// Only what the conversation keeps is decoded: a turn's result also
	// holds its whole event log, which repeats every tool call and output,
	// and decoding megabytes in workflow code holds up the workflow task.
	var out struct {
		Messages   []protocol.Message   `json:"messages,omitempty"`
		Grants     []contract.Grant     `json:"grants,omitempty"`
		GrantsUsed map[string]int       `json:"grantsUsed,omitempty"`
		Usage      contract.Usage       `json:"usage,omitempty,omitzero"`
		Raised     contract.Budgets     `json:"raised,omitempty,omitzero"`
		Compaction *contract.Compaction `json:"compaction,omitempty"`
	}
	err := child.Get(ctx, &out)
	c.running, c.runningTurn = "", nil

	c.messages = append(c.messages, user)
	if err != nil {
		// The turn failed outside its own error handling (terminated, say):
		// its messages are lost, the user's message is kept.
		workflow.GetLogger(ctx).Error("turn failed", "turnId", opts.WorkflowID, "error", err)
		return
	}
	c.messages = append(c.messages, out.Messages...)
	// Uses first: a grant made in the turn came back with its uses counted.
	for _, id := range slices.Sorted(maps.Keys(out.GrantsUsed)) {
		if i := slices.IndexFunc(c.grants, func(g contract.Grant) bool { return g.ID == id }); i >= 0 {
			c.grants[i].Used += out.GrantsUsed[id]
		}
	}
	c.grants = append(c.grants, out.Grants...)
	c.spent = c.spent.Add(out.Usage)
	c.raised = raisedBy(c.raised, out.Raised)
	if out.Compaction != nil {
		c.compaction = *out.Compaction
	}
}

// setStatus keeps the conversation's StatusAttribute current, where the
// settings it runs with say the attribute exists; a failed upsert only
// costs the Web UI's view.
func (c *conversation) setStatus(ctx workflow.Context, status string) {
	if !c.settings.SearchAttributes || !c.settings.StatusAttribute {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, temporal.NewSearchAttributeKeyKeyword(contract.StatusAttribute).ValueSet(status)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert status", "status", status, "error", err)
	}
}

// startAttributes are the search attributes a turn or a subagent starts
// with: its conversation, and running.
func startAttributes(conversationID string, settings Settings) []temporal.SearchAttributeUpdate {
	attrs := []temporal.SearchAttributeUpdate{temporal.NewSearchAttributeKeyKeyword(contract.ConversationIDAttribute).ValueSet(conversationID)}
	if settings.StatusAttribute {
		attrs = append(attrs, temporal.NewSearchAttributeKeyKeyword(contract.StatusAttribute).ValueSet(contract.StatusRunning))
	}
	return attrs
}
