// Package cluster_test runs tollgate as a team deploys it: the Temporal
// server (not the dev server) on PostgreSQL, set up and configured as
// docker-compose.yml sets it up, two workers and two API instances, and
// 200 turns across them while a worker and an API instance are killed.
// `make cluster-test` runs it (TOLLGATE_CLUSTER_TEST=1); without that
// variable it is skipped.
package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// envRun turns the test on; envTurns changes how many turns it runs.
const (
	envRun   = "TOLLGATE_CLUSTER_TEST"
	envTurns = "TOLLGATE_CLUSTER_TURNS"
)

// defaultTurns is how many turns run at once.
const defaultTurns = 200

// Deadlines: for a process to be ready, for every turn to wait for its
// approval, for visibility to see them, and for every turn to finish
// once decided (a model call cut off by the worker's kill waits out its
// minute of heartbeat timeout before it is retried).
const (
	readyWait      = time.Minute
	pauseWait      = 5 * time.Minute
	visibilityWait = time.Minute
	finishWait     = 10 * time.Minute
)

// TestEveryTurnFinishesOnceWhileAWorkerAndAnAPIAreKilled runs 200 turns,
// each with one protected Bash call, over two workers and two API
// instances of one Temporal cluster on PostgreSQL. Once every turn waits
// for its approval, the decisions go out, each through another instance
// than its stream's; a quarter of the way through them one worker is
// killed, half-way one API instance, and each is replaced. Every stream
// must end with finish, each event once and in order across the resumed
// connections; every decision must be accepted once and applied once,
// and a conflicting one refused; no tool may run twice.
func TestEveryTurnFinishesOnceWhileAWorkerAndAnAPIAreKilled(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skip("starts PostgreSQL and a Temporal server; `make cluster-test` runs it (" + envRun + "=1)")
	}
	n := turnCount(t)
	workerBin := proctest.Build(t, "github.com/tollgate/tollgate/worker")
	apiBin := proctest.Build(t, "github.com/tollgate/tollgate/api")

	began := time.Now()
	pg := proctest.StartPostgres(t, "temporal")
	tc := proctest.StartTemporalServer(t, pg)
	clusterUp := time.Since(began)
	c, err := client.Dial(client.Options{HostPort: tc.HostPort, Namespace: tc.Namespace})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	requireSearchAttributes(t, c, tc.Namespace)

	workspace, payloadDir := t.TempDir(), t.TempDir()
	model := httptest.NewServer(scripted.New(bashOnce))
	t.Cleanup(model.Close)
	env := append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_", "HTTP_ADDR", "OTEL_"),
		config.EnvTemporalAddress+"="+tc.HostPort,
		config.EnvTemporalNamespace+"="+tc.Namespace,
		config.EnvTaskQueue+"=cluster",
		config.EnvMetricsAddr+"="+config.MetricsOff,
		config.EnvOpenAIBaseURL+"="+model.URL+"/v1",
		config.EnvOpenAIAPIKey+"=test",
		config.EnvOpenAIModel+"="+scripted.ModelName,
		// Every worker runs tools in the same workspace and reads the
		// same payload store, as the compose file's share volumes.
		config.EnvWorkspace+"="+workspace,
		config.EnvPayloadDir+"="+payloadDir,
		config.EnvApprovalTimeout+"=30m",
		config.EnvHeartbeatInterval+"=1s",
		config.EnvLogLevel+"=info",
		// The audit ledger in the database the compose file's setup makes.
		config.EnvAuditDB+"="+pg.URL("tollgate"),
	)
	startWorker := func(name string) *proctest.Process {
		return proctest.Start(t, name, workerBin(), env)
	}
	startAPI := func(name string) (*proctest.Process, string) {
		addr := proctest.FreeAddr(t)
		p := proctest.Start(t, name, apiBin(), append(slices.Clip(env), config.EnvHTTPAddr+"="+addr))
		waitHealthy(t, p, addr)
		return p, addr
	}
	worker1 := startWorker("worker-1")
	startWorker("worker-2")
	pool := &apis{}
	api1, addr1 := startAPI("api-1")
	_, addr2 := startAPI("api-2")
	pool.add(addr1)
	pool.add(addr2)

	// Every turn starts and waits for its approval.
	ctx, cancel := context.WithTimeout(context.Background(), pauseWait+finishWait)
	defer cancel()
	var prog progress
	release := make(chan struct{})
	turns := make([]*turn, n)
	var wg sync.WaitGroup
	started := time.Now()
	for i := range turns {
		tr := &turn{N: i + 1, Conv: fmt.Sprintf("cluster-%d", i+1)}
		turns[i] = tr
		wg.Go(func() {
			prog.fail(tr.run(ctx, pool, release, func() { prog.paused.Add(1) }, func() { prog.decided.Add(1) }))
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	prog.waitUntil(t, pauseWait, func() bool { return prog.paused.Load() == int64(n) }, "every turn waits for its approval")
	allPaused := time.Now()
	t.Logf("%d turns started and waiting for approval in %s", n, allPaused.Sub(started).Round(time.Millisecond))

	// SQL visibility finds them by tollgate's search attribute, and
	// GET /approvals lists them.
	pending := fmt.Sprintf("%s IS NOT NULL AND ExecutionStatus = 'Running'", contract.PendingApprovalsAttribute)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: tc.Namespace, Query: pending})
		require.NoError(ct, err)
		assert.EqualValues(ct, n, resp.GetCount())
	}, visibilityWait, 200*time.Millisecond, "visibility counts %d turns with %s", n, pending)
	t.Logf("SQL visibility counted the %d waiting turns %s after the last approval_request", n, time.Since(allPaused).Round(time.Millisecond))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Len(ct, listApprovals(ct, addr2), n)
	}, visibilityWait, 200*time.Millisecond, "GET /approvals lists every waiting call")

	// The decisions go out; a worker, then an API instance, dies under
	// them, and each is replaced.
	close(release)
	released := time.Now()
	prog.waitUntil(t, finishWait, func() bool { return prog.decided.Load() >= int64(n/4) }, "a quarter of the decisions are accepted")
	worker1.Crash(t)
	t.Logf("worker-1 killed after %d decisions", prog.decided.Load())
	startWorker("worker-3")
	prog.waitUntil(t, finishWait, func() bool { return prog.decided.Load() >= int64(n/2) }, "half of the decisions are accepted")
	pool.remove(addr1)
	api1.Crash(t)
	t.Logf("api-1 killed after %d decisions", prog.decided.Load())
	_, addr3 := startAPI("api-3")
	pool.add(addr3)

	select {
	case <-done:
	case <-ctx.Done():
		require.Failf(t, "turns did not finish in time", "%d of %d decided; first error: %v", prog.decided.Load(), n, prog.first())
	}
	finished := time.Now()
	require.NoError(t, prog.first())

	// What every client saw, what the workflows recorded and what ran.
	var resumes, retries, secondRetries, interrupted, shed int
	for _, tr := range turns {
		resumes += tr.Resumes
		shed += tr.Shed
		retries += tr.Retries
		secondRetries += tr.SecondRetries
		if requireTurnOnce(t, tr, workspace) {
			interrupted++
		}
	}
	requireLogsReadAgain(t, ctx, pool, turns)
	requireLedgerRowOnce(t, ctx, pg.URL("tollgate"), turns)

	latencies, since := make([]time.Duration, n), make([]time.Duration, n)
	for i, tr := range turns {
		latencies[i], since[i] = tr.Finished.Sub(tr.Decided), tr.Finished.Sub(released)
	}
	slices.Sort(latencies)
	slices.Sort(since)
	t.Logf("cluster up (PostgreSQL, schema, Temporal server, namespace) in %s", clusterUp.Round(time.Millisecond))
	t.Logf("%d turns: start → all waiting %s; decisions released → all finished %s (%.1f turns/s); whole run %s (%.1f turns/s)",
		n, allPaused.Sub(started).Round(time.Millisecond),
		finished.Sub(released).Round(time.Millisecond), float64(n)/finished.Sub(released).Seconds(),
		finished.Sub(started).Round(time.Millisecond), float64(n)/finished.Sub(started).Seconds())
	t.Logf("decisions released → half the turns finished %s, 90%% %s, 99%% %s",
		since[n/2].Round(time.Millisecond), since[n*9/10].Round(time.Millisecond), since[n*99/100].Round(time.Millisecond))
	t.Logf("decision accepted → finish: p50 %s, p90 %s, max %s",
		latencies[n/2].Round(time.Millisecond), latencies[n*9/10].Round(time.Millisecond), latencies[n-1].Round(time.Millisecond))
	t.Logf("%d messages sent again after a 503; %d streams resumed on another instance; %d approvals and %d conflicting decisions sent again after no answer; %d tool calls cut off by the worker's kill",
		shed, resumes, retries, secondRetries, interrupted)
}

