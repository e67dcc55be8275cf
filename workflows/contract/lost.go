package contract

import "strings"

// lostPayloadPrefix starts the termination reason of a turn whose history
// names a missing payload.
const lostPayloadPrefix = "tollgate: lost payload: "

// LostPayloadReason is the termination reason of a turn whose history
// names the missing payload key.
func LostPayloadReason(key string) string {
	return lostPayloadPrefix + "the turn's history names payload " + key +
		", which is not in the payload store (deleted, or expired by the store's lifecycle rule): the turn cannot read its history and has ended"
}

// LostPayload returns what a termination reason says when it is
// LostPayloadReason's.
func LostPayload(reason string) (string, bool) {
	return strings.CutPrefix(reason, lostPayloadPrefix)
}
