package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// Resuming a dropped stream: how often in a row, and the pause between
// tries (doubling up to maxResumePause).
const (
	maxResumes       = 8
	firstResumePause = 250 * time.Millisecond
	maxResumePause   = 5 * time.Second
)

// Widths of what the client prints of tool calls and results.
const (
	argumentsWidth = 300
	resultWidth    = 160
)

// errFinished stops reading a stream once its finish event arrived.
var errFinished = errors.New("finished")

// streamItem is one event of a turn's stream, a notice about the stream
// itself, or the error that ended it.
type streamItem struct {
	event  protocol.Event
	notice string
	err    error
}

// follower reads a turn's stream into items, resuming with Last-Event-ID
// whenever the connection drops, until the finish event.
type follower struct {
	api    *apiClient
	turnID string
	// last is the last event number received.
	last  int
	pause func(context.Context, time.Duration) error
}

// run reads first (the stream that POST /chat/stream opened, or nil) and
// then resumed streams, sending every event to items, which it closes at
// the end.
func (f *follower) run(ctx context.Context, first *http.Response, items chan<- streamItem) {
	defer close(items)
	resp := first
	failures := 0
	wait := firstResumePause
	for {
		var err error
		if resp == nil {
			resp, err = f.api.resume(ctx, f.turnID, f.last)
		}
		progress := false
		if err == nil {
			err = protocol.ReadSSE(resp.Body, func(m protocol.SSEMessage) error {
				e, numbered, derr := decodeEvent(m)
				if derr != nil {
					return derr
				}
				if numbered {
					if e.Seq <= f.last {
						return nil // seen before this resume
					}
					f.last = e.Seq
				} else if e.Type == protocol.EventHeartbeat {
					return nil // the API's keep-alive
				}
				progress = true
				select {
				case items <- streamItem{event: e}:
				case <-ctx.Done():
					return ctx.Err()
				}
				if e.Type == protocol.EventFinish {
					return errFinished
				}
				return nil
			})
			resp.Body.Close()
			resp = nil
		}
		switch {
		case errors.Is(err, errFinished):
			return
		case ctx.Err() != nil:
			return
		}
		if progress {
			failures, wait = 0, firstResumePause
		}
		failures++
		if failures > maxResumes {
			select {
			case items <- streamItem{err: fmt.Errorf("stream of %s lost after %d tries to resume: %w", f.turnID, maxResumes, err)}:
			case <-ctx.Done():
			}
			return
		}
		notice := fmt.Sprintf("(stream dropped: %v; resuming after event %d)", err, f.last)
		select {
		case items <- streamItem{notice: notice}:
		case <-ctx.Done():
			return
		}
		if perr := f.pause(ctx, wait); perr != nil {
			return
		}
		wait = min(2*wait, maxResumePause)
	}
}

// decodeEvent reads one SSE message as an event; numbered tells whether it
// had an id line.
func decodeEvent(m protocol.SSEMessage) (protocol.Event, bool, error) {
	var e protocol.Event
	if err := json.Unmarshal([]byte(m.Data), &e); err != nil {
		return e, false, fmt.Errorf("event %q is not JSON: %w", m.ID, err)
	}
	if m.ID == "" {
		return e, false, nil
	}
	seq, err := strconv.Atoi(m.ID)
	if err != nil {
		return e, false, fmt.Errorf("event id %q is not a number", m.ID)
	}
	e.Seq = seq
	return e, true, nil
}

// chatOptions are the flags of `tollgate chat`.
type chatOptions struct {
	Query          string
	ConversationID string
	Bypass         bool
}

// chat sends a message, prints its turn as it streams, asks about each
// approval, and returns the finish reason.
func chat(ctx context.Context, api *apiClient, opts chatOptions, in io.Reader, out io.Writer) (string, error) {
	resp, err := api.startChat(ctx, protocol.ChatRequest{Query: opts.Query, ConversationID: opts.ConversationID, BypassApproval: opts.Bypass})
	if err != nil {
		return "", err
	}
	conv, turnID := resp.Header.Get(protocol.HeaderConversationID), resp.Header.Get(protocol.HeaderTurnID)
	if conv != "" {
		fmt.Fprintf(out, "conversation %s\n", conv)
	}
	if turnID == "" {
		resp.Body.Close()
		return "", fmt.Errorf("POST /chat/stream: the answer names no turn (%s header missing)", protocol.HeaderTurnID)
	}
	items := make(chan streamItem, 64)
	f := &follower{api: api, turnID: turnID, pause: sleep}
	go f.run(ctx, resp, items)

	p := &printer{out: out, ask: newAsker(in, out), decider: api, conversationID: conv, tools: map[string]string{}}
	reason, err := p.consume(ctx, items)
	if conv = p.conversationID; conv != "" {
		fmt.Fprintf(out, "continue with: tollgate chat --conversation %s \"...\"\n", conv)
	}
	return reason, err
}

