package workflows

import (
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// raisedBy is b with the bounds r raised (its non-zero fields).
func raisedBy(b, r contract.Budgets) contract.Budgets {
	if r.ConversationTokens > 0 {
		b.ConversationTokens = r.ConversationTokens
	}
	if r.ConversationToolCalls > 0 {
		b.ConversationToolCalls = r.ConversationToolCalls
	}
	if r.ConversationTime > 0 {
		b.ConversationTime = r.ConversationTime
	}
	return b
}

// wantsUsage reports whether the model must report its token usage.
func wantsUsage(b contract.Budgets) bool { return b.TurnTokens > 0 || b.ConversationTokens > 0 }

// BudgetRequest is the arguments of a budget's approval request: which
// budget, its limit, what is spent, and what approving raises it to (a
// person may edit raiseTo before approving). Times are in seconds.
type BudgetRequest struct {
	Budget  string `json:"budget"`
	Limit   int64  `json:"limit"`
	Spent   int64  `json:"spent"`
	RaiseTo int64  `json:"raiseTo"`
	Unit    string `json:"unit"`
}

// budget is one bound as the loop checks it.
type budget struct {
	name  string
	unit  string
	limit *int64
	spent int64
	// conversation is true for a conversation's budget, whose raise the
	// conversation keeps.
	conversation bool
}

// budgets lists the loop's bounds with what is spent against each.
func (t *turn) budgets(ctx workflow.Context) []budget {
	turn := t.used
	turn.Time = workflow.Now(ctx).Sub(t.startedAt)
	conv := t.spent.Add(turn)
	return []budget{
		{"turn tokens", "tokens", &t.limits.turnTokens, int64(turn.Tokens), false},
		{"turn tool calls", "tool calls", &t.limits.turnToolCalls, int64(turn.ToolCalls), false},
		{"turn time", "seconds", &t.limits.turnTime, int64(turn.Time / time.Second), false},
		{"conversation tokens", "tokens", &t.limits.conversationTokens, int64(conv.Tokens), true},
		{"conversation tool calls", "tool calls", &t.limits.conversationToolCalls, int64(conv.ToolCalls), true},
		{"conversation time", "seconds", &t.limits.conversationTime, int64(conv.Time / time.Second), true},
	}
}

// limits are a loop's bounds as numbers (times in seconds), raised as
// people approve.
type limits struct {
	turnTokens, turnToolCalls, turnTime                         int64
	conversationTokens, conversationToolCalls, conversationTime int64
}

// limitsOf are the bounds of settings, with a conversation's raises over
// them.
func limitsOf(b, raised contract.Budgets) limits {
	pick := func(set, raised int64) int64 {
		if raised > 0 {
			return raised
		}
		return set
	}
	return limits{
		turnTokens:            int64(b.TurnTokens),
		turnToolCalls:         int64(b.TurnToolCalls),
		turnTime:              int64(b.TurnTime / time.Second),
		conversationTokens:    pick(int64(b.ConversationTokens), int64(raised.ConversationTokens)),
		conversationToolCalls: pick(int64(b.ConversationToolCalls), int64(raised.ConversationToolCalls)),
		conversationTime:      pick(int64(b.ConversationTime/time.Second), int64(raised.ConversationTime/time.Second)),
	}
}

// checkBudgets asks a person, through the gate, about each bound the loop
// has reached: approved, the bound is raised (to the request's raiseTo, or
// the person's edit of it) and the loop goes on; declined, timed out or
// cancelled, it reports false and the loop ends with FinishBudget. Only a
// loop whose recorded settings have budgets asks anything, so no turn
// recorded before budgets existed issues a new command.
func (t *turn) checkBudgets(ctx workflow.Context) bool {
	if t.settings.Budgets == (contract.Budgets{}) || t.depth > 0 {
		// A subagent spends its turn's budget: the turn counts what it
		// spent when it returns, and asks then.
		return true
	}
	for _, b := range t.budgets(ctx) {
		if *b.limit <= 0 || b.spent < *b.limit {
			continue
		}
		req := BudgetRequest{Budget: b.name, Limit: *b.limit, Spent: b.spent, RaiseTo: b.spent + *b.limit, Unit: b.unit}
		args, _ := json.Marshal(req) // plain fields: cannot fail
		t.budgetAsks++
		call := protocol.ToolCall{ID: fmt.Sprintf("budget-%d", t.budgetAsks), Name: protocol.BudgetTool, Arguments: string(args)}
		note := fmt.Sprintf("the %s budget is spent: %d of %d %s; approve to go on with it raised to %d", b.name, b.spent, *b.limit, b.unit, req.RaiseTo)
		a := t.gate.request(ctx, call, t.settings.ApprovalTimeout, note, note)
		var row *audit.Record
		if t.auditing(ctx) {
			t.newBatchForLedger() // a budget's request is a batch of its own
			r := t.auditAsked(ctx, a, check{Required: true})
			r.Asked = note
			row = &r
			t.writeAudit(ctx, []audit.Record{r})
		}
		t.log.append(protocol.Event{Type: protocol.EventHeartbeat})
		t.gate.await(ctx, []*approval{a}, nil, false)
		raiseTo := req.RaiseTo
		if a.decision == protocol.DecisionApprove && a.arguments != "" {
			var edited BudgetRequest
			if json.Unmarshal([]byte(a.arguments), &edited) == nil && edited.RaiseTo > b.spent {
				raiseTo = edited.RaiseTo
			}
		}
		result := protocol.ToolResult{ID: call.ID, Name: call.Name, Status: protocol.StatusOK, Result: fmt.Sprintf("raised to %d %s", raiseTo, b.unit)}
		if a.decision != protocol.DecisionApprove {
			result.Status, result.Result = protocol.StatusDeclined, "not raised: the turn ends"
		}
		if row != nil {
			t.writeAudit(ctx, []audit.Record{auditEnded(ctx, *row, a, "", result)})
		}
		if a.decision != protocol.DecisionApprove && a.decidedBy == DecidedByTurn {
			// A new message, or a cancel: the turn ends as cancelled, not
			// for its budget.
			return false
		}
		if a.decision != protocol.DecisionApprove {
			why := map[string]string{protocol.DecisionTimeout: "nobody decided in time"}[a.decision]
			if why == "" {
				why = "a person declined to raise it"
				if a.reason != "" {
					why += " (" + text.Truncate(a.reason, 200) + ")"
				}
			}
			t.log.append(protocol.Event{Type: protocol.EventError, Message: fmt.Sprintf("the %s budget is spent (%d of %d %s) and %s, so the turn ends here; send a new message to go on",
				b.name, b.spent, *b.limit, b.unit, why)})
			return false
		}
		*b.limit = raiseTo
		if b.conversation {
			t.raiseConversation(b.name, raiseTo)
		}
	}
	return true
}

// raiseConversation keeps a raised conversation budget for the turn's
// output, so the conversation's later turns have it too.
func (t *turn) raiseConversation(name string, to int64) {
	switch name {
	case "conversation tokens":
		t.raised.ConversationTokens = int(to)
	case "conversation tool calls":
		t.raised.ConversationToolCalls = int(to)
	case "conversation time":
		t.raised.ConversationTime = time.Duration(to) * time.Second
	}
}

// checkBudgetEdit refuses an approval of a budget whose edited arguments do
// not raise it: raiseTo must be a number above what is spent.
func checkBudgetEdit(asked, edited string) error {
	var was, now BudgetRequest
	_ = json.Unmarshal([]byte(asked), &was) // the gate wrote it
	if err := json.Unmarshal([]byte(edited), &now); err != nil || now.RaiseTo <= was.Spent {
		return rejection(protocol.RejectInvalid, fmt.Errorf("the edited arguments of a budget raise it: raiseTo must be a whole number above %d (what is spent)", was.Spent))
	}
	return nil
}
