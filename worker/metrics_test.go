package main

import (
	"context"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
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

// series returns the series of the family whose labels include match.
func series(f *dto.MetricFamily, match map[string]string) []*dto.Metric {
	var found []*dto.Metric
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue next
			}
		}
		found = append(found, m)
	}
	return found
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

// TestTheWorkersMetricsHaveEverySeriesTheDocsName runs the worker's
// run, as main does, on a dev server with the scripted demo model, takes a
// turn with one declined and one approved call, and scrapes it.
func TestTheWorkersMetricsHaveEverySeriesTheDocsName(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal dev server")
	}
	w := runWorker(t, "worker-metrics-", nil)
	srv, metricsAddr, queue, ctx := w.srv, w.metricsAddr, w.queue, w.ctx
	c, err := srv.Dial()
	require.NoError(t, err)
	t.Cleanup(c.Close)
	turnCtx, turnCancel := context.WithTimeout(ctx, 2*time.Minute)
	defer turnCancel()
	conv := "metrics-" + uuid.NewString()
	turn, err := c.ExecuteWorkflow(turnCtx, client.StartWorkflowOptions{
		ID: contract.TurnWorkflowID(conv, 1), TaskQueue: queue,
	}, contract.ChatTurnWorkflow, workflows.TurnInput{
		ConversationID: conv, Turn: 1,
		Messages: []protocol.Message{{Role: protocol.RoleUser, Content: "tidy up"}},
	})
	require.NoError(t, err)
	var requests []protocol.Event
	require.Eventually(t, func() bool {
		requests = pendingRequests(turnCtx, c, turn.GetID())
		return len(requests) == 2
	}, time.Minute, 20*time.Millisecond)
	decide := func(e protocol.Event, decision string) {
		require.NoError(t, c.SignalWorkflow(turnCtx, e.WorkflowID, "", contract.ApprovalSignal,
			protocol.ApprovalDecision{RequestID: e.RequestID, Decision: decision}))
	}
	decide(requests[0], protocol.DecisionDecline)
	decide(requests[1], protocol.DecisionApprove)
	var out contract.TurnOutput
	require.NoError(t, turn.Get(turnCtx, &out))
	require.Equal(t, protocol.FinishStop, out.FinishReason)

	chatTurn := map[string]string{"workflow_type": contract.ChatTurnWorkflow}
	withTurn := func(k, v string) map[string]string {
		return map[string]string{"workflow_type": contract.ChatTurnWorkflow, k: v}
	}
	// The SDK records the end of a workflow as it completes its last task:
	// the scrape waits for that.
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		families := scrape(t, metricsAddr)
		family := func(name string, typ dto.MetricType) *dto.MetricFamily {
			f := families[name]
			require.NotNil(t, f, "%s is exposed", name)
			require.Equal(t, typ, f.GetType(), name)
			return f
		}
		counter := func(name string, match map[string]string) float64 {
			var sum float64
			for _, m := range series(family(name, dto.MetricType_COUNTER), match) {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
		observations := func(name string, match map[string]string) uint64 {
			var n uint64
			for _, m := range series(family(name, dto.MetricType_HISTOGRAM), match) {
				n += m.GetHistogram().GetSampleCount()
			}
			return n
		}

		require.Equal(t, 2.0, counter("tollgate_approval_requests_total", chatTurn))
		require.Equal(t, 1.0, counter("tollgate_approval_decisions_total", withTurn("decision", protocol.DecisionApprove)))
		require.Equal(t, 1.0, counter("tollgate_approval_decisions_total", withTurn("decision", protocol.DecisionDecline)))
		require.EqualValues(t, 1, observations("tollgate_approval_decision_latency_seconds", map[string]string{"decision": protocol.DecisionApprove}))
		latency := series(family("tollgate_approval_decision_latency_seconds", dto.MetricType_HISTOGRAM), nil)[0]
		var bounds []float64
		for _, b := range latency.GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		require.Equal(t, []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 14400, 86400, math.Inf(1)}, bounds,
			"buckets from 5 ms to 24 h")
		pending := family("tollgate_approvals_pending", dto.MetricType_GAUGE)
		require.Zero(t, pending.GetMetric()[0].GetGauge().GetValue(), "both requests were decided")
		require.GreaterOrEqual(t, observations("temporal_activity_execution_latency_seconds", map[string]string{"activity_type": protocol.ToolBash}), uint64(1))
		require.GreaterOrEqual(t, observations("temporal_activity_execution_latency_seconds", map[string]string{"activity_type": activities.ModelActivity}), uint64(2))
		require.EqualValues(t, 1, observations("temporal_workflow_endtoend_latency_seconds", chatTurn))
		family("go_goroutines", dto.MetricType_GAUGE)
		family("process_resident_memory_bytes", dto.MetricType_GAUGE)
	}, 30*time.Second, 100*time.Millisecond)
}

