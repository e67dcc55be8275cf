package contract

import "time"

// Budgets bound what a turn, and a conversation, may spend: the model's
// tokens (as its server reports them), tool calls run, and wall time. A
// zero field is no bound.
type Budgets struct {
	TurnTokens            int           `json:"turnTokens,omitempty"`
	TurnToolCalls         int           `json:"turnToolCalls,omitempty"`
	TurnTime              time.Duration `json:"turnTime,omitempty"`
	ConversationTokens    int           `json:"conversationTokens,omitempty"`
	ConversationToolCalls int           `json:"conversationToolCalls,omitempty"`
	ConversationTime      time.Duration `json:"conversationTime,omitempty"`
}

// Usage is what a turn or a conversation spent.
type Usage struct {
	Tokens    int           `json:"tokens,omitempty"`
	ToolCalls int           `json:"toolCalls,omitempty"`
	Time      time.Duration `json:"time,omitempty"`
}

// Add is u and v together.
func (u Usage) Add(v Usage) Usage {
	return Usage{Tokens: u.Tokens + v.Tokens, ToolCalls: u.ToolCalls + v.ToolCalls, Time: u.Time + v.Time}
}
