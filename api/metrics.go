package main

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the API's counters. They show that streaming costs what it
// should (one poller per watched turn, however many clients watch it), what
// the API answers, and how the decisions it delivers fare. Each server has
// its own registry, so tests' servers count apart.
type metrics struct {
	registry *prometheus.Registry
	// pollersStarted counts the turn pollers ever started.
	pollersStarted prometheus.Counter
	// pollersRunning is the number of turn pollers running now.
	pollersRunning prometheus.Gauge
	// eventQueries counts the reads of a turn's events from Temporal.
	eventQueries prometheus.Counter
	// pendingQueries counts the queries of a waiting turn's pending
	// approvals: GET /approvals without the ledger asks every waiting turn.
	pendingQueries prometheus.Counter
	// liveReads counts the reads of a streaming model call's answer from
	// its heartbeat details.
	liveReads prometheus.Counter
	// openStreams is the number of SSE streams open now.
	openStreams prometheus.Gauge
	// keepAlivesHeld counts the keep-alives a stream held back while the
	// hub learned whether its turn is queued.
	keepAlivesHeld prometheus.Counter
	// requests counts answered requests by route, method and status.
	requests *prometheus.CounterVec
	// decisions counts decisions sent to turns by decision and outcome.
	decisions *prometheus.CounterVec
}

// Outcomes of a decision sent with POST /chat/approval (or in a batch of
// POST /chat/approvals, each decision counted with the batch's outcome).
const (
	outcomeAccepted = "accepted" // the waiting turn took it
	outcomeRejected = "rejected" // unknown, expired, already decided or forged
	outcomeError    = "error"    // Temporal could not be asked
)

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := promauto.With(reg)
	return &metrics{
		registry: reg,
		pollersStarted: f.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_api_pollers_started_total",
			Help: "Turn pollers started; one per watched turn per API process.",
		}),
		pollersRunning: f.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_api_pollers_running",
			Help: "Turn pollers running now.",
		}),
		eventQueries: f.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_api_event_queries_total",
			Help: "Reads of a turn's events from Temporal.",
		}),
		pendingQueries: f.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_api_pending_queries_total",
			Help: "Queries of a waiting turn's pending approvals: GET /approvals asks every waiting turn when it does not read the audit ledger, and a decision link asks its turn.",
		}),
		liveReads: f.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_api_live_reads_total",
			Help: "Reads of a running model call's answer from its heartbeat details (a turn's workflow description).",
		}),
		openStreams: f.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_api_open_streams",
			Help: "Event streams open now.",
		}),
		keepAlivesHeld: f.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_api_keepalives_held_total",
			Help: "Keep-alives a stream held back while the API asked the turn's conversation whether the turn waits in its queue, so that the queued notice comes first.",
		}),
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_api_requests_total",
			Help: "Requests answered, by route, method and status; a stream counts when it ends.",
		}, []string{"route", "method", "status"}),
		decisions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_api_approval_decisions_total",
			Help: "Approval decisions sent to turns, by decision and outcome (accepted, rejected, error).",
		}, []string{"decision", "outcome"}),
	}
}

// request counts one answered request by route (the route pattern, so turn
// ids do not make a series each), method and status.
func (m *metrics) request(route, method string, status int) {
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
}

// decision counts one decision sent to a turn, by decision and outcome.
func (m *metrics) decision(decision, outcome string) {
	m.decisions.WithLabelValues(decision, outcome).Inc()
}
