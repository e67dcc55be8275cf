package workflows

import (
	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
)

// answerStream turns the token batches of one model call into token events.
//
// A call may be attempted more than once: a lost worker, a hung or failing
// model server. Each attempt streams its own answer from the start, and a
// retry's answer is often worded otherwise. The stream publishes each
// attempt's text only where it goes beyond what was already published; when
// an attempt's text departs from it, the next token event carries
// Reset: the answer's text so far is void, and Data starts it again. So the
// token events of a call, applied in order, always spell the text of the
// attempt that streamed last, and in the end the call's answer.
type answerStream struct {
	// published is the text the token events of this call spell so far.
	published string
	// attempt is the newest attempt heard from; received is its text so far.
	attempt  int32
	received string
}

// take adds a batch of the call's text and returns the token event that
// publishes what it adds, if any. Batches of an attempt older than the
// newest one heard from, and batches that leave a gap, are dropped.
func (s *answerStream) take(b activities.TokenBatch) (protocol.Event, bool) {
	switch {
	case b.Attempt < s.attempt:
		return protocol.Event{}, false
	case b.Attempt > s.attempt:
		s.attempt, s.received = b.Attempt, ""
	}
	end := b.Offset + len(b.Text)
	if b.Offset > len(s.received) || end <= len(s.received) {
		return protocol.Event{}, false
	}
	s.received = s.received[:b.Offset] + b.Text
	return s.publish(s.received, false)
}

// finish takes the call's answer, as its result carries it, and returns the
// token event that completes or corrects what was published, if any.
func (s *answerStream) finish(content string) (protocol.Event, bool) {
	return s.publish(content, true)
}

// publish makes the published text follow text, as activities.NextPiece
// says (the model activity follows the same rule when it streams by
// heartbeat).
func (s *answerStream) publish(text string, final bool) (protocol.Event, bool) {
	p, ok := activities.NextPiece(s.published, text, final)
	if !ok {
		return protocol.Event{}, false
	}
	if p.Reset {
		s.published = ""
	}
	s.published += p.Data
	return protocol.Event{Type: protocol.EventToken, Data: p.Data, Reset: p.Reset}, true
}