// requireTurnOnce checks one turn as its client saw it: from turn_start
// to a finish with reason stop; one approval_request, one decision
// applied (the approve), its conflicting decline refused; one tool_result,
// and the command's file written once, or, for a call that the killed
// worker was running, at most once and reported as cut off. It says
// whether the call was cut off.
func requireTurnOnce(t *testing.T, tr *turn, workspace string) (interrupted bool) {
	t.Helper()
	ev := tr.Events
	require.NotEmpty(t, ev, "turn %d", tr.N)
	require.Equal(t, protocol.EventTurnStart, ev[0].Type, "turn %d", tr.N)
	last := ev[len(ev)-1]
	require.Equal(t, protocol.EventFinish, last.Type, "turn %d", tr.N)
	require.Equal(t, protocol.FinishStop, last.Reason, "turn %d: %s", tr.N, last.Message)

	requests, decisions := ofType(ev, protocol.EventApprovalRequest), ofType(ev, protocol.EventApprovalDecision)
	require.Len(t, requests, 1, "turn %d", tr.N)
	require.Len(t, decisions, 1, "turn %d: the decision is applied once", tr.N)
	require.Equal(t, requests[0].RequestID, decisions[0].RequestID, "turn %d", tr.N)
	require.Equal(t, protocol.DecisionApprove, decisions[0].Decision, "turn %d: the first decision wins", tr.N)
	require.Len(t, tr.Answers, 1, "turn %d", tr.N)
	require.True(t, tr.Answers[0].Accepted, "turn %d: the decision is accepted (also when sent again after no answer): %+v", tr.N, tr.Answers[0])
	require.False(t, tr.Second.Accepted, "turn %d: a conflicting decision is refused", tr.N)
	require.Contains(t, []string{protocol.RejectDecided, protocol.RejectUnknown}, tr.Second.Reason,
		"turn %d: refused as decided, or as unknown once the turn has ended", tr.N)

	results := ofType(ev, protocol.EventToolResult)
	require.Len(t, results, 1, "turn %d", tr.N)
	require.Len(t, results[0].ToolResults, 1, "turn %d", tr.N)
	result := results[0].ToolResults[0]
	b, err := os.ReadFile(filepath.Join(workspace, fmt.Sprintf("turn-%d.txt", tr.N)))
	if err != nil {
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	switch result.Status {
	case protocol.StatusOK:
		require.Equal(t, "ran\n", string(b), "turn %d: the approved Bash call ran exactly once", tr.N)
		return false
	case protocol.StatusError:
		require.Contains(t, result.Result, "did not complete", "turn %d", tr.N)
		require.Contains(t, []string{"", "ran\n"}, string(b), "turn %d: a call cut off by a kill ran at most once", tr.N)
		return true
	default:
		require.Failf(t, "unexpected tool result", "turn %d: %+v", tr.N, result)
		return false
	}
}

// requireLedgerRowOnce reads the audit ledger the workers wrote while one
// of them was killed: one row for each turn's call, ended, with the
// decision its client saw applied and the outcome its tool_result said.
func requireLedgerRowOnce(t *testing.T, ctx context.Context, dsn string, turns []*turn) {
	t.Helper()
	ledger, err := auditdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer ledger.Close()
	rows := map[string]audit.Record{}
	f := auditdb.Filter{Limit: auditdb.MaxLimit}
	for {
		page, err := ledger.List(ctx, f)
		require.NoError(t, err)
		for _, r := range page.Records {
			require.NotContains(t, rows, r.ID, "one row a request")
			rows[r.ID] = r
		}
		if page.Next == "" {
			break
		}
		f.Cursor = page.Next
	}
	require.Len(t, rows, len(turns), "a row for every turn's call")
	for _, tr := range turns {
		requestID := ofType(tr.Events, protocol.EventApprovalRequest)[0].RequestID
		r, ok := rows[requestID]
		require.True(t, ok, "turn %d: its request %s has a row", tr.N, requestID)
		require.Equal(t, audit.StageEnded, r.Stage, "turn %d", tr.N)
		require.Equal(t, protocol.DecisionApprove, r.Decision, "turn %d", tr.N)
		require.Equal(t, tr.Conv, r.ConversationID, "turn %d", tr.N)
		want := audit.OutcomeOK
		if ofType(tr.Events, protocol.EventToolResult)[0].ToolResults[0].Status == protocol.StatusError {
			want = audit.OutcomeError
		}
		require.Equal(t, want, r.Outcome, "turn %d", tr.N)
	}
	// The workers wrote one chain, one at a time, while one of them was
	// killed in the middle of its writes.
	v, err := ledger.Verify(ctx, "")
	require.NoError(t, err)
	require.True(t, v.OK, "the ledger's chain: %+v", v.FirstBad)
	require.Equal(t, int64(len(turns)), v.Rows)
}

// requireLogsReadAgain reads every turn's whole log again, from a live
// instance, and requires it to be what its client was streamed.
func requireLogsReadAgain(t *testing.T, ctx context.Context, pool *apis, turns []*turn) {
	t.Helper()
	for _, tr := range turns {
		again := &turn{N: tr.N, TurnID: tr.TurnID}
		addr := pool.pick("")
		resp, err := again.resume(ctx, addr)
		require.NoError(t, err)
		require.NoError(t, again.follow(ctx, pool, resp, addr, func(protocol.Event) {}))
		require.Equal(t, eventKeys(tr.Events), eventKeys(again.Events), "turn %d's log read again", tr.N)
	}
}

// bashOnce is the model: it answers the message "turn N" with one Bash
// call that appends a line to turn-N.txt, and the call's result with a
// word.
func bashOnce(req openai.ChatCompletionRequest) scripted.Reply {
	var n int
	for _, m := range req.Messages {
		switch m.Role {
		case openai.ChatMessageRoleTool:
			return scripted.Reply{Content: "Done."}
		case openai.ChatMessageRoleUser:
			if _, err := fmt.Sscanf(m.Content, "turn %d", &n); err != nil {
				return scripted.Reply{Status: http.StatusBadRequest, Content: fmt.Sprintf("not a turn's message: %q", m.Content)}
			}
		}
	}
	return scripted.Reply{ToolCalls: []protocol.ToolCall{{
		ID: "call_" + strconv.Itoa(n), Name: protocol.ToolBash,
		Arguments: fmt.Sprintf(`{"command":"echo ran >> turn-%d.txt"}`, n),
	}}}
}

// progress counts the turns' steps and keeps the first error.
type progress struct {
	paused, decided atomic.Int64

	mu  sync.Mutex
	err error
}

func (p *progress) fail(err error) {
	if err == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

func (p *progress) first() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// waitUntil waits for cond, failing at once when a turn failed.
func (p *progress) waitUntil(t *testing.T, wait time.Duration, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return cond() || p.first() != nil }, wait, 20*time.Millisecond, msg)
	require.NoError(t, p.first(), msg)
}

