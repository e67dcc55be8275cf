package workflows

import (
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// eventLog is a turn's append-only list of events.
type eventLog struct {
	events []protocol.Event
	// onAppend, when set, sees every event as it is added: a subagent
	// forwards its events to its parent through it.
	onAppend func(protocol.Event)
}

// append numbers e and adds it to the log.
func (l *eventLog) append(e protocol.Event) {
	e.Seq = len(l.events) + 1
	l.events = append(l.events, e)
	if l.onAppend != nil {
		l.onAppend(e)
	}
}

// after returns the events with a sequence number greater than seq.
func (l *eventLog) after(seq int) contract.EventsResponse { return contract.EventsAfter(l.events, seq) }
