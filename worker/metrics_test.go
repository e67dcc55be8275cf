package main

import (
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/workflows"
)

// scrape reads GET /metrics at addr as Prometheus does: the text format,
// parsed, and linted. t may be an EventuallyWithT's *assert.CollectT.
func scrape(t require.TestingT, addr string) map[string]*dto.MetricFamily {
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, expfmt.TypeTextPlain, expfmt.ResponseFormat(resp.Header).FormatType())
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	list := make([]*dto.MetricFamily, 0, len(families))
	for _, f := range families {
		list = append(list, f)
	}
	problems, err := promlint.NewWithMetricFamilies(list).Lint()
	require.NoError(t, err)
	require.Empty(t, problems, "promlint")
	return families
}

func TestWorkerServesItsMetricsInPrometheusTextFormat(t *testing.T) {
	reg, err := metrics.New(workflows.MetricHelp)
	require.NoError(t, err)
	workflows.AddApprovalsPending(reg)
	reg.Handler().Counter(workflows.ApprovalRequestsMetric).Inc(1)
	addr, stop := serveMetrics("127.0.0.1:0", reg, slog.New(slog.DiscardHandler))
	t.Cleanup(stop)

	families := scrape(t, addr)
	require.Equal(t, dto.MetricType_GAUGE, families[workflows.ApprovalsPendingMetric].GetType())
	require.Equal(t, 1.0, families[workflows.ApprovalsPendingMetric].GetMetric()[0].GetGauge().GetValue())
	require.Equal(t, dto.MetricType_COUNTER, families[workflows.ApprovalRequestsMetric].GetType())
	require.Equal(t, workflows.MetricHelp[workflows.ApprovalRequestsMetric], families[workflows.ApprovalRequestsMetric].GetHelp())
	require.Equal(t, 1.0, families[workflows.ApprovalRequestsMetric].GetMetric()[0].GetCounter().GetValue())
	require.Contains(t, families, "go_goroutines")
	require.Contains(t, families, "process_resident_memory_bytes")
}

func TestWorkerRunsOnWhenItsMetricsPortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })

	addr, stop := serveMetrics(ln.Addr().String(), http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	stop()
	require.Empty(t, addr)

	addr, stop = serveMetrics("", http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	stop()
	require.Empty(t, addr, "an empty address turns metrics off")
}
