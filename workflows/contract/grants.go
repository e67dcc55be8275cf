package contract

import "time"

// Grant is a remembered decision: for the rest of its conversation, calls
// of Tool (with exactly Arguments, when set) are approved or declined
// without asking.
type Grant struct {
	ID       string `json:"id"`
	Tool     string `json:"tool"`
	Decision string `json:"decision"`
	// Arguments, when set, is the canonical JSON of the only arguments the
	// grant covers.
	Arguments string    `json:"arguments,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	TurnID    string    `json:"turnId"`
	CreatedAt time.Time `json:"createdAt"`
	// By names who made the decision the grant remembers; every decision
	// the grant makes is recorded as theirs. Role is the role of the API
	// token they decided with, if any, and Teams its team roles. A grant
	// answers only a call that By (in Role and Teams) may decide under the
	// rule in force when the call comes (deciders, second person): see the
	// workflows' turn.grantsFor.
	By    string   `json:"by,omitempty"`
	Role  string   `json:"role,omitempty"`
	Teams []string `json:"teams,omitempty"`
	// ExpiresAt, when set, ends the grant (the decision's rememberFor).
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Uses, when not 0, is how many calls the grant decides
	// (rememberUses); Used is how many it has decided.
	Uses int `json:"uses,omitempty"`
	Used int `json:"used,omitempty"`
	// When, when set, is a CEL expression over a call's arguments and its
	// tool's annotations (rememberWhen): the grant decides only the calls
	// for which it is true.
	When string `json:"when,omitempty"`
}

// RevokeGrant is the payload of the conversation's revokeGrant Update.
type RevokeGrant struct {
	GrantID string `json:"grantId"`
}
