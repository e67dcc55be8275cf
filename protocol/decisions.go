package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Decisions a person (or the clock) makes on an approval request.
const (
	DecisionApprove = "approve"
	DecisionDecline = "decline"
	DecisionTimeout = "timeout"
)

// Principals that name no API token: who a decision is recorded as when it
// came through a signed link (PrincipalLink) or a Temporal signal that named
// nobody (PrincipalTemporal). No token may be called either, or its
// decisions would read as theirs, and a rule's deciders that list one
// would take the other.
const (
	PrincipalLink     = "link"
	PrincipalTemporal = "temporal"
)

// RememberConversation is the only scope a decision can be remembered for.
const RememberConversation = "conversation"

// Reasons a decision, or a client tool's result, is not taken: what the
// API answers in {"accepted": false, "reason": ...}.
const (
	// RejectUnknown: no such request in the workflow (a forged or mistyped
	// id, or one of another workflow).
	RejectUnknown = "unknown"
	// RejectDecided: the request was decided already, by someone else, a
	// grant, the clock or a cancellation.
	RejectDecided = "decided"
	// RejectExpired: the request's time ran out.
	RejectExpired = "expired"
	// RejectForbidden: the policy says someone else must decide (its
	// deciders, or a second person).
	RejectForbidden = "forbidden"
	// RejectInvalid: the decision itself is not valid (edited arguments
	// the tool would refuse); the API answers it 400.
	RejectInvalid = "invalid"
	// RejectVoted: the request needs votes from several people (a rule's
	// quorum) and this principal has voted on it already.
	RejectVoted = "voted"
)

// ApprovalDecision is the payload of the approval Update and signal, and the
// body of POST /chat/approval.
type ApprovalDecision struct {
	RequestID string `json:"requestId"`
	// Decision is "approve" or "decline"; any other value is rejected.
	Decision string `json:"decision"`
	// Reason is shown to the model with a decline.
	Reason string `json:"reason,omitempty"`
	// Arguments, when set with an approve, replaces the call's arguments: it
	// must be a JSON object.
	Arguments string `json:"arguments,omitempty"`
	// Remember, "conversation", makes this decision for every later call of
	// the same tool in the conversation; with SameArguments, only for calls
	// with the same arguments.
	Remember      string `json:"remember,omitempty"`
	SameArguments bool   `json:"sameArguments,omitempty"`
	// RememberFor, with Remember, ends the grant this long after the
	// decision (a duration: "30m", "8h"); empty, it lasts the
	// conversation.
	RememberFor string `json:"rememberFor,omitempty"`
	// RememberUses, with Remember, is how many calls the grant decides
	// before it ends; 0, any number.
	RememberUses int `json:"rememberUses,omitempty"`
	// RememberWhen, with Remember, is a CEL expression over the call's
	// arguments (args) and its tool's annotations, as a policy rule's
	// when: the grant decides only the calls for which it is true.
	RememberWhen string `json:"rememberWhen,omitempty"`
	// Unconfined, with an approve of a call that ran in the Bash sandbox
	// (Event.Sandbox), runs the command for real, outside the sandbox,
	// instead of applying what it changed there: a separate, explicit
	// decision that the ledger records. It is the only way to approve an
	// edited command that the sandbox ran as first written.
	Unconfined bool `json:"unconfined,omitempty"`
	// Principal names who decided. The API sets it from the caller's bearer
	// token and overwrites whatever a body said; a client with Temporal
	// access (the CLI's signal or Update) is trusted to say who it is, and a
	// signal without one is recorded as "temporal".
	Principal string `json:"principal,omitempty"`
	// Role is the role of the API token the principal decided with
	// (approve or admin); empty for a decision by an API without tokens.
	// A signal's is what its sender wrote, trusted like its Principal.
	Role string `json:"role,omitempty"`
	// Teams are the team roles of the API token the principal decided
	// with (oncall, finance, ...; config.APIToken's Teams), which a rule's
	// role:NAME deciders name as they name Role: the API sets them,
	// overwriting whatever a body said. A signal's are what its sender
	// wrote, trusted like its Principal.
	Teams []string `json:"teams,omitempty"`
	// OnBehalfOf names the principal whose stand-in Principal is now (PUT
	// /delegations), when one is: the API sets it, overwriting whatever a
	// body said, and the rules then let Principal decide where the one
	// stood in for may. Empty for a decision in one's own name.
	OnBehalfOf string `json:"onBehalfOf,omitempty"`
}

// Check says what is wrong with d itself, whatever request it names: a
// decision other than approve or decline, edited arguments that are not a
// JSON object, a remember other than conversation. The API and the gate
// both ask it.
func (d ApprovalDecision) Check() error {
	switch d.Decision {
	case DecisionApprove:
		if d.Arguments != "" && !IsJSONObject(d.Arguments) {
			return errors.New("edited arguments are not a JSON object")
		}
	case DecisionDecline:
		if d.Unconfined {
			return errors.New("unconfined runs an approved command outside the sandbox: it needs the decision approve")
		}
	default:
		return fmt.Errorf("decision %q is neither %q nor %q", d.Decision, DecisionApprove, DecisionDecline)
	}
	if d.Remember != "" && d.Remember != RememberConversation {
		return fmt.Errorf("remember %q is not %q", d.Remember, RememberConversation)
	}
	if d.Remember == "" && (d.RememberFor != "" || d.RememberUses != 0 || d.RememberWhen != "") {
		return fmt.Errorf("rememberFor, rememberUses and rememberWhen limit a grant: they need remember %q", RememberConversation)
	}
	if d.RememberFor != "" {
		if _, err := d.RememberDuration(); err != nil {
			return err
		}
	}
	if d.RememberUses < 0 {
		return fmt.Errorf("rememberUses %d is negative", d.RememberUses)
	}
	return nil
}

