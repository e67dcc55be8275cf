package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

func newRegistry(t *testing.T, help map[string]string) *Registry {
	t.Helper()
	r, err := New(help)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(t.Context()) })
	return r
}

func TestTimersAreHistogramsInSecondsWithBucketsFrom5msTo24h(t *testing.T) {
	r := newRegistry(t, map[string]string{"temporal_activity_execution_latency": "Activity execution time."})
	timer := r.Handler().WithTags(map[string]string{"activity_type": "Bash"}).Timer("temporal_activity_execution_latency")
	timer.Record(20 * time.Millisecond)
	timer.Record(2 * time.Hour)

	// The buckets docs/observability.md documents.
	require.NoError(t, testutil.GatherAndCompare(r, strings.NewReader(`
# HELP temporal_activity_execution_latency_seconds Activity execution time.
# TYPE temporal_activity_execution_latency_seconds histogram
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="0.005"} 0
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="0.01"} 0
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="0.025"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="0.05"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="0.1"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="0.25"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="0.5"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="1"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="2.5"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="5"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="10"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="30"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="60"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="300"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="900"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="1800"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="3600"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="14400"} 2
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="86400"} 2
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",le="+Inf"} 2
temporal_activity_execution_latency_seconds_sum{activity_type="Bash"} 7200.02
temporal_activity_execution_latency_seconds_count{activity_type="Bash"} 2
`), "temporal_activity_execution_latency_seconds"))
	require.EqualValues(t, 2, r.Count("temporal_activity_execution_latency_seconds", map[string]string{"activity_type": "Bash"}))
}

func TestCountersEndInTotalOnceAndGaugesKeepTheirName(t *testing.T) {
	r := newRegistry(t, map[string]string{"tollgate_approval_decisions_total": "Decisions taken."})
	h := r.Handler().WithTags(map[string]string{"namespace": "default"})
	h.WithTags(map[string]string{"decision": "approve"}).Counter("tollgate_approval_decisions_total").Inc(2)
	h.WithTags(map[string]string{"decision": "decline"}).Counter("tollgate_approval_decisions_total").Inc(1)
	h.Counter("temporal_request").Inc(3)
	h.Gauge("temporal_num_pollers").Update(2.5)

	require.NoError(t, testutil.GatherAndCompare(r, strings.NewReader(`
# HELP tollgate_approval_decisions_total Decisions taken.
# TYPE tollgate_approval_decisions_total counter
tollgate_approval_decisions_total{decision="approve",namespace="default"} 2
tollgate_approval_decisions_total{decision="decline",namespace="default"} 1
# HELP temporal_request_total A Temporal Go SDK metric: https://docs.temporal.io/references/sdk-metrics
# TYPE temporal_request_total counter
temporal_request_total{namespace="default"} 3
# HELP temporal_num_pollers A Temporal Go SDK metric: https://docs.temporal.io/references/sdk-metrics
# TYPE temporal_num_pollers gauge
temporal_num_pollers{namespace="default"} 2.5
`), "tollgate_approval_decisions_total", "temporal_request_total", "temporal_num_pollers"))
}

func TestSumAddsUpTheSeriesWhoseLabelsMatch(t *testing.T) {
	r := newRegistry(t, nil)
	parent := r.Handler().WithTags(map[string]string{"decision": "approve", "workflow_type": "ChatTurn"})
	child := parent.WithTags(map[string]string{"decision": "timeout"})
	parent.Counter("c_total").Inc(1)
	child.Counter("c_total").Inc(1)
	child.Counter("c_total").Inc(1)

	require.Equal(t, 1.0, r.Sum("c_total", map[string]string{"decision": "approve"}))
	require.Equal(t, 2.0, r.Sum("c_total", map[string]string{"decision": "timeout", "workflow_type": "ChatTurn"}))
	require.Equal(t, 3.0, r.Sum("c_total", nil))
	require.Zero(t, r.Sum("c_total", map[string]string{"decision": "decline"}))
	require.Zero(t, r.Sum("c", nil), "Sum takes the exposed name")
}

func TestAGaugeFuncIsComputedAtEachScrape(t *testing.T) {
	r := newRegistry(t, nil)
	r.GaugeFunc("pending", "Requests minus decisions.", func() float64 {
		return r.Sum("requests_total", nil) - r.Sum("decisions_total", nil)
	})
	h := r.Handler()
	h.Counter("requests_total").Inc(3)
	h.Counter("decisions_total").Inc(1)
	require.NoError(t, testutil.GatherAndCompare(r, strings.NewReader(`
# HELP pending Requests minus decisions.
# TYPE pending gauge
pending 2
`), "pending"))

	h.Counter("decisions_total").Inc(2)
	require.NoError(t, testutil.GatherAndCompare(r, strings.NewReader(`
# HELP pending Requests minus decisions.
# TYPE pending gauge
pending 0
`), "pending"))
}

func TestTheGoAndProcessCollectorsAreServed(t *testing.T) {
	r := newRegistry(t, nil)
	n, err := testutil.GatherAndCount(r, "go_goroutines", "process_resident_memory_bytes")
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

func TestEverythingPassesPrometheusLint(t *testing.T) {
	r := newRegistry(t, map[string]string{"tollgate_approval_requests_total": "Requests."})
	h := r.Handler().WithTags(map[string]string{"workflow_type": "ChatTurn"})
	h.Counter("tollgate_approval_requests_total").Inc(1)
	h.Timer("tollgate_approval_decision_latency_seconds").Record(time.Second)
	r.GaugeFunc("tollgate_approvals_pending", "Pending.", func() float64 { return 1 })

	problems, err := testutil.GatherAndLint(r)
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestRegistryServesTheTextFormatOverHTTP(t *testing.T) {
	r := newRegistry(t, nil)
	r.Handler().Counter("hits").Inc(1)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, expfmt.TypeTextPlain, expfmt.ResponseFormat(resp.Header).FormatType())
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 1.0, families["hits_total"].GetMetric()[0].GetCounter().GetValue())
	require.Contains(t, families, "go_goroutines")
}
