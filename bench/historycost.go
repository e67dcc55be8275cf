package bench

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// historyCost is the history one turn leaves.
type historyCost struct {
	Query          string
	TurnEvents     int
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
func (e *env) historyCost(ctx context.Context, query string) (historyCost, error) {
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
	for ev := range readStamped(resp.Body) {
		res.StreamedEvents++
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
	convID := workflows.ConversationWorkflowID(conv)
	if err := waitUntil(ctx, 10*time.Millisecond, func(ctx context.Context) (bool, error) {
		v, err := e.temporal.QueryWorkflow(ctx, convID, "", workflows.StateQuery)
		var st workflows.ConversationState
		return err == nil && v.Get(&st) == nil && st.Running == "" && st.Messages > 0, nil
	}); err != nil {
		return res, fmt.Errorf("conversation %s did not take its turn's result: %w", convID, err)
	}
	if res.ConvEvents, err = historyLength(ctx, e.temporal, convID); err != nil {
		return res, err
	}
	return res, nil
}
