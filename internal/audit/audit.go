// Package audit is the approval ledger's row: a row for every call the
// gate asked a person about or a remembered decision answered, with what
// asked, who decided what, with which edits, and what the tool then did.
// The ledger outlives the namespace's retention, which deletes the
// workflow histories that hold the same facts.
//
// The worker writes rows (a local activity of the turn, idempotent: a row
// is keyed by its request, and a retry or a replay writes the same values
// again) and the API reads them (GET /audit); package auditdb keeps them
// in SQLite or PostgreSQL. This package holds no database code, so that
// the workflows, which build rows, link none.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Stages of a row: written when the call asks, again when it is decided
// (while others of its batch may still wait), and completed when it ended;
// a write of an earlier stage never overwrites a later one (a retry that
// arrives late).
const (
	StageAsked   = 1
	StageDecided = 2
	StageEnded   = 3
)

// Outcomes of a call, as the tool result's status says them.
const (
	OutcomeOK     = "ok"
	OutcomeError  = "error"
	OutcomeNotRun = "not_run"
)

// Record is one row of the ledger.
type Record struct {
	// ID is the approval request's id, or for a call a remembered decision
	// answered, grant:<workflow id>:<step>:<tool call id>.
	ID             string `json:"id"`
	Stage          int    `json:"stage"`
	ConversationID string `json:"conversationId"`
	TurnID         string `json:"turnId"`
	// WorkflowID is the turn's, or a subagent's child workflow's; Agent
	// names the subagent, empty for the turn itself.
	WorkflowID string `json:"workflowId"`
	Agent      string `json:"agent,omitempty"`
	ToolCallID string `json:"toolCallId"`
	Tool       string `json:"tool"`
	// Arguments are the call's as the person was shown them.
	Arguments string `json:"arguments"`
	// Asked says what made the call ask: the policy rule, or the default.
	Asked string `json:"asked,omitempty"`
	// Sender is the principal who sent the message that led to the call.
	Sender      string     `json:"sender,omitempty"`
	RequestedAt time.Time  `json:"requestedAt"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`

	// Decision is approve, decline or timeout; DecidedBy what decided
	// (person, timer, turn, grant); Principal and Role who, when a person.
	Decision  string     `json:"decision,omitempty"`
	DecidedBy string     `json:"decidedBy,omitempty"`
	Principal string     `json:"principal,omitempty"`
	Role      string     `json:"role,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Grant     string     `json:"grant,omitempty"`
	DecidedAt *time.Time `json:"decidedAt,omitempty"`
	// EditedArguments are what ran when the person edited the call before
	// approving it, and EditDiff says what changed.
	EditedArguments string `json:"editedArguments,omitempty"`
	EditDiff        string `json:"editDiff,omitempty"`

	// Outcome is ok, error or not_run; Result the start of what the tool
	// answered (or why it did not run).
	Outcome    string     `json:"outcome,omitempty"`
	Result     string     `json:"result,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	// Preview says what the call will do, as the person was shown it;
	// UserMessage is the start of the message that led to the call (at
	// most UserMessageBytes). Rows written before the ledger had them
	// have neither.
	Preview     string `json:"preview,omitempty"`
	UserMessage string `json:"userMessage,omitempty"`
	// Sandbox is, for a Bash call that ran in the sandbox before it asked,
	// SandboxPreview while it waits and when it did not run (declined,
	// timed out), SandboxApplied when what it changed there was applied,
	// SandboxUnconfined when a person chose to run it for real. Empty for
	// any other call, and in rows written before the sandbox.
	Sandbox string `json:"sandbox,omitempty"`
	// Shadow is what the shadow rule of the call's tool would have done:
	// ShadowWouldAsk, ShadowWouldNotAsk, or ShadowCouldNotDecide (then it
	// would have asked). Empty for a tool without one, and in rows written
	// before shadow rules. A call the policy let run unasked has a row
	// (decided by the policy) only when its shadow rule would have asked.
	Shadow string `json:"shadow,omitempty"`
	// OnBehalfOf names whom Principal decided for as their stand-in (PUT
	// /delegations): "bob for alice". Empty otherwise, and in rows
	// written before stand-ins.
	OnBehalfOf string `json:"onBehalfOf,omitempty"`
	// Kind is empty for a call's row, and names an admin's change for the
	// row of one (KindFreeze, KindThaw, KindDelegate, KindUndelegate):
	// its Tool is AdminTool, Principal the admin, Reason theirs, Arguments what changed (a
	// JSON object), RequestedAt and DecidedAt when.
	Kind string `json:"kind,omitempty"`
	// Deciders and Votes say, of a call whose rule names who may decide
	// it, who may decide it now (a JSON array: the rule's deciders with
	// those its escalation steps added) and, for a rule with a quorum,
	// where its voting stands (a JSON object: protocol.Votes, with who may
	// still vote): GET /approvals shows a waiting call's as the turn's
	// pending query does. The worker writes the asked row again at each
	// vote and escalation step; its later stages keep them as they stood
	// at the decision. Empty for a call whose rule names nobody, in a
	// vote's or an escalation step's own row, and in rows written before.
	Deciders string `json:"deciders,omitempty"`
	Votes    string `json:"votes,omitempty"`
	// Hash is the ledger's own: the hash of the row's latest entry in the
	// ledger's chain (chain.go), which proves the row as it reads. Empty
	// in what a turn writes (Write ignores it), and out of the content
	// the chain hashes (Canonical).
	Hash string `json:"hash,omitempty"`
}

