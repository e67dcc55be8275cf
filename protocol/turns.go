package protocol

// TurnSummary is one turn of a conversation as
// GET /conversations/:conversationId/turns lists it.
type TurnSummary struct {
	TurnID string `json:"turnId"`
	// Message is the start of the user's message the turn answers (its
	// first 200 characters, the turn's summary in the Temporal Web UI);
	// empty for a turn that has not started yet or that Temporal no
	// longer keeps.
	Message string `json:"message"`
}

// TurnList answers GET /conversations/:conversationId/turns: the
// conversation's last turns, oldest first.
type TurnList struct {
	ConversationID string        `json:"conversationId"`
	Turns          []TurnSummary `json:"turns"`
}
