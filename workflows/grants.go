package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
)

// RememberConversation is the only scope a decision can be remembered for.
const RememberConversation = protocol.RememberConversation

// reasonRemembered is the reason shown for a decision a grant made.
const reasonRemembered = "remembered decision"

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
	// the grant makes is recorded as theirs.
	By string `json:"by,omitempty"`
}

// RevokeGrant is the payload of the conversation's revokeGrant Update.
type RevokeGrant struct {
	GrantID string `json:"grantId"`
}

// grantFor returns the newest grant that covers call, or nil.
func grantFor(grants []Grant, call activities.ToolCall) *Grant {
	if len(grants) == 0 {
		return nil
	}
	args := canonicalJSON(call.Arguments)
	for i := len(grants) - 1; i >= 0; i-- {
		g := &grants[i]
		if g.Tool == call.Name && (g.Arguments == "" || g.Arguments == args) {
			return g
		}
	}
	return nil
}

// grantFrom makes the grant a remembered decision on a asks for.
func grantFrom(a *approval, turnID string) Grant {
	g := Grant{
		ID:        grantID(a.RequestID),
		Tool:      a.Call.Name,
		Decision:  a.decision,
		Reason:    a.reason,
		TurnID:    turnID,
		CreatedAt: a.decidedAt,
		By:        a.by,
	}
	if a.sameArguments {
		args := a.Call.Arguments
		if a.arguments != "" {
			args = a.arguments
		}
		g.Arguments = canonicalJSON(args)
	}
	return g
}

// grantID is the id of the grant that the decision of request requestID
// makes.
func grantID(requestID string) string {
	return "grant-" + requestSecret(requestID)
}

// canonicalJSON re-encodes a JSON text with sorted keys and no spaces, so
// that equal arguments compare equal however the model spaced them.
func canonicalJSON(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return s
	}
	return string(b)
}

// revoke removes the grant with id from grants.
func revoke(grants []Grant, id string) ([]Grant, error) {
	i := slices.IndexFunc(grants, func(g Grant) bool { return g.ID == id })
	if i < 0 {
		return grants, fmt.Errorf("grant %q: %w", id, errUnknownGrant)
	}
	return slices.Delete(grants, i, i+1), nil
}
