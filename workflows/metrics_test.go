package workflows

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestApprovedTurnCountsOneRequestAndOneApproveDecision(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("b", "Bash", `{"command":"ls"}`)))
	DescribeMetrics(h.metrics)
	h.env.RegisterDelayedCallback(func() {
		h.decide(ApprovalDecision{RequestID: h.requestID("Bash"), Decision: DecisionApprove})
	}, 90*time.Second)

	out := h.runTurn(userTurn("list"))
	require.Equal(t, FinishStop, out.FinishReason)

	approve := map[string]string{MetricTagDecision: DecisionApprove}
	require.Equal(t, 1.0, h.metrics.Sum(ApprovalRequestsMetric, nil))
	require.Equal(t, 1.0, h.metrics.Sum(ApprovalDecisionsMetric, approve))
	require.Equal(t, 1.0, h.metrics.Sum(ApprovalDecisionsMetric, nil), "no other decision was counted")
	require.EqualValues(t, 1, h.metrics.Count(ApprovalDecisionLatencyMetric, approve))

	var text strings.Builder
	_, err := h.metrics.WriteTo(&text)
	require.NoError(t, err)
	require.Contains(t, text.String(), "# TYPE tollgate_approval_decision_latency_seconds histogram\n")
	// The decision came 90 s after the request, in workflow time.
	require.Regexp(t, `tollgate_approval_decision_latency_seconds_sum\{decision="approve"[^}]*\} 90\n`, text.String())
	require.Regexp(t, `tollgate_approval_decision_latency_seconds_bucket\{decision="approve",[^}]*le="60"\} 0\n`, text.String())
	require.Regexp(t, `tollgate_approval_decision_latency_seconds_bucket\{decision="approve",[^}]*le="300"\} 1\n`, text.String())
	require.Contains(t, text.String(), "\ntollgate_approvals_pending 0\n")
}

func TestDeclineAndTimeoutAreCountedByDecision(t *testing.T) {
	settings := testSettings()
	settings.ApprovalTimeout = time.Hour
	h := newHarness(t, settings, calls(
		call("w", "Write", `{"file_path":"x","content":"y"}`),
		call("b", "Bash", `{"command":"ls"}`),
	))
	DescribeMetrics(h.metrics)
	h.env.RegisterDelayedCallback(func() {
		h.decide(ApprovalDecision{RequestID: h.requestID("Write"), Decision: DecisionDecline, Reason: "no"})
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		// While Bash still waits, the derived gauge shows it.
		var text strings.Builder
		_, err := h.metrics.WriteTo(&text)
		require.NoError(t, err)
		require.Contains(t, text.String(), "\ntollgate_approvals_pending 1\n")
	}, 2*time.Minute)

	h.runTurn(userTurn("write and list"))

	require.Equal(t, 2.0, h.metrics.Sum(ApprovalRequestsMetric, nil))
	require.Equal(t, 1.0, h.metrics.Sum(ApprovalDecisionsMetric, map[string]string{MetricTagDecision: DecisionDecline}))
	require.Equal(t, 1.0, h.metrics.Sum(ApprovalDecisionsMetric, map[string]string{MetricTagDecision: DecisionTimeout}))
	require.Zero(t, h.metrics.Sum(ApprovalDecisionsMetric, map[string]string{MetricTagDecision: DecisionApprove}))
}
