package main

import (
	"fmt"
	"io"
	"strconv"
	"sync/atomic"

	tgmetrics "github.com/tollgate/tollgate/internal/metrics"
)

// metrics are the API's counters. They show that streaming costs what it
// should (one poller per watched turn, however many clients watch it), what
// the API answers, and how the decisions it delivers fare.
type metrics struct {
	// pollersStarted counts the turn pollers ever started.
	pollersStarted atomic.Int64
	// pollersRunning is the number of turn pollers running now.
	pollersRunning atomic.Int64
	// eventQueries counts the reads of a turn's events from Temporal.
	eventQueries atomic.Int64
	// openStreams is the number of SSE streams open now.
	openStreams atomic.Int64
	// labelled holds the counters with labels: requests and decisions.
	labelled tgmetrics.Registry
}

func newMetrics() *metrics {
	m := &metrics{}
	m.labelled.Describe(requestsMetric, "Requests answered, by route, method and status; a stream counts when it ends.")
	m.labelled.Describe(decisionsMetric, "Approval decisions sent to turns, by decision and outcome (accepted, rejected, error).")
	return m
}

// Names and labels of the API's labelled counters.
const (
	requestsMetric  = "tollgate_api_requests_total"
	decisionsMetric = "tollgate_api_approval_decisions_total"

	// Outcomes of a decision sent with POST /chat/approval.
	outcomeAccepted = "accepted" // the waiting turn took it
	outcomeRejected = "rejected" // unknown, expired, already decided or forged
	outcomeError    = "error"    // Temporal could not be asked
)

// request counts one answered request by route (the route pattern, so turn
// ids do not make a series each), method and status.
func (m *metrics) request(route, method string, status int) {
	if route == "" {
		route = "unmatched"
	}
	m.labelled.Handler().WithTags(map[string]string{
		"route": route, "method": method, "status": strconv.Itoa(status),
	}).Counter(requestsMetric).Inc(1)
}

// decision counts one decision sent to a turn, by decision and outcome.
func (m *metrics) decision(decision, outcome string) {
	m.labelled.Handler().WithTags(map[string]string{
		"decision": decision, "outcome": outcome,
	}).Counter(decisionsMetric).Inc(1)
}

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
	_, err := m.labelled.WriteTo(w)
	return err
}
