package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

// The handler must be usable wherever the SDK takes one.
var _ client.MetricsHandler = handler{}

func TestRegistryRendersCountersGaugesAndTimersInPrometheusTextFormat(t *testing.T) {
	r := NewRegistry()
	r.Describe("tollgate_approval_decisions_total", "Decisions taken.")
	h := r.Handler().WithTags(map[string]string{"namespace": "default"})

	h.WithTags(map[string]string{"decision": "approve"}).Counter("tollgate_approval_decisions_total").Inc(2)
	h.WithTags(map[string]string{"decision": "decline"}).Counter("tollgate_approval_decisions_total").Inc(1)
	h.Counter("temporal_request").Inc(3)
	h.Counter("temporal_request").Inc(-5) // ignored: counters never go down
	h.Gauge("temporal_num_pollers").Update(2.5)
	timer := h.WithTags(map[string]string{"activity_type": "Bash"}).Timer("temporal_activity_execution_latency")
	timer.Record(20 * time.Millisecond)
	timer.Record(2 * time.Hour)

	var out strings.Builder
	n, err := r.WriteTo(&out)
	require.NoError(t, err)
	require.EqualValues(t, out.Len(), n)

	want := `# TYPE temporal_activity_execution_latency_seconds histogram
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="0.005"} 0
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="0.01"} 0
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="0.025"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="0.05"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="0.1"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="0.25"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="0.5"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="1"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="2.5"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="5"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="10"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="30"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="60"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="300"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="900"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="1800"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="3600"} 1
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="14400"} 2
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="86400"} 2
temporal_activity_execution_latency_seconds_bucket{activity_type="Bash",namespace="default",le="+Inf"} 2
temporal_activity_execution_latency_seconds_sum{activity_type="Bash",namespace="default"} 7200.02
temporal_activity_execution_latency_seconds_count{activity_type="Bash",namespace="default"} 2
# TYPE temporal_num_pollers gauge
temporal_num_pollers{namespace="default"} 2.5
# TYPE temporal_request_total counter
temporal_request_total{namespace="default"} 3
# HELP tollgate_approval_decisions_total Decisions taken.
# TYPE tollgate_approval_decisions_total counter
tollgate_approval_decisions_total{decision="approve",namespace="default"} 2
tollgate_approval_decisions_total{decision="decline",namespace="default"} 1
`
	require.Equal(t, want, out.String())
}

func TestRegistryEscapesLabelValuesAndSanitizesNames(t *testing.T) {
	r := NewRegistry()
	r.Handler().WithTags(map[string]string{"tool-name": "a\"b\\c\nd"}).Counter("weird.name").Inc(1)

	var out strings.Builder
	_, err := r.WriteTo(&out)
	require.NoError(t, err)
	require.Equal(t, "# TYPE weird_name_total counter\n"+`weird_name_total{tool_name="a\"b\\c\nd"} 1`+"\n", out.String())
}

func TestWithTagsOverridesEarlierTagsWithoutChangingTheParent(t *testing.T) {
	r := NewRegistry()
	parent := r.Handler().WithTags(map[string]string{"decision": "approve", "workflow_type": "ChatTurn"})
	child := parent.WithTags(map[string]string{"decision": "timeout"})
	parent.Counter("c").Inc(1)
	child.Counter("c").Inc(1)
	child.Counter("c").Inc(1)

	require.Equal(t, 1.0, r.Sum("c", map[string]string{"decision": "approve"}))
	require.Equal(t, 2.0, r.Sum("c", map[string]string{"decision": "timeout", "workflow_type": "ChatTurn"}))
	require.Equal(t, 3.0, r.Sum("c", nil))
	require.Equal(t, 3.0, r.Sum("c_total", nil), "the exposed name finds the same counter")
}

func TestAGaugeFuncIsComputedAtEachRendering(t *testing.T) {
	r := NewRegistry()
	h := r.Handler()
	r.GaugeFunc("pending", "Requests minus decisions.", func() float64 {
		return r.Sum("requests", nil) - r.Sum("decisions", nil)
	})
	h.Counter("requests").Inc(3)
	h.Counter("decisions").Inc(1)

	var out strings.Builder
	_, err := r.WriteTo(&out)
	require.NoError(t, err)
	require.Contains(t, out.String(), "# HELP pending Requests minus decisions.\n# TYPE pending gauge\npending 2\n")
}

func TestANameKeepsTheKindItWasFirstUsedAs(t *testing.T) {
	r := NewRegistry()
	h := r.Handler()
	h.Gauge("x_total").Update(5)
	h.Counter("x").Inc(1) // would also be x_total: dropped, not a second TYPE line

	var out strings.Builder
	_, err := r.WriteTo(&out)
	require.NoError(t, err)
	require.Equal(t, "# TYPE x_total gauge\nx_total 5\n", out.String())
}

func TestCountCountsRecordedDurations(t *testing.T) {
	r := NewRegistry()
	h := r.Handler()
	h.WithTags(map[string]string{"decision": "approve"}).Timer("latency").Record(time.Second)
	h.WithTags(map[string]string{"decision": "decline"}).Timer("latency").Record(time.Second)
	h.WithTags(map[string]string{"decision": "decline"}).Timer("latency").Record(time.Minute)

	require.EqualValues(t, 2, r.Count("latency", map[string]string{"decision": "decline"}))
	require.EqualValues(t, 3, r.Count("latency", nil))
	require.Zero(t, r.Sum("latency", nil), "Sum is for counters and gauges")
}

func TestRegistryServesHTTPWithThePrometheusContentType(t *testing.T) {
	var r Registry // the zero value works
	r.Handler().Counter("hits").Inc(1)
	srv := httptest.NewServer(&r)
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, ContentType, resp.Header.Get("Content-Type"))
	require.Equal(t, "# TYPE hits_total counter\nhits_total 1\n", string(body))
}

func TestRegistryIsSafeForConcurrentUse(t *testing.T) {
	r := NewRegistry()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			h := r.Handler().WithTags(map[string]string{"worker": string(rune('a' + i%2))})
			for range 200 {
				h.Counter("n").Inc(1)
				h.Gauge("g").Update(1)
				h.Timer("t").Record(time.Millisecond)
				_, _ = r.WriteTo(io.Discard)
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1600.0, r.Sum("n", nil))
	require.EqualValues(t, 1600, r.Count("t", nil))
}
