package contract

import (
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/protocol"
)

// RejectionReason says why an Update's validator refused, when it is one
// of the Reject reasons, or "".
func RejectionReason(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		switch t := app.Type(); t {
		case protocol.RejectUnknown, protocol.RejectDecided, protocol.RejectExpired, protocol.RejectForbidden, protocol.RejectInvalid, protocol.RejectVoted:
			return t
		}
	}
	return ""
}

// RejectedRequest names the request whose decision made the approvals
// Update refuse its batch, or "" when err names none (an empty batch, one
// too large, or no refusal of that Update).
func RejectedRequest(err error) string {
	var app *temporal.ApplicationError
	var id string
	if errors.As(err, &app) && app.HasDetails() && app.Details(&id) == nil {
		return id
	}
	return ""
}