// pendingRequests returns the approval requests in a turn's event log, in
// order, or nil while the turn cannot be queried yet.
func pendingRequests(ctx context.Context, c client.Client, workflowID string) []protocol.Event {
	v, err := c.QueryWorkflow(ctx, workflowID, "", contract.EventsQuery, contract.EventsRequest{})
	if err != nil {
		return nil
	}
	var resp contract.EventsResponse
	if v.Get(&resp) != nil {
		return nil
	}
	var requests []protocol.Event
	for _, e := range resp.Events {
		if e.Type == protocol.EventApprovalRequest {
			requests = append(requests, e)
		}
	}
	return requests
}

// TestTheWorkersCacheHoldsNoMoreWaitingTurnsThanItsSize runs the worker's
// run with TOLLGATE_WORKFLOW_CACHE_SIZE=2 and leaves six turns waiting for
// their approvals: the SDK's sticky cache, as the worker's
// temporal_sticky_cache_size reports it, keeps no more than its size (the
// SDK's default of 10,000 kept all six), and an evicted turn still takes
// its decision, replayed from its history.
func TestTheWorkersCacheHoldsNoMoreWaitingTurnsThanItsSize(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal dev server")
	}
	const cacheSize, waiting = 2, 6
	w := runWorker(t, "worker-cache-", map[string]string{
		config.EnvWorkflowCacheSize: strconv.Itoa(cacheSize),
		config.EnvAuditDB:           config.AuditOff,
	})
	require.Equal(t, cacheSize, w.cfg.WorkflowCacheSize)
	srv, metricsAddr, queue, ctx := w.srv, w.metricsAddr, w.queue, w.ctx
	c, err := srv.Dial()
	require.NoError(t, err)
	t.Cleanup(c.Close)
	turnCtx, turnCancel := context.WithTimeout(ctx, 2*time.Minute)
	defer turnCancel()
	turns := make([]client.WorkflowRun, waiting)
	for i := range turns {
		conv := "cache-" + uuid.NewString()
		turns[i], err = c.ExecuteWorkflow(turnCtx, client.StartWorkflowOptions{
			ID: contract.TurnWorkflowID(conv, 1), TaskQueue: queue,
		}, contract.ChatTurnWorkflow, workflows.TurnInput{
			ConversationID: conv, Turn: 1,
			Messages: []protocol.Message{{Role: protocol.RoleUser, Content: "tidy up"}},
		})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(pendingRequests(turnCtx, c, turns[i].GetID())) == 2 },
			time.Minute, 20*time.Millisecond, "turn %d waits for its approvals", i)
	}
	// The gauge is the cache's size as the worker last took a task; the
	// queries above were tasks too.
	most := 0.0
	for _, m := range scrape(t, metricsAddr)["temporal_sticky_cache_size"].GetMetric() {
		most = max(most, m.GetGauge().GetValue())
	}
	require.Positive(t, most, "the worker reports its cache")
	require.LessOrEqual(t, most, float64(cacheSize), "%d turns wait; the cache holds at most %d of them", waiting, cacheSize)

	// The first turn was evicted long ago: its decisions replay it.
	for _, e := range pendingRequests(turnCtx, c, turns[0].GetID()) {
		require.NoError(t, c.SignalWorkflow(turnCtx, e.WorkflowID, "", contract.ApprovalSignal,
			protocol.ApprovalDecision{RequestID: e.RequestID, Decision: protocol.DecisionApprove}))
	}
	var out contract.TurnOutput
	require.NoError(t, turns[0].Get(turnCtx, &out))
	require.Equal(t, protocol.FinishStop, out.FinishReason)
}

// runningWorker is the worker's run on a dev server of the test's own.
type runningWorker struct {
	srv         *devserver.Server
	cfg         config.Config
	queue       string
	metricsAddr string
	// ctx ends when the test does, which stops the run.
	ctx context.Context
}

// runWorker starts the worker's run, as main does, on a dev server with
// the scripted demo model and a workspace with a README, on a task queue
// named from prefix; extra adds to or replaces its environment.
func runWorker(t *testing.T, prefix string, extra map[string]string) runningWorker {
	t.Helper()
	srv := devserver.ForTest(t)
	model := httptest.NewServer(scripted.New(scripted.Demo()))
	t.Cleanup(model.Close)
	workspace := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(workspace, "README.md"), []byte("# the workspace readme\n"), 0o644))
	w := runningWorker{srv: srv, queue: prefix + uuid.NewString(), metricsAddr: proctest.FreeAddr(t)}
	env := map[string]string{
		config.EnvTemporalAddress:   srv.HostPort,
		config.EnvTemporalNamespace: srv.Namespace,
		config.EnvTaskQueue:         w.queue,
		config.EnvOpenAIBaseURL:     model.URL + "/v1",
		config.EnvOpenAIAPIKey:      "test",
		config.EnvOpenAIModel:       scripted.ModelName,
		config.EnvWorkspace:         workspace,
		config.EnvPayloadDir:        t.TempDir(),
		config.EnvMetricsAddr:       w.metricsAddr,
	}
	maps.Copy(env, extra)
	var err error
	w.cfg, err = config.Load(func(name string) string { return env[name] })
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w.ctx = ctx
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx, w.cfg, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-stopped)
	})
	return w
}
