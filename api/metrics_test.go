package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/mocks"

	"github.com/tollgate/tollgate/protocol"
)

func TestMetricsCountDecisionsByOutcomeAndRequestsByRoute(t *testing.T) {
	c := mocks.NewClient(t)
	h := mocks.NewWorkflowUpdateHandle(t)
	h.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		*args.Get(1).(*protocol.ApprovalResult) = protocol.ApprovalResult{Accepted: true}
	}).Return(nil).Once()
	c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(h, nil).Once()
	c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(nil, serviceerror.NewUnavailable("connection refused")).Once()
	ts := newMockedServer(t, c)

	require.Equal(t, `{"accepted":true}`, postApprovalResult(t, ts, `{"requestId":"`+testRequestID+`","decision":"approve"}`))
	require.Equal(t, `{"accepted":false,"reason":"unknown"}`, postApprovalResult(t, ts, `{"requestId":"not-ours","decision":"decline"}`))
	status, _ := postApproval(t, ts, `{"requestId":"`+testRequestID+`","decision":"approve"}`)
	require.Equal(t, http.StatusServiceUnavailable, status)
	status, _ = postApproval(t, ts, `{"decision":"approve"}`)
	require.Equal(t, http.StatusBadRequest, status, "a body that is not a decision is not counted as one")
	resp, err := http.Get(ts.URL + "/chat/turns/" + testTurn + "x/nothing")
	require.NoError(t, err)
	resp.Body.Close()

	resp, err = http.Get(ts.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	text := string(body)

	require.Contains(t, text, "# TYPE tollgate_api_approval_decisions_total counter\n"+
		`tollgate_api_approval_decisions_total{decision="approve",outcome="accepted"} 1`+"\n"+
		`tollgate_api_approval_decisions_total{decision="approve",outcome="error"} 1`+"\n"+
		`tollgate_api_approval_decisions_total{decision="decline",outcome="rejected"} 1`+"\n")
	require.Contains(t, text, "# TYPE tollgate_api_requests_total counter\n")
	require.Contains(t, text, `tollgate_api_requests_total{method="POST",route="/chat/approval",status="200"} 2`+"\n")
	require.Contains(t, text, `tollgate_api_requests_total{method="POST",route="/chat/approval",status="400"} 1`+"\n")
	require.Contains(t, text, `tollgate_api_requests_total{method="POST",route="/chat/approval",status="503"} 1`+"\n")
	require.Contains(t, text, `tollgate_api_requests_total{method="GET",route="unmatched",status="404"} 1`+"\n",
		"paths no route matches share one series")
	require.Regexp(t, `(?m)^tollgate_api_open_streams 0$`, text, "the existing metrics keep their names")
}

// current reads one of the API's counters or gauges, all of which hold
// whole numbers.
func current(c prometheus.Collector) int64 { return int64(testutil.ToFloat64(c)) }

func TestMetricsHaveTheDocumentedNamesLabelsAndHelpAndPassLint(t *testing.T) {
	m := newMetrics()
	m.request("/chat/approval", http.MethodPost, http.StatusOK)
	m.decision("approve", outcomeAccepted)

	documented := map[string][]string{ // docs/observability.md's table
		"tollgate_api_open_streams":             nil,
		"tollgate_api_pollers_running":          nil,
		"tollgate_api_pollers_started_total":    nil,
		"tollgate_api_event_queries_total":      nil,
		"tollgate_api_requests_total":           {"method", "route", "status"},
		"tollgate_api_approval_decisions_total": {"decision", "outcome"},
	}
	families, err := m.registry.Gather()
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, f := range families {
		labels, ok := documented[f.GetName()]
		if !ok {
			continue
		}
		seen[f.GetName()] = true
		require.NotEmpty(t, f.GetHelp(), f.GetName())
		var names []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			names = append(names, l.GetName())
		}
		require.Equal(t, labels, names, f.GetName())
	}
	require.Len(t, seen, len(documented), "every documented name is exposed")

	n, err := testutil.GatherAndCount(m.registry, "go_goroutines", "process_resident_memory_bytes")
	require.NoError(t, err)
	require.Equal(t, 2, n, "the Go and process collectors")
	problems, err := testutil.GatherAndLint(m.registry)
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestMetricsOverHTTPPassPrometheusLint(t *testing.T) {
	_, ts := newTestServer(t, newFakeSource(), time.Hour)
	resp, err := http.Get(ts.URL + "/chat/turns/" + testTurn + "x/nothing")
	require.NoError(t, err)
	resp.Body.Close()

	resp, err = http.Get(ts.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	problems, err := promlint.New(strings.NewReader(string(body))).Lint()
	require.NoError(t, err)
	require.Empty(t, problems, "as promtool check metrics would see them")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err)
	require.Contains(t, families, "tollgate_api_requests_total")
	require.Contains(t, families, "go_goroutines")
	require.Contains(t, families, "process_resident_memory_bytes")
}
