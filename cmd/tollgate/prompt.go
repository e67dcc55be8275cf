package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tollgate/tollgate/protocol"
)

// promptLine is the question asked for every approval request.
const promptLine = "approve? [y/N/e=edit/r=reason] "

// sandboxPromptLine is the question asked about a call that ran in the
// sandbox: y applies what it changed there, u runs it for real.
const sandboxPromptLine = "apply these changes? [y/N/u=run unconfined/e=edit and run unconfined/r=reason] "

// request is what a person is asked to decide: an approval_request (or
// subagent_approval_request) event, or a pending approval from the inbox.
type request struct {
	RequestID string
	ToolName  string
	Arguments string
	// Subagent is the name of the subagent that asks, "" for the turn.
	Subagent  string
	ExpiresAt time.Time
	// Note is the policy's note on why the call needs approval, if any.
	Note string
	// Preview says what the call will do, as the worker read it.
	Preview string
	// Sandboxed is true of a call that ran in the sandbox before it asked:
	// an approve applies what it changed there.
	Sandboxed bool
}

// decider sends a decision to tollgate; the API client is one.
type decider interface {
	decide(ctx context.Context, d protocol.ApprovalDecision) (protocol.ApprovalResult, error)
}

// asker reads a person's answers, one line each, from in and asks on out.
type asker struct {
	in  *bufio.Reader
	out io.Writer
	now func() time.Time
}

func newAsker(in io.Reader, out io.Writer) *asker {
	return &asker{in: bufio.NewReader(in), out: out, now: time.Now}
}

// line reads one answer without its line end. ok is false when the input
// has ended with nothing more to read.
func (a *asker) line() (text string, ok bool) {
	s, err := a.in.ReadString('\n')
	s = strings.TrimRight(s, "\r\n")
	return s, err == nil || s != ""
}

// ask shows req and asks until it has an answer: y approves; n or an empty
// line declines; e reads edited arguments (one line of JSON, an object)
// and approves with them; r reads a reason and declines with it. When the
// input ends, the answer is a decline, as no answer is.
func (a *asker) ask(req request) protocol.ApprovalDecision {
	d := protocol.ApprovalDecision{RequestID: req.RequestID, Decision: protocol.DecisionDecline}
	a.show(req)
	prompt := promptLine
	if req.Sandboxed {
		prompt = sandboxPromptLine
	}
	for {
		fmt.Fprint(a.out, prompt)
		answer, ok := a.line()
		if !ok {
			fmt.Fprintln(a.out, "\n(no answer: declining)")
			return d
		}
		switch strings.ToLower(strings.TrimSpace(answer)) {
		case "y", "yes":
			d.Decision = protocol.DecisionApprove
			return d
		case "u", "unconfined":
			if !req.Sandboxed {
				fmt.Fprintln(a.out, "the call did not run in the sandbox: answer y to run it")
				continue
			}
			d.Decision, d.Unconfined = protocol.DecisionApprove, true
			return d
		case "", "n", "no":
			return d
		case "r", "reason":
			fmt.Fprint(a.out, "reason: ")
			reason, _ := a.line()
			d.Reason = strings.TrimSpace(reason)
			return d
		case "e", "edit":
			fmt.Fprintf(a.out, "now:  %s\nedit: ", compact(req.Arguments))
			edited, ok := a.line()
			if !ok {
				fmt.Fprintln(a.out, "\n(no arguments: declining)")
				return d
			}
			args, err := jsonObject(edited)
			if err != nil {
				fmt.Fprintf(a.out, "%v; answer again\n", err)
				continue
			}
			// The sandbox ran the model's command: an edited one can only
			// run for real.
			d.Decision, d.Arguments, d.Unconfined = protocol.DecisionApprove, args, req.Sandboxed
			return d
		default:
			fmt.Fprintln(a.out, "answer y (approve), n or nothing (decline), e (edit the arguments and approve) or r (decline with a reason)")
		}
	}
}

// show prints what req asks to run.
func (a *asker) show(req request) {
	who := ""
	if req.Subagent != "" {
		who = " (subagent " + req.Subagent + ")"
	}
	fmt.Fprintf(a.out, "\n? %s%s wants to run:\n%s\n", req.ToolName, who, indent(pretty(req.Arguments), "    "))
	if req.Preview != "" {
		fmt.Fprintf(a.out, "  what it will do:\n%s\n", indent(req.Preview, "    "))
	}
	if req.Note != "" {
		fmt.Fprintf(a.out, "  note: %s\n", req.Note)
	}
	if !req.ExpiresAt.IsZero() {
		fmt.Fprintf(a.out, "  request %s, %s\n", req.RequestID, expiry(req.ExpiresAt, a.now()))
	} else {
		fmt.Fprintf(a.out, "  request %s\n", req.RequestID)
	}
}

// askAndDecide asks about req and sends the answer with d, then says on
// out what became of it. It returns the decision sent.
func askAndDecide(ctx context.Context, a *asker, d decider, req request) (protocol.ApprovalDecision, error) {
	dec := a.ask(req)
	res, err := d.decide(ctx, dec)
	if err != nil {
		return dec, fmt.Errorf("send %s of %s: %w", dec.Decision, req.RequestID, err)
	}
	if !res.Accepted {
		if res.Message != "" {
			fmt.Fprintf(a.out, "not taken: %s %s: %s\n", req.RequestID, refusal(res.Reason), res.Message)
		} else {
			fmt.Fprintf(a.out, "not taken: %s %s\n", req.RequestID, refusal(res.Reason))
		}
		return dec, nil
	}
	switch {
	case res.Pending:
		// A vote of a rule's quorum: the call waits for more.
		fmt.Fprintf(a.out, "sent: %s %s: %s\n", dec.Decision, req.ToolName, res.Message)
	case dec.Unconfined:
		fmt.Fprintf(a.out, "sent: run %s unconfined\n", req.ToolName)
	case dec.Decision == protocol.DecisionApprove && dec.Arguments != "":
		fmt.Fprintf(a.out, "sent: approve %s with edited arguments\n", req.ToolName)
	case dec.Reason != "":
		fmt.Fprintf(a.out, "sent: %s %s (%s)\n", dec.Decision, req.ToolName, dec.Reason)
	default:
		fmt.Fprintf(a.out, "sent: %s %s\n", dec.Decision, req.ToolName)
	}
	return dec, nil
}

// expiry says when a request expires, relative to now.
func expiry(at, now time.Time) string {
	left := at.Sub(now).Round(time.Second)
	if left <= 0 {
		return "expired " + at.Local().Format(time.TimeOnly)
	}
	return fmt.Sprintf("expires %s (in %s)", at.Local().Format(time.TimeOnly), left)
}

// jsonObject checks that s is one JSON object and returns it compact.
func jsonObject(s string) (string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		return "", errors.New("not a JSON object")
	}
	return compact(s), nil
}

// compact returns JSON text on one line, or s as it is when it is not JSON.
func compact(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}

// pretty indents JSON text for reading, or returns s as it is.
func pretty(s string) string {
	var b bytes.Buffer
	if json.Indent(&b, []byte(s), "", "  ") != nil {
		return s
	}
	return b.String()
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// refusal says in words why the API did not take a decision.
func refusal(reason string) string {
	switch reason {
	case protocol.RejectDecided:
		return "was decided already (by someone else, or a remembered decision)"
	case protocol.RejectExpired:
		return "has expired (no decision came in time)"
	case protocol.RejectUnknown:
		return "is unknown"
	case protocol.RejectVoted:
		return "has your vote already (its rule needs votes from distinct people)"
	default:
		return "is unknown, expired or already decided"
	}
}
