package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/workflows"
)

func TestWorkerServesItsMetricsInPrometheusTextFormat(t *testing.T) {
	reg := metrics.NewRegistry()
	workflows.DescribeMetrics(reg)
	reg.Handler().Counter(workflows.ApprovalRequestsMetric).Inc(1)
	addr, stop := serveMetrics("127.0.0.1:0", reg, slog.New(slog.DiscardHandler))
	t.Cleanup(stop)

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, metrics.ContentType, resp.Header.Get("Content-Type"))
	require.Contains(t, string(body), "# TYPE tollgate_approvals_pending gauge\ntollgate_approvals_pending 1\n")
	require.Contains(t, string(body), "# TYPE tollgate_approval_requests_total counter\ntollgate_approval_requests_total 1\n")
}

func TestWorkerRunsOnWhenItsMetricsPortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })

	addr, stop := serveMetrics(ln.Addr().String(), metrics.NewRegistry(), slog.New(slog.DiscardHandler))
	stop()
	require.Empty(t, addr)

	addr, stop = serveMetrics("", metrics.NewRegistry(), slog.New(slog.DiscardHandler))
	stop()
	require.Empty(t, addr, "an empty address turns metrics off")
}
