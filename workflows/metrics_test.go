package workflows

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

// exposition renders the named metrics of h's registry as GET /metrics
// shows them.
func (h *harness) exposition(names ...string) string {
	h.t.Helper()
	text, err := testutil.GatherAndFormat(h.metrics, expfmt.TypeTextPlain, names...)
	require.NoError(h.t, err)
	return string(text)
}

func TestApprovedTurnCountsOneRequestAndOneApproveDecision(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("b", "Bash", `{"command":"ls"}`)))
	AddApprovalsPending(h.metrics)
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove})
	}, 90*time.Second)

	out := h.runTurn(userTurn("list"))
	require.Equal(t, protocol.FinishStop, out.FinishReason)

	// The test environment adds no workflow_type tag, as a worker does:
	// the worker's test checks that one.
	approve := map[string]string{MetricTagDecision: protocol.DecisionApprove}
	require.Equal(t, 1.0, h.metrics.Sum(ApprovalRequestsMetric, nil))
	require.Equal(t, 1.0, h.metrics.Sum(ApprovalDecisionsMetric, approve))
	require.Equal(t, 1.0, h.metrics.Sum(ApprovalDecisionsMetric, nil), "no other decision was counted")
	require.EqualValues(t, 1, h.metrics.Count(ApprovalDecisionLatencyMetric, approve))

	text := h.exposition(ApprovalDecisionLatencyMetric, ApprovalsPendingMetric)
	require.Contains(t, text, "# TYPE tollgate_approval_decision_latency_seconds histogram\n")
	// The decision came 90 s after the request, in workflow time.
	require.Regexp(t, `tollgate_approval_decision_latency_seconds_sum\{decision="approve"[^}]*\} 90\n`, text)
	require.Regexp(t, `tollgate_approval_decision_latency_seconds_bucket\{decision="approve",[^}]*le="60"\} 0\n`, text)
	require.Regexp(t, `tollgate_approval_decision_latency_seconds_bucket\{decision="approve",[^}]*le="300"\} 1\n`, text)
	require.Contains(t, text, "\ntollgate_approvals_pending 0\n")
}

func TestDeclineAndTimeoutAreCountedByDecision(t *testing.T) {
	settings := testSettings()
	settings.ApprovalTimeout = time.Hour
	h := newHarness(t, settings, calls(
		call("w", "Write", `{"file_path":"x","content":"y"}`),
		call("b", "Bash", `{"command":"ls"}`),
	))
	AddApprovalsPending(h.metrics)
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionDecline, Reason: "no"})
	}, time.Minute)
	pendingWhileBashWaits := ""
	h.env.RegisterDelayedCallback(func() {
		pendingWhileBashWaits = h.exposition(ApprovalsPendingMetric)
	}, 2*time.Minute)

	h.runTurn(userTurn("write and list"))

	require.Contains(t, pendingWhileBashWaits, "\ntollgate_approvals_pending 1\n", "while Bash still waits, the derived gauge shows it")
	require.Contains(t, h.exposition(ApprovalsPendingMetric), "\ntollgate_approvals_pending 0\n")
	require.Equal(t, 2.0, h.metrics.Sum(ApprovalRequestsMetric, nil))
	require.Equal(t, 1.0, h.metrics.Sum(ApprovalDecisionsMetric, map[string]string{MetricTagDecision: protocol.DecisionDecline}))
	require.Equal(t, 1.0, h.metrics.Sum(ApprovalDecisionsMetric, map[string]string{MetricTagDecision: protocol.DecisionTimeout}))
	require.Zero(t, h.metrics.Sum(ApprovalDecisionsMetric, map[string]string{MetricTagDecision: protocol.DecisionApprove}))
}
