package protocol

import "time"

// FreezeRequest is the body of POST /admin/freeze: while the gate is
// frozen every call a rule protects asks a person (no grant, no sandbox:
// auto, no bypassApproval answers it), and with BlockNewTurns no new
// message starts a turn.
type FreezeRequest struct {
	Reason        string `json:"reason,omitempty"`
	BlockNewTurns bool   `json:"blockNewTurns,omitempty"`
}

// ThawRequest is the body of POST /admin/thaw (it may be empty).
type ThawRequest struct {
	Reason string `json:"reason,omitempty"`
}

// GateFreeze is whether the gate is frozen, by whom, since when and why:
// the answer of GET /admin/freeze, POST /admin/freeze and POST
// /admin/thaw. By and At name the last change (a thaw's too).
type GateFreeze struct {
	Frozen        bool      `json:"frozen"`
	BlockNewTurns bool      `json:"blockNewTurns,omitempty"`
	By            string    `json:"by,omitempty"`
	At            time.Time `json:"at,omitzero"`
	Reason        string    `json:"reason,omitempty"`
}

// DelegationRequest is the body of PUT /delegations: From's decisions may
// be made by To from Since (now when omitted) until Until.
type DelegationRequest struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Since  time.Time `json:"since,omitzero"`
	Until  time.Time `json:"until"`
	Reason string    `json:"reason,omitempty"`
}

// Delegation is one stand-in: To decides for From between Since and
// Until, as By (an admin) set at At.
type Delegation struct {
	ID     string    `json:"id"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
}

// Active reports whether d lets its To decide for its From at now.
func (d Delegation) Active(now time.Time) bool {
	return !now.Before(d.Since) && now.Before(d.Until)
}

// Delegations is the answer of GET /delegations and PUT /delegations:
// every delegation not yet over, in the order they were set.
type Delegations struct {
	Delegations []Delegation `json:"delegations"`
}
