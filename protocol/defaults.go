package protocol

import "time"

// Defaults that the configuration fills in and that the workflows give to
// settings which leave them out, defined here once (docs/protocol.md lists
// them with every variable).
const (
	// DefaultTaskQueue is the task queue the worker polls and the API
	// starts conversations on unless TOLLGATE_TASK_QUEUE says otherwise.
	DefaultTaskQueue = "tollgate"
	// DefaultApprovalTimeout is how long a call waits for a decision
	// before it is declined as timed out.
	DefaultApprovalTimeout = 3 * time.Minute
	// DefaultMaxSteps bounds the model calls of one turn.
	DefaultMaxSteps = 25
	// DefaultBashTimeout is how long one Bash call may run, and the most
	// it may ask for.
	DefaultBashTimeout = 2 * time.Minute
	// DefaultContextBudget is the size of the model's view of a
	// conversation, in bytes of message text, past which a turn compacts
	// it: about 100,000 tokens at four bytes a token, inside the context
	// window of the models tollgate is used with (128k and up). Frozen:
	// turns whose recorded settings predate ContextBudget compact at it on
	// replay (docs/versioning.md).
	DefaultContextBudget = 400 << 10
)
