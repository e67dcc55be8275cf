package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// clientCall is a call of a client-executed tool that waits for the
// client's answer.
type clientCall struct {
	RequestID string
	Call      protocol.ToolCall
	ExpiresAt time.Time

	answered bool
	// expired is true when the call's time ran out before an answer came.
	expired bool
	result  contract.ClientToolResult
	// declined is the reason the call was declined before an answer came
	// (a new message); empty otherwise.
	declined string
}

// Tool responses for client-executed tools that got no answer.
const clientTimeoutResponse = "The client did not return a result in time, so this tool was not executed."

// validateClientResult says why r cannot be taken now, or nil.
func (g *gate) validateClientResult(ctx workflow.Context, r contract.ClientToolResult) error {
	cc := g.findClientCall(r)
	switch {
	case cc == nil:
		return rejection(protocol.RejectUnknown, fmt.Errorf("client tool call %q %q: %w", r.RequestID, r.ToolCallID, errUnknownRequest))
	case cc.expired:
		return rejection(protocol.RejectExpired, fmt.Errorf("client tool call %q: %w", cc.Call.ID, errExpired))
	case cc.answered:
		return rejection(protocol.RejectDecided, fmt.Errorf("client tool call %q: %w", cc.Call.ID, errAlreadyDecided))
	case !workflow.Now(ctx).Before(cc.ExpiresAt):
		return rejection(protocol.RejectExpired, fmt.Errorf("client tool call %q: %w", cc.Call.ID, errExpired))
	}
	return nil
}

// findClientCall finds the call r answers: by request id, or by tool call
// id among those still waiting.
func (g *gate) findClientCall(r contract.ClientToolResult) *clientCall {
	for _, cc := range g.clients {
		if r.RequestID != "" && cc.RequestID == r.RequestID {
			return cc
		}
		if r.RequestID == "" && r.ToolCallID != "" && cc.Call.ID == r.ToolCallID && !cc.answered {
			return cc
		}
	}
	return nil
}

// takeClientResult records a validated answer and wakes the waiting call.
func (g *gate) takeClientResult(r contract.ClientToolResult) {
	cc := g.findClientCall(r)
	cc.answered, cc.result = true, r
	g.wake.SendAsync(struct{}{})
}

// runClientTool publishes a client_tool_call and waits for the client's
// answer until timeout. No answer in time is a timeout; a cancelled turn,
// or a new message (declinePending), declines the call.
func (g *gate) runClientTool(ctx workflow.Context, call protocol.ToolCall, timeout time.Duration) activities.ToolOutput {
	id := g.newRequestID(ctx, call)
	cc := &clientCall{RequestID: id, Call: call, ExpiresAt: workflow.Now(ctx).Add(timeout)}
	g.clients = append(g.clients, cc)
	expires := cc.ExpiresAt
	g.log.append(protocol.Event{
		Type: protocol.EventClientToolCall, RequestID: id, ToolCallID: call.ID, ToolName: call.Name,
		Arguments: call.Arguments, WorkflowID: g.workflowID, ExpiresAt: &expires,
	})
	g.upsertPending(ctx)
	defer g.upsertPending(ctx)

	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	expired, cancelled := false, false
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(workflow.NewTimer(timerCtx, timeout), func(f workflow.Future) { expired = f.Get(ctx, nil) == nil })
	sel.AddReceive(g.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { cancelled = true })
	for !cc.answered && !expired && !cancelled {
		sel.Select(ctx)
	}
	switch {
	case cc.declined != "":
		return activities.ToolOutput{Status: protocol.StatusDeclined, Result: declined(cc.declined)}
	case cc.answered && cc.result.IsError:
		return activities.ToolOutput{Status: protocol.StatusError, Result: cc.result.Result}
	case cc.answered:
		return activities.ToolOutput{Status: protocol.StatusOK, Result: cc.result.Result}
	case cancelled:
		cc.answered = true
		return activities.ToolOutput{Status: protocol.StatusDeclined, Result: declined(reasonCancelled)}
	default:
		cc.answered, cc.expired = true, true
		return activities.ToolOutput{Status: protocol.StatusTimeout, Result: clientTimeoutResponse}
	}
}

// validateClientTools checks a request's client-executed tools
// (contract.CheckClientTools), and that none is named like a tool this
// worker runs.
func validateClientTools(tools []protocol.ToolSpec, settings Settings) error {
	if err := contract.CheckClientTools(tools); err != nil {
		return err
	}
	for _, t := range tools {
		if offers(settings.Tools, t.Name) {
			return fmt.Errorf("client tool %q has the name of a tool the worker runs", t.Name)
		}
	}
	return nil
}
