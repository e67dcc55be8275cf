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
	// DefaultFlushInterval is how often, at most, a streaming model call
	// sends the answer's text on (its heartbeat throttle), and so how often
	// the API reads it.
	DefaultFlushInterval = 150 * time.Millisecond
	// DefaultContextBudget is the size of the model's view of a
	// conversation, in bytes of message text, past which a turn compacts
	// it: about 100,000 tokens at four bytes a token, inside the context
	// window of the models tollgate is used with (128k and up). Frozen:
	// turns whose recorded settings predate ContextBudget compact at it on
	// replay (docs/versioning.md).
	DefaultContextBudget = 400 << 10
	// DefaultContextWindow is the context window, in tokens, of a model
	// whose name tollgate does not know (TOLLGATE_MODEL_CONTEXT_WINDOW
	// says otherwise).
	DefaultContextWindow = 128000
	// DefaultContextRecent is the share of the model's view, in percent,
	// that the newest whole turns may take before older ones are
	// summarized (TOLLGATE_CONTEXT_RECENT_PERCENT).
	DefaultContextRecent = 25
	// BytesPerToken is how many bytes of text the workflows count as a
	// token when they fit a view to a window: fewer than the four of
	// English text, for code, logs and JSON.
	//
	// These three are frozen, as DefaultContextBudget is: settings
	// recorded before them take the defaults on replay, and the count
	// decides when a turn summarizes (docs/versioning.md).
	BytesPerToken = 3
)
