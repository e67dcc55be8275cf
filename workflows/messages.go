package workflows

import (
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// Interrupt is the payload of the interrupt signal.
type Interrupt struct {
	Reason string `json:"reason"`
}

// TurnInput starts a ChatTurn.
type TurnInput struct {
	ConversationID string `json:"conversationId"`
	Turn           int    `json:"turn"`
	// Messages is the conversation so far, ending with the new user
	// message, from its message Offset on: the first Offset messages are
	// those Compaction's summary stands for.
	Messages       []protocol.Message  `json:"messages"`
	Offset         int                 `json:"offset,omitempty"`
	Compaction     contract.Compaction `json:"compaction,omitzero"`
	BypassApproval bool                `json:"bypassApproval,omitempty"`
	// Sender is the principal who sent the message.
	Sender string `json:"sender,omitempty"`
	// Grants are the conversation's remembered decisions when the turn
	// starts.
	Grants []contract.Grant `json:"grants,omitempty"`
	// ClientTools are the tools the client runs itself.
	ClientTools []protocol.ToolSpec `json:"clientTools,omitempty"`
	// Spent is what the conversation's earlier turns spent, and Raised the
	// conversation budgets people raised, for the conversation budgets.
	Spent  contract.Usage   `json:"spent,omitempty,omitzero"`
	Raised contract.Budgets `json:"raised,omitempty,omitzero"`
}

// page cuts the page req asks for out of msgs.
func page(msgs []protocol.Message, req contract.MessagesRequest) contract.MessagesPage {
	limit := req.Limit
	if limit <= 0 {
		limit = contract.DefaultMessagesPage
	}
	limit = min(limit, contract.MaxMessagesPage)
	from := min(max(req.Offset, 0), len(msgs))
	to := min(from+limit, len(msgs))
	return contract.MessagesPage{Offset: from, Total: len(msgs), Messages: append([]protocol.Message{}, msgs[from:to]...)}
}