// RememberDuration is RememberFor as a duration; 0 when it is empty.
func (d ApprovalDecision) RememberDuration() (time.Duration, error) {
	if d.RememberFor == "" {
		return 0, nil
	}
	v, err := time.ParseDuration(d.RememberFor)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("rememberFor %q is not a duration greater than zero (example: 8h)", d.RememberFor)
	}
	return v, nil
}

// IsJSONObject reports whether s is a JSON object.
func IsJSONObject(s string) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &v) == nil && v != nil
}

// ApprovalResult answers the approval Update, and POST /chat/approval.
type ApprovalResult struct {
	Accepted bool `json:"accepted"`
	// Reason says why a decision was not taken (a Reject reason); only the
	// API fills it in, from the validator's refusal.
	Reason string `json:"reason,omitempty"`
	// Message says more about a refusal where the API knows more: why the
	// request's turn ended, when the worker ended it because its history
	// names a payload that the payload store no longer holds.
	Message string `json:"message,omitempty"`
	// Pending, true, says the decision was taken as a vote and the request
	// still waits for more (a rule's quorum); Votes says where it stands,
	// and Message says it in words ("vote recorded, 1 of 2 approvals").
	Pending bool   `json:"pending,omitempty"`
	Votes   *Votes `json:"votes,omitempty"`
}

// Votes is where the voting on a request of a rule with a quorum stands:
// how many approvals and declines decide it, the votes cast so far in
// order, and who may still vote (the request's current deciders, minus
// those who voted; empty when the rule names none, as anyone may).
type Votes struct {
	Quorum   int      `json:"quorum"`
	Declines int      `json:"declines"`
	Cast     []Vote   `json:"cast"`
	MayVote  []string `json:"mayVote,omitempty"`
}

// Approvals counts the approve votes cast.
func (v *Votes) Approvals() int { return v.count(DecisionApprove) }

// Declined counts the decline votes cast.
func (v *Votes) Declined() int { return v.count(DecisionDecline) }

func (v *Votes) count(decision string) int {
	n := 0
	for _, c := range v.Cast {
		if c.Decision == decision {
			n++
		}
	}
	return n
}

// Vote is one principal's vote on a request.
type Vote struct {
	By   string `json:"by"`
	Role string `json:"role,omitempty"`
	// OnBehalfOf names whom By voted for as their stand-in (PUT
	// /delegations): the vote counts for both, so neither votes again.
	OnBehalfOf string    `json:"onBehalfOf,omitempty"`
	Decision   string    `json:"decision"`
	Reason     string    `json:"reason,omitempty"`
	At         time.Time `json:"at"`
}

// Voted reports whether principal cast v, or v was cast for them by their
// stand-in.
func (v Vote) Voted(principal string) bool {
	return principal != "" && (v.By == principal || v.OnBehalfOf == principal)
}

// MaxBatchDecisions bounds the decisions of one approvals Update (one POST
// /chat/approvals): a turn asks at most as many calls as its model sends
// in one step, and a batch past this is a mistake or an attack.
const MaxBatchDecisions = 100

// ApprovalBatch is the payload of the approvals Update: decisions on
// several requests of one workflow, taken all or none, in order.
type ApprovalBatch struct {
	Decisions []ApprovalDecision `json:"decisions"`
}

// ApprovalBatchResult answers the approvals Update, and POST
// /chat/approvals: every decision was taken, or none was, and then
// RequestID names the first one refused, Reason says why (a Reject
// reason, filled in by the API) and Message says it in words.
type ApprovalBatchResult struct {
	Accepted  bool   `json:"accepted"`
	Decided   int    `json:"decided,omitempty"`
	Reason    string `json:"reason,omitempty"`
	RequestID string `json:"requestId,omitempty"`
	Message   string `json:"message,omitempty"`
}

// PendingApproval is one approval a turn waits for, as the pending query
// and GET /approvals show it.
type PendingApproval struct {
	RequestID  string `json:"requestId"`
	WorkflowID string `json:"workflowId"`
	// TurnID is the turn the waiting workflow belongs to: WorkflowID for a
	// turn, the turn that started it for a subagent.
	TurnID         string    `json:"turnId"`
	ConversationID string    `json:"conversationId"`
	ToolCallID     string    `json:"toolCallId"`
	ToolName       string    `json:"toolName"`
	Arguments      string    `json:"arguments"`
	RequestedAt    time.Time `json:"requestedAt"`
	ExpiresAt      time.Time `json:"expiresAt"`
	// Preview says what the call will do (see Event.Preview).
	Preview string `json:"preview,omitempty"`
	// Subagent names the subagent that made the call (omitted for a
	// turn's own); UserMessage is the start of the user's message that led
	// to it.
	Subagent    string `json:"subagent,omitempty"`
	UserMessage string `json:"userMessage,omitempty"`
	// Sandboxed is true when the call ran in the Bash sandbox before it
	// asked: an approve applies what it changed there (the preview lists
	// it), and an approve with unconfined runs it for real.
	Sandboxed bool `json:"sandboxed,omitempty"`
	// Deciders are who may decide the call now: the rule's, with those its
	// escalation steps have added so far (omitted when the rule names
	// none); Votes, for a rule with a quorum, where its voting stands.
	Deciders []string `json:"deciders,omitempty"`
	Votes    *Votes   `json:"votes,omitempty"`
}