// Kinds of an admin's row (Record.Kind), whose Tool is AdminTool.
const (
	AdminTool      = "tollgate-admin"
	KindFreeze     = "freeze"
	KindThaw       = "thaw"
	KindDelegate   = "delegate"
	KindUndelegate = "undelegate"
)

// What a ledger row says of a sandboxed call (Record.Sandbox).
const (
	SandboxPreview    = "preview"
	SandboxApplied    = "applied"
	SandboxUnconfined = "unconfined"
)

// What a ledger row says its tool's shadow rule would have done
// (Record.Shadow).
const (
	ShadowWouldAsk       = "would ask"
	ShadowWouldNotAsk    = "would not ask"
	ShadowCouldNotDecide = "could not decide"
)

// DecidedByPolicy is the DecidedBy of a call's row when no rule asked:
// only a call whose shadow rule would have asked has one.
const DecidedByPolicy = "policy"

// DecidedBy of the rows of a vote on a call of a rule with a quorum, and
// of an escalation step a call passed: rows of their own beside the
// call's (vote:<request id>:<voter>, escalation:<request id>:<step>),
// which decide nothing themselves.
const (
	DecidedByVote       = "vote"
	DecidedByEscalation = "escalation"
)

// Note reports whether r is a vote's, an escalation step's or an admin's
// change's row (Kind), not a call's: what counts calls (a backtest) skips
// it.
func (r Record) Note() bool {
	return r.Kind != "" || r.DecidedBy == DecidedByVote || r.DecidedBy == DecidedByEscalation
}

// Disagrees reports whether r's shadow rule would have done otherwise than
// the live policy did: it would not have asked of a call that asked (or
// that a grant or the sandbox answered in a person's place), or it would
// have asked of one no rule asked about. The ledger's filter of the same
// name (auditdb.Filter.Shadow) selects these rows.
func (r Record) Disagrees() bool {
	if r.Shadow == "" {
		return false
	}
	return (r.Shadow == ShadowWouldNotAsk) == (r.DecidedBy != DecidedByPolicy)
}

// UserMessageBytes bounds a row's UserMessage: what GET /approvals shows of
// the message, as the turn's pending query does.
const UserMessageBytes = 500

// MaxResult bounds the bytes of a row's Result: the ledger says what
// happened, the history and the transcript keep all of it.
const MaxResult = 4 << 10

// Writer writes rows: package auditdb's Ledger.
type Writer interface {
	Write(ctx context.Context, records []Record) error
}

// EditDiff says what an edit changed in a call's JSON arguments, a line per
// top-level key ("- key: before", "+ key: after"); arguments that are not
// JSON objects are shown whole.
func EditDiff(before, after string) string {
	var b, a map[string]json.RawMessage
	if json.Unmarshal([]byte(before), &b) != nil || json.Unmarshal([]byte(after), &a) != nil {
		return "- " + before + "\n+ " + after
	}
	var out strings.Builder
	keys := append(slices.Collect(maps.Keys(b)), slices.Collect(maps.Keys(a))...)
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		bv, inB := b[k]
		av, inA := a[k]
		if inB && inA && compact(bv) == compact(av) {
			continue
		}
		if inB {
			fmt.Fprintf(&out, "- %s: %s\n", k, compact(bv))
		}
		if inA {
			fmt.Fprintf(&out, "+ %s: %s\n", k, compact(av))
		}
	}
	return strings.TrimSuffix(out.String(), "\n")
}

func compact(v json.RawMessage) string {
	var x any
	if json.Unmarshal(v, &x) != nil {
		return string(v)
	}
	b, _ := json.Marshal(x)
	return string(b)
}

// Trimmed is r without what its row has had since it was asked and
// never changes (its arguments, preview and user's message): a later stage
// of a row the ledger has already, carried in an activity's input, need
// not repeat them (the ledger keeps a column a write leaves empty).
func (r Record) Trimmed() Record {
	r.Arguments, r.Preview, r.UserMessage = "", "", ""
	return r
}