// printer shows a turn's events and asks about its approvals.
type printer struct {
	out            io.Writer
	ask            *asker
	decider        decider
	conversationID string
	// tools names the tool of each approval request, for its decision.
	tools map[string]string
	// queue holds events read ahead of the one being handled.
	queue []streamItem
	// tokenSource is who the last token came from ("" the turn, else a
	// subagent's name) while a line of answer text is open.
	tokenSource string
	midLine     bool
}

// consume handles items until the finish event and returns its reason.
func (p *printer) consume(ctx context.Context, items <-chan streamItem) (string, error) {
	for {
		it, ok := p.next(items)
		if !ok {
			return "", errors.New("the stream ended before the turn finished")
		}
		if it.err != nil {
			p.endLine()
			return "", it.err
		}
		if it.notice != "" {
			p.endLine()
			fmt.Fprintln(p.out, it.notice)
			continue
		}
		e := it.event
		if e.Type == protocol.EventFinish {
			p.endLine()
			fmt.Fprintf(p.out, "finish: %s\n", e.Reason)
			if e.Message != "" {
				fmt.Fprintf(p.out, "  %s\n", e.Message)
			}
			return e.Reason, nil
		}
		if err := p.handle(ctx, e, items); err != nil {
			return "", err
		}
	}
}

// next returns the next item, from the read-ahead queue first.
func (p *printer) next(items <-chan streamItem) (streamItem, bool) {
	if len(p.queue) > 0 {
		it := p.queue[0]
		p.queue = p.queue[1:]
		return it, true
	}
	it, ok := <-items
	return it, ok
}

// decidedAhead reports whether a decision on requestID is among the events
// that have already arrived: then nobody needs to be asked.
func (p *printer) decidedAhead(requestID string, items <-chan streamItem) bool {
	p.readAhead(items)
	for _, it := range p.queue {
		if base, _ := baseType(it.event); base == protocol.EventApprovalDecision && it.event.RequestID == requestID {
			return true
		}
	}
	return false
}

// readAhead moves every item that has arrived into the queue, without
// waiting for more.
func (p *printer) readAhead(items <-chan streamItem) {
	for {
		select {
		case it, ok := <-items:
			if !ok {
				return
			}
			p.queue = append(p.queue, it)
		default:
			return
		}
	}
}

func (p *printer) handle(ctx context.Context, e protocol.Event, items <-chan streamItem) error {
	base, sub := baseType(e)
	if base == protocol.EventToken {
		p.token(sub, e.Name, e.Data, e.Reset)
		return nil
	}
	p.endLine()
	tag := ""
	if sub {
		tag = "[" + e.Name + "] "
	}
	switch base {
	case protocol.EventTurnStart:
		if p.conversationID == "" && e.ConversationID != "" {
			p.conversationID = e.ConversationID
			fmt.Fprintf(p.out, "conversation %s\n", e.ConversationID)
		}
		fmt.Fprintf(p.out, "turn %s\n", e.TurnID)
	case protocol.EventSubagentStart:
		fmt.Fprintf(p.out, "[%s] subagent started (%s)\n", e.Name, e.WorkflowID)
	case protocol.EventSubagentFinish:
		fmt.Fprintf(p.out, "[%s] subagent finished: %s\n", e.Name, cmp.Or(e.Reason, "stop"))
		if e.Message != "" {
			fmt.Fprintf(p.out, "[%s]   %s\n", e.Name, e.Message)
		}
	case protocol.EventToolCall:
		for _, c := range e.ToolCalls {
			fmt.Fprintf(p.out, "%s→ %s %s\n", tag, c.Name, text.Truncate(compact(c.Arguments), argumentsWidth))
		}
	case protocol.EventApprovalRequest:
		p.tools[e.RequestID] = e.ToolName
		if p.decidedAhead(e.RequestID, items) {
			fmt.Fprintf(p.out, "%s? %s was decided elsewhere\n", tag, e.ToolName)
			return nil
		}
		req := request{RequestID: e.RequestID, ToolName: e.ToolName, Arguments: e.Arguments, Note: e.Reason, Preview: e.Preview,
			Sandboxed: e.Sandbox.Ran()}
		if sub {
			req.Subagent = e.Name
		}
		if e.ExpiresAt != nil {
			req.ExpiresAt = *e.ExpiresAt
		}
		if _, err := askAndDecide(ctx, p.ask, p.decider, req); err != nil {
			fmt.Fprintf(p.out, "%v\n", err)
		}
	case protocol.EventApprovalDecision:
		line := fmt.Sprintf("%s%s %s", tag, pastTense(e.Decision), cmp.Or(p.tools[e.RequestID], e.ToolCallID))
		if e.Reason != "" {
			line += ": " + e.Reason
		}
		fmt.Fprintln(p.out, line)
	case protocol.EventApprovalVote:
		line := fmt.Sprintf("%s%s voted %s on %s", tag, e.By, e.Decision, cmp.Or(p.tools[e.RequestID], e.ToolCallID))
		if v := e.Votes; v != nil {
			line += fmt.Sprintf(" (%d of %d approvals", v.Approvals(), v.Quorum)
			if len(v.MayVote) > 0 {
				line += "; may still vote: " + strings.Join(v.MayVote, ", ")
			}
			line += ")"
		}
		fmt.Fprintln(p.out, line)
	case protocol.EventApprovalEscalated:
		fmt.Fprintf(p.out, "%s%s still waits: %s may decide too\n", tag, cmp.Or(p.tools[e.RequestID], e.ToolName), strings.Join(e.Escalated, ", "))
	case protocol.EventToolResult:
		for _, r := range e.ToolResults {
			fmt.Fprintf(p.out, "%s← %s %s: %s\n", tag, r.Name, r.Status, text.Truncate(firstLine(r.Result), resultWidth))
		}
	case protocol.EventError:
		fmt.Fprintf(p.out, "%serror: %s\n", tag, e.Message)
	case protocol.EventContextCompacted:
		fmt.Fprintf(p.out, "%s(context compacted to fit the model: %s; %d → %d KiB; the whole conversation is kept)\n",
			tag, compactedWhat(e), e.BytesBefore>>10, e.BytesAfter>>10)
	case protocol.EventQueued:
		fmt.Fprintf(p.out, "queued: turn %s waits for the conversation's running turn to end\n", e.TurnID)
	case protocol.EventHeartbeat:
	default:
		fmt.Fprintf(p.out, "%s(%s event)\n", tag, e.Type)
	}
	return nil
}