// requireSearchAttributes requires tollgate's search attributes in the
// namespace, as setup-namespace.sh made them.
func requireSearchAttributes(t *testing.T, c client.Client, namespace string) {
	t.Helper()
	resp, err := c.OperatorService().ListSearchAttributes(context.Background(),
		&operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	require.NoError(t, err)
	for _, name := range []string{contract.ConversationIDAttribute, contract.PendingApprovalsAttribute, contract.StatusAttribute} {
		require.Contains(t, resp.GetCustomAttributes(), name)
	}
}

// waitHealthy waits until the API at addr answers GET /healthz with 200.
func waitHealthy(t *testing.T, p *proctest.Process, addr string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		select {
		case <-p.Exited:
			return
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		require.NoError(ct, err)
		resp.Body.Close()
		assert.Equal(ct, http.StatusOK, resp.StatusCode)
	}, readyWait, 50*time.Millisecond, "%s at %s is healthy", p.Name, addr)
	proctest.RequireRunning(t, p)
}

// listApprovals is GET /approvals at addr.
func listApprovals(ct *assert.CollectT, addr string) []protocol.PendingApproval {
	resp, err := http.Get("http://" + addr + "/approvals")
	require.NoError(ct, err)
	defer resp.Body.Close()
	require.Equal(ct, http.StatusOK, resp.StatusCode)
	var out struct {
		Approvals []protocol.PendingApproval `json:"approvals"`
	}
	require.NoError(ct, json.NewDecoder(resp.Body).Decode(&out))
	return out.Approvals
}

// turnCount is $TOLLGATE_CLUSTER_TURNS, else 200.
func turnCount(t *testing.T) int {
	t.Helper()
	v := os.Getenv(envTurns)
	if v == "" {
		return defaultTurns
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, envTurns)
	require.GreaterOrEqual(t, n, 4, envTurns)
	return n
}

func ofType(events []protocol.Event, typ string) []protocol.Event {
	var out []protocol.Event
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// eventKeys lists each event by its id and what a client holds of it.
func eventKeys(events []protocol.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = strings.Join([]string{strconv.Itoa(e.Seq), e.Type, e.RequestID, e.ToolCallID, e.Data, e.Decision, e.Reason}, " ")
	}
	return out
}
