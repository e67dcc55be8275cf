package contract

import "github.com/tollgate/tollgate/protocol"

// EventsRequest is the input of the events query.
type EventsRequest struct {
	// After is the last sequence number the caller has; 0 for all events.
	After int `json:"after"`
}

// EventsResponse is the answer of the events query.
type EventsResponse struct {
	Events []protocol.Event `json:"events"`
	// Finished is true once the finish event is in the log: nothing follows.
	Finished bool `json:"finished"`
	// Live is set while a model call streams its token events by heartbeat.
	Live *LiveTokens `json:"live,omitempty"`
}

// LiveTokens names the model call whose token events are in its activity's
// heartbeat details (a protocol.TokenProgress) while it runs: the i-th of
// them (from 0) is the turn's event After+1+i, and the turn logs them under
// those numbers when the call ends, however it ends.
type LiveTokens struct {
	ActivityID string `json:"activityId"`
	After      int    `json:"after"`
}

// EventsAfter answers an events read from a turn's whole log (numbered from
// 1 without gaps, as a turn's is): the events after seq.
func EventsAfter(log []protocol.Event, seq int) EventsResponse {
	seq = max(seq, 0)
	resp := EventsResponse{Events: []protocol.Event{}, Finished: Finished(log)}
	if seq < len(log) {
		resp.Events = append(resp.Events, log[seq:]...)
	}
	return resp
}

// Finished reports whether a turn's log is complete: its last event is
// finish.
func Finished(log []protocol.Event) bool {
	return len(log) > 0 && log[len(log)-1].Type == protocol.EventFinish
}