// token prints answer text, starting a new line tagged with the
// subagent's name whenever the speaker changes. Text printed cannot be taken
// back: a reset (a retried model call that answered otherwise) says so and
// prints the answer again from the start.
func (p *printer) token(sub bool, name, data string, reset bool) {
	source := ""
	if sub {
		source = name
	}
	if reset {
		p.endLine()
		tag := ""
		if sub {
			tag = "[" + name + "] "
		}
		fmt.Fprintf(p.out, "%s(the model call was retried and answered otherwise; the answer again:)\n", tag)
	}
	if p.midLine && source != p.tokenSource {
		p.endLine()
	}
	if !p.midLine && source != "" {
		fmt.Fprintf(p.out, "[%s] ", source)
	}
	fmt.Fprint(p.out, data)
	p.midLine, p.tokenSource = true, source
}

// endLine ends an open line of answer text.
func (p *printer) endLine() {
	if p.midLine {
		fmt.Fprintln(p.out)
		p.midLine = false
	}
}

// baseType strips the subagent_ prefix: the event's type as a turn would
// have it, and whether a subagent sent it.
func baseType(e protocol.Event) (string, bool) {
	switch e.Type {
	case protocol.EventSubagentStart, protocol.EventSubagentFinish:
		return e.Type, true
	}
	if rest, ok := strings.CutPrefix(e.Type, protocol.EventSubagentPrefix); ok {
		return rest, true
	}
	return e.Type, false
}

func pastTense(decision string) string {
	switch decision {
	case protocol.DecisionApprove:
		return "approved"
	case protocol.DecisionDecline:
		return "declined"
	case protocol.DecisionTimeout:
		return "timed out"
	}
	return decision
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// compactedSays says what a compaction did.
func compactedSays(r protocol.CompactResult) string {
	switch {
	case r.Queued:
		return "A turn is running; the conversation compacts when it ends, before the next message."
	case !r.Compacted:
		return "Nothing compacted: " + r.Reason
	}
	return fmt.Sprintf("Compacted: a summary stands for the first %d %s, the next turn reads %d after them whole (%d → %d KiB); the transcript keeps them all.",
		r.Summarized, plural(r.Summarized, "message", "messages"), r.Kept, r.BytesBefore>>10, r.BytesAfter>>10)
}

// compactedWhat says what a context_compacted event left out.
func compactedWhat(e protocol.Event) string {
	var parts []string
	if e.Elided > 0 {
		parts = append(parts, fmt.Sprintf("%d old tool %s left out", e.Elided, plural(e.Elided, "output", "outputs")))
	}
	if e.Summarized > 0 {
		parts = append(parts, fmt.Sprintf("%d earlier %s summarized", e.Summarized, plural(e.Summarized, "message", "messages")))
		if e.Kept > 0 {
			parts = append(parts, fmt.Sprintf("%d newer kept whole", e.Kept))
		}
	}
	if e.Cut > 0 {
		parts = append(parts, fmt.Sprintf("%d long %s cut in the middle", e.Cut, plural(e.Cut, "message", "messages")))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
