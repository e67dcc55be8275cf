package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// Metrics that the workflows emit through workflow.GetMetricsHandler. The
// SDK tags each with namespace, task_queue and workflow_type (ChatTurn or
// Subagent) and drops them while a worker replays history, so a decision is
// counted once however often its workflow is replayed. Each name is the one
// Prometheus shows: it already ends in _total or _seconds.
const (
	// ApprovalRequestsMetric counts approval requests published.
	ApprovalRequestsMetric = "tollgate_approval_requests_total"
	// ApprovalDecisionsMetric counts decisions taken, tagged with
	// MetricTagDecision: approve, decline or timeout.
	ApprovalDecisionsMetric = "tollgate_approval_decisions_total"
	// ApprovalDecisionLatencyMetric times each request from its publication
	// to its decision, tagged with MetricTagDecision: a histogram in
	// seconds.
	ApprovalDecisionLatencyMetric = "tollgate_approval_decision_latency_seconds"
	// ApprovalsPendingMetric is the worker's derived gauge: the requests
	// minus the decisions this worker process has seen (see
	// AddApprovalsPending).
	ApprovalsPendingMetric = "tollgate_approvals_pending"

	// MetricTagDecision is the tag that names a decision's outcome.
	MetricTagDecision = "decision"
)

// MetricHelp holds the help texts of the workflows' metrics, by name.
var MetricHelp = map[string]string{
	ApprovalRequestsMetric:        "Approval requests published by turns and subagents.",
	ApprovalDecisionsMetric:       "Approval decisions taken, by decision (approve, decline, timeout).",
	ApprovalDecisionLatencyMetric: "Time from an approval request to its decision, by decision.",
	ApprovalsPendingMetric: "Approval requests minus decisions seen by this worker process since it started; " +
		"summed over all workers it is the number waiting, as long as no worker restarted while approvals were pending (GET /approvals is exact).",
}

// MetricsRegistry is what AddApprovalsPending needs of a registry
// (internal/metrics.Registry is one): the sum of a counter's series, and a
// gauge computed at each scrape.
type MetricsRegistry interface {
	Sum(name string, match map[string]string) float64
	GaugeFunc(name, help string, fn func() float64)
}

// AddApprovalsPending adds ApprovalsPendingMetric to r, computed from the
// two counters at each scrape. A gauge that each workflow moved up and down
// would not add up across workflows and workers; two counters do.
func AddApprovalsPending(r MetricsRegistry) {
	r.GaugeFunc(ApprovalsPendingMetric, MetricHelp[ApprovalsPendingMetric], func() float64 {
		return r.Sum(ApprovalRequestsMetric, nil) - r.Sum(ApprovalDecisionsMetric, nil)
	})
}

// countRequest records that an approval was requested.
func countRequest(ctx workflow.Context) {
	workflow.GetMetricsHandler(ctx).Counter(ApprovalRequestsMetric).Inc(1)
}

// countDecision records a decision and how long it took since requestedAt.
// Metrics create no commands, so this changes no workflow's history.
func countDecision(ctx workflow.Context, decision string, requestedAt time.Time) {
	m := workflow.GetMetricsHandler(ctx).WithTags(map[string]string{MetricTagDecision: decision})
	m.Counter(ApprovalDecisionsMetric).Inc(1)
	m.Timer(ApprovalDecisionLatencyMetric).Record(workflow.Now(ctx).Sub(requestedAt))
}
