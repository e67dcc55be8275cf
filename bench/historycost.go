package bench

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// historyCost is the history one turn leaves.
type historyCost struct {
	Query string
	// Shape names the turn in the report; Goal, when not 0, is the most
	// events its history should have (issue 28, item 2).
	Shape string
	Goal  int
	// TurnEvents and TurnBytes are the turn's history, its bytes as
	// GetWorkflowExecutionHistory returns them.
	TurnEvents     int
	TurnBytes      int
	Approvals      int
	ConvEvents     int
	ModelCalls     int
	ToolCalls      int
	TokenSignals   int
	TokenEvents    int
	StreamedEvents int
	Took           time.Duration
}

// historyCost runs one turn of query to its end and counts the events of
// its history and of its (new) conversation's.
//
// A person approves each request as it comes, through the API, or, with
// together > 0, the first together requests with one POST
// /chat/approvals.
func (e *env) historyCost(ctx context.Context, query string, together int) (historyCost, error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	res := historyCost{Query: query}
	conv := fmt.Sprintf("bench-%s-history-%d", e.run, time.Now().UnixNano())
	start := time.Now()
	resp, turnID, err := e.api.chat(ctx, query, conv)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	decided := map[string]bool{}
	var held []string
	for ev := range readStamped(resp.Body) {
		res.StreamedEvents++
		if ev.Type == protocol.EventApprovalRequest && !decided[ev.RequestID] {
			decided[ev.RequestID] = true
			res.Approvals++
			if together > 0 {
				if held = append(held, ev.RequestID); len(held) == together {
					if err := e.api.approveAll(ctx, held); err != nil {
						return res, err
					}
				}
				continue
			}
			if err := e.api.approve(ctx, ev.RequestID); err != nil {
				return res, err
			}
		}
		if ev.Type == protocol.EventToken {
			res.TokenEvents++
		}
		if ev.Type == protocol.EventFinish {
			if ev.Reason != protocol.FinishStop {
				return res, fmt.Errorf("turn %s finished with %s: %s", turnID, ev.Reason, ev.Message)
			}
			break
		}
	}
	res.Took = time.Since(start)
	h, err := history(ctx, e.temporal, turnID)
	if err != nil {
		return res, err
	}
	res.TurnEvents = len(h)
	for _, ev := range h {
		res.TurnBytes += proto.Size(ev)
	}
	for _, ev := range timedHistory(h) {
		switch {
		case ev.typ == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			res.TokenSignals++
		case ev.activity == activities.ModelActivity:
			res.ModelCalls++
		case ev.activity != "":
			res.ToolCalls++
		}
	}
	// The conversation has taken the turn's result once it runs no turn.
	convID := contract.ConversationWorkflowID(conv)
	if err := waitUntil(ctx, 10*time.Millisecond, func(ctx context.Context) (bool, error) {
		v, err := e.temporal.QueryWorkflow(ctx, convID, "", contract.StateQuery)
		var st contract.ConversationState
		return err == nil && v.Get(&st) == nil && st.Running == "" && st.Messages > 0, nil
	}); err != nil {
		return res, fmt.Errorf("conversation %s did not take its turn's result: %w", convID, err)
	}
	if res.ConvEvents, err = historyLength(ctx, e.temporal, convID); err != nil {
		return res, err
	}
	return res, nil
}

// Goals of issue 28, item 2, for a turn's history with the ledger on.
const (
	approvedCallGoal = 40 // events of a turn with one approved call, at most
	protectedGoal    = 99 // events of historyToolCalls approved calls and a long answer, under 100
)

// historyShapes runs one turn of each shape the report weighs and counts
// its history: one approved call (the latency runs' turn), historyToolCalls
// protected calls in one batch each approved by a person and a long
// answer, and historyToolCalls unprotected Reads in one batch and one by
// one, each with a long answer.
func (e *env) historyShapes(ctx context.Context) ([]historyCost, error) {
	shapes := []struct {
		query, shape string
		goal         int
	}{
		{queryApprove, "one approved call (Write), then \"done\"", approvedCallGoal},
		{queryHistoryProtected, fmt.Sprintf("%d Writes in one batch, approved by a person with one POST /chat/approvals, then a %d-word answer", historyToolCalls, historyTokens), protectedGoal},
		{queryHistoryProtected, fmt.Sprintf("%d Writes in one batch, each approved by a person on its own, then a %d-word answer", historyToolCalls, historyTokens), 0},
		{queryHistoryBatch, fmt.Sprintf("%d Reads in one batch, then a %d-word answer", historyToolCalls, historyTokens), 0},
		{queryHistorySteps, fmt.Sprintf("%d Reads one by one, then a %d-word answer", historyToolCalls, historyTokens), 0},
	}
	var out []historyCost
	for i, s := range shapes {
		together := 0
		if i == 1 {
			together = historyToolCalls
		}
		h, err := e.historyCost(ctx, s.query, together)
		if err != nil {
			return out, fmt.Errorf("history of %s: %w", s.shape, err)
		}
		h.Shape, h.Goal = s.shape, s.goal
		out = append(out, h)
	}
	return out, nil
}
