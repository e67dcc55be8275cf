package workflows

import (
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
)

// Texts a compacted view carries in place of what it left out.
const (
	// ElidedToolOutput replaces a tool output the view left out.
	ElidedToolOutput = "[This tool output was left out to fit the context. Run the tool again if you need it.]"
	// SummaryPrefix starts the message that replaces the summarized part.
	SummaryPrefix = "Summary of the conversation so far (earlier messages were summarized to fit the context):\n"
	// summarySystemPrompt asks the model for the summary.
	summarySystemPrompt = "Summarize the conversation below for an agent that will continue it: what the user asked, " +
		"what was done and decided (files written, commands run, what was declined), and what is still open. " +
		"Be specific and brief; write at most 400 words. Do not call tools."
)

// compaction is what a turn has done to fit its model's view.
type compaction struct {
	// summary replaces the first summarized messages of the view.
	summary    string
	summarized int
	// published is the last compaction the stream was told of.
	published [2]int
	// budget is the budget in force; a model that said the view was too
	// long halves it, once (retried).
	budget  int
	retried bool
}

// viewSize is the bytes of message text in msgs.
func viewSize(msgs []protocol.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
		for _, c := range m.ToolCalls {
			n += len(c.Arguments) + len(c.Name)
		}
	}
	return n
}

// modelViewInTurn is the model's view of a turn that compacts within
// itself, as turns did before patchConversationCompaction: the system
// prompt, the conversation and this loop's messages, compacted to the
// budget. Tool outputs go first, oldest first, but for those of the newest
// batch; then, once, everything before this turn's user message is
// summarized by a model call, and the summary is the turn's alone. While
// the view fits, it is the whole conversation.
func (t *turn) modelViewInTurn(ctx workflow.Context) ([]protocol.Message, error) {
	view := make([]protocol.Message, 0, 1+len(t.input)+len(t.messages))
	view = append(view, protocol.Message{Role: protocol.RoleSystem, Content: t.system})
	view = append(append(view, t.input...), t.messages...)
	if t.compact.budget == 0 {
		t.compact.budget = t.settings.ContextBudget
	}
	before := viewSize(view)
	if before <= t.compact.budget && t.compact.summary == "" {
		return view, nil
	}
	// Only a turn of level 0 that needs compaction asks for
	// patchContextCompaction (retired): the others carry no marker for it.
	requirePatched(ctx, t.settings, patchContextCompaction)
	if t.compact.summary != "" {
		view = t.summarized(view)
	}
	elided := elide(view, t.compact.budget)
	if viewSize(view) > t.compact.budget && t.compact.summary == "" {
		if n := t.summarizable(view); n > 0 {
			if err := t.summarize(ctx, view[1:1+n], n); err != nil {
				return nil, err
			}
			view = make([]protocol.Message, 0, 1+len(t.input)+len(t.messages))
			view = append(view, protocol.Message{Role: protocol.RoleSystem, Content: t.system})
			view = t.summarized(append(append(view, t.input...), t.messages...))
			elided = elide(view, t.compact.budget)
		}
	}
	if done := [2]int{elided, t.compact.summarized}; done != t.compact.published && (elided > 0 || t.compact.summarized > 0) {
		t.compact.published = done
		t.log.append(protocol.Event{Type: protocol.EventContextCompacted, Elided: elided, Summarized: t.compact.summarized, BytesBefore: before, BytesAfter: viewSize(view)})
	}
	return view, nil
}

// summarized replaces the first summarized messages after the system
// prompt with the summary.
func (t *turn) summarized(view []protocol.Message) []protocol.Message {
	out := []protocol.Message{view[0], {Role: protocol.RoleUser, Content: SummaryPrefix + t.compact.summary}}
	return append(out, view[1+t.compact.summarized:]...)
}

// summarizable is how many messages after the system prompt may be
// summarized: those before this turn's user message (the conversation's
// earlier turns), never this turn's own.
func (t *turn) summarizable(view []protocol.Message) int {
	return max(len(t.input)-1, 0)
}

// summarize asks the model for a summary of msgs, the first n messages of
// the conversation.
func (t *turn) summarize(ctx workflow.Context, msgs []protocol.Message, n int) error {
	var b strings.Builder
	for _, m := range msgs {
		writeTranscript(&b, m)
	}
	in := activities.ModelInput{
		Messages: []protocol.Message{
			{Role: protocol.RoleSystem, Content: summarySystemPrompt},
			{Role: protocol.RoleUser, Content: b.String()},
		},
		Model: t.model,
	}
	var out activities.ModelOutput
	opts := modelActivityOptions(t.settings)
	opts.Summary = "summarize the conversation to fit the context"
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.ModelActivity, in).Get(ctx, &out); err != nil {
		return fmt.Errorf("summarize %d messages to fit the context: %w", n, err)
	}
	t.compact.summary, t.compact.summarized = strings.TrimSpace(out.Content), n
	return nil
}

// writeTranscript writes m to b as a summary request shows it: its role
// and text, and the tools it called.
func writeTranscript(b *strings.Builder, m protocol.Message) {
	fmt.Fprintf(b, "%s: %s\n", m.Role, m.Content)
	for _, c := range m.ToolCalls {
		fmt.Fprintf(b, "  (called %s with %s)\n", c.Name, c.Arguments)
	}
}

// elide replaces tool outputs with ElidedToolOutput, oldest first, until
// view fits budget, and returns how many it replaced. The newest batch's
// outputs (after the last assistant message) are kept: the model has not
// read them yet.
func elide(view []protocol.Message, budget int) int {
	last := len(view)
	for i := len(view) - 1; i >= 0; i-- {
		if view[i].Role == protocol.RoleAssistant {
			last = i
			break
		}
	}
	size, n := viewSize(view), 0
	for i := range view[:last] {
		if size <= budget {
			break
		}
		if view[i].Role == protocol.RoleTool && len(view[i].Content) > len(ElidedToolOutput) {
			size -= len(view[i].Content) - len(ElidedToolOutput)
			view[i].Content = ElidedToolOutput
			n++
		}
	}
	return n
}

// isContextTooLong reports whether the model said the view is longer than
// its context.
func isContextTooLong(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == activities.ModelContextTooLongError
}
