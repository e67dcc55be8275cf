package main

import (
	"fmt"
	"io"
	"sync/atomic"
)

// metrics are the API's counters. They show that streaming costs what it
// should: one poller per watched turn, however many clients watch it.
type metrics struct {
	// pollersStarted counts the turn pollers ever started.
	pollersStarted atomic.Int64
	// pollersRunning is the number of turn pollers running now.
	pollersRunning atomic.Int64
	// eventQueries counts the reads of a turn's events from Temporal.
	eventQueries atomic.Int64
	// openStreams is the number of SSE streams open now.
	openStreams atomic.Int64
}

// metricsContentType is the Prometheus text exposition format.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// writeTo writes the metrics in the Prometheus text format.
func (m *metrics) writeTo(w io.Writer) error {
	for _, mt := range []struct {
		name, kind, help string
		value            int64
	}{
		{"tollgate_api_pollers_started_total", "counter", "Turn pollers started; one per watched turn per API process.", m.pollersStarted.Load()},
		{"tollgate_api_pollers_running", "gauge", "Turn pollers running now.", m.pollersRunning.Load()},
		{"tollgate_api_event_queries_total", "counter", "Reads of a turn's events from Temporal.", m.eventQueries.Load()},
		{"tollgate_api_open_streams", "gauge", "Event streams open now.", m.openStreams.Load()},
	} {
		if _, err := fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", mt.name, mt.help, mt.name, mt.kind, mt.name, mt.value); err != nil {
			return err
		}
	}
	return nil
}
