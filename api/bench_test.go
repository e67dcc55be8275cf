package main

// `make bench` runs BenchmarkTollgate once (-benchtime 1x): one tuned dev
// server, one in-process worker, the scripted model and the API over real
// HTTP, measured against a minimal workflow that does the same work on the
// same worker. `go test` without -bench compiles it and runs none of it.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// Environment of the benchmark.
const (
	// envBenchOut names the markdown file the benchmark writes its report
	// to; `make bench` sets it to bench/RESULTS.md.
	envBenchOut = "TOLLGATE_BENCH_OUT"
	// envBenchRuns overrides benchRuns, for a quick try.
	envBenchRuns = "TOLLGATE_BENCH_RUNS"
)

// Sizes of the benchmark.
const (
	benchRuns        = 50  // sequential samples of each latency
	benchWarmup      = 5   // unmeasured turns of each kind first
	benchConcurrency = 20  // clients of the concurrent throughput run
	benchBurstTurns  = 100 // turns of the concurrent throughput run
	fanTurns         = 50  // paused turns the fan-out watches
	fanClients       = 500 // SSE clients of the fan-out, spread over fanTurns
	fanIdle          = 5 * time.Second
	fanApprovals     = 10 // turns approved while the fan-out watches
	historyToolCalls = 10
	historyTokens    = 2000
	historyLimit     = 10240 // Temporal's history event count warning
	benchWait        = time.Minute
)

// Names of the raw floor, registered on the same worker as tollgate.
const (
	floorWorkflowName = "BenchFloor"
	floorActivityName = "BenchFloorTool"
	floorSignalName   = "approval"
)

// Queries that tell the benchmark's model what to answer.
const (
	queryApprove      = "bench: ask to write a file"
	queryHistoryBatch = "bench-history: 10 reads in one batch, then a long answer"
	queryHistorySteps = "bench-history: 10 reads one by one, then a long answer"
	historyMarker     = "bench-history"
)

// BenchmarkTollgate measures tollgate against the raw Temporal floor and
// writes the report to $TOLLGATE_BENCH_OUT when set. Run it once:
//
//	go test -run '^$' -bench '^BenchmarkTollgate$' -benchtime 1x ./api/
func BenchmarkTollgate(b *testing.B) {
	runs := benchRuns
	if v := os.Getenv(envBenchRuns); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			b.Fatalf("%s=%q: want a number of 2 or more", envBenchRuns, v)
		}
		runs = n
	}
	rep := &benchReport{Date: time.Now(), Runs: runs, LoadBefore: loadAverage()}
	env := startBenchEnv(b)
	b.Cleanup(func() {
		if n := env.floorQueryErrors.Load(); n > 0 {
			b.Logf("the floor's events queries failed %d times, each read again; the last: %v", n, env.lastFloorQueryErr.Load())
		}
	})
	ctx := context.Background()

	b.Log("warming up")
	for i := range benchWarmup {
		if _, err := env.floorTurn(ctx, fmt.Sprintf("warm-%d", i)); err != nil {
			b.Fatal(err)
		}
		if _, err := env.tollgateTurn(ctx, fmt.Sprintf("warm-%d", i)); err != nil {
			b.Fatal(err)
		}
	}

	b.Logf("latency: %d turns of each, one at a time, alternating", runs)
	var floor, tg []turnSample
	var floorTime, tgTime time.Duration
	queriesBefore := current(env.srv.metrics.eventQueries)
	for i := range runs {
		s, err := env.floorTurn(ctx, fmt.Sprintf("seq-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		floor, floorTime = append(floor, s), floorTime+s.total
		s, err = env.tollgateTurn(ctx, fmt.Sprintf("seq-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		tg, tgTime = append(tg, s), tgTime+s.total
	}
	rep.QueriesPerTurn = float64(current(env.srv.metrics.eventQueries)-queriesBefore) / float64(runs)
	rep.Floor.Request, rep.Tollgate.Request = latencies(floor, requestLatency), latencies(tg, requestLatency)
	rep.Floor.Result, rep.Tollgate.Result = latencies(floor, resultLatency), latencies(tg, resultLatency)
	rep.Floor.TurnsPerSec1 = float64(runs) / floorTime.Seconds()
	rep.Tollgate.TurnsPerSec1 = float64(runs) / tgTime.Seconds()

	b.Log("where the time goes")
	var err error
	if rep.Breakdown, err = env.breakdown(ctx, floor, tg); err != nil {
		b.Fatal(err)
	}
	if rep.Timeline, err = env.timeline(ctx, medianSample(tg, requestLatency)); err != nil {
		b.Fatal(err)
	}
	rep.HistoryApproved, err = historyLength(ctx, env.client, medianSample(tg, requestLatency).workflowID)
	if err != nil {
		b.Fatal(err)
	}

	b.Logf("throughput: %d turns of each, %d at a time", benchBurstTurns, benchConcurrency)
	for _, side := range []struct {
		name  string
		stats *pathStats
		turn  func(context.Context, string) (turnSample, error)
	}{{"floor", &rep.Floor, env.floorTurn}, {"tollgate", &rep.Tollgate, env.tollgateTurn}} {
		self0, server0 := env.cpuTimes()
		if side.stats.TurnsPerSec20, side.stats.Burst, err = burst(ctx, side.name, side.turn); err != nil {
			b.Fatal(err)
		}
		self1, server1 := env.cpuTimes()
		side.stats.CPUSelf = (self1 - self0) / benchBurstTurns
		if server0 >= 0 && server1 >= 0 {
			side.stats.CPUServer = (server1 - server0) / benchBurstTurns
		}
	}

	b.Logf("fan-out: %d clients on %d paused turns", fanClients, fanTurns)
	if rep.FanOut, err = env.fanOut(ctx); err != nil {
		b.Fatal(err)
	}

	b.Log("history cost")
	for _, q := range []string{queryHistoryBatch, queryHistorySteps} {
		h, err := env.historyCost(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		rep.History = append(rep.History, h)
	}
	rep.LoadAfter = loadAverage()

	b.ReportMetric(ms(rep.Floor.Request.p50), "floor-request-p50-ms")
	b.ReportMetric(ms(rep.Tollgate.Request.p50), "request-p50-ms")
	b.ReportMetric(ms(rep.Floor.Result.p50), "floor-result-p50-ms")
	b.ReportMetric(ms(rep.Tollgate.Result.p50), "result-p50-ms")
	b.ReportMetric(rep.Tollgate.Request.p50.Seconds()/rep.Floor.Request.p50.Seconds(), "request-p50-x-floor")
	b.ReportMetric(rep.Tollgate.Result.p50.Seconds()/rep.Floor.Result.p50.Seconds(), "result-p50-x-floor")
	b.ReportMetric(rep.Tollgate.TurnsPerSec1, "turns/s-c1")
	b.ReportMetric(rep.Tollgate.TurnsPerSec20, "turns/s-c20")
	b.ReportMetric(rep.FanOut.IdleQPS[1], "idle-queries/s-500-clients")
	b.ReportMetric(rep.FanOut.HeapPerStream, "heap-B/stream")
	b.ReportMetric(float64(rep.History[0].TurnEvents), "history-events/turn")

	md := rep.markdown()
	if out := os.Getenv(envBenchOut); out == "" {
		b.Log("\n" + md)
	} else {
		if err := writeReport(out, md); err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s", out)
	}
}

// benchEnv is the system under test: a tuned dev server, a worker in this
// process running tollgate and the floor, the scripted model and the API.
type benchEnv struct {
	tb     testing.TB
	client client.Client
	srv    *Server
	api    *httptest.Server
	http   *http.Client
	queue  string
	// run keeps this run's conversation and workflow ids apart from any
	// earlier run's on a reused server.
	run string
	// serverPID is the dev server's process, for its CPU time; 0 when it
	// cannot be found.
	serverPID int
	// floorQueryErrors counts the floor's events queries that failed (and
	// were read again, as the hub does); lastFloorQueryErr is the last.
	floorQueryErrors  atomic.Int64
	lastFloorQueryErr atomic.Value
}

func startBenchEnv(tb testing.TB) *benchEnv {
	tb.Helper()
	ts := devserver.ForTest(tb)
	c, err := ts.Dial()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), benchWait)
	defer cancel()
	if err := workflows.EnsureSearchAttributes(ctx, c, ts.Namespace, log); err != nil {
		tb.Fatal(err)
	}

	// One model endpoint, as the worker has: the answer streams at once,
	// except for the history turns, whose long answer streams a word a
	// millisecond so that token batches happen.
	fast := scripted.New(benchScript)
	slow := scripted.New(benchScript, scripted.ChunkDelay(time.Millisecond))
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(historyMarker)) {
			slow.ServeHTTP(w, r)
			return
		}
		fast.ServeHTTP(w, r)
	}))
	tb.Cleanup(model.Close)

	workspace := tb.TempDir()
	if err := os.WriteFile(filepath.Join(workspace, "README.md"), []byte("# bench\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	tools := stackTools(workspace)
	wf := &workflows.Workflows{Settings: stackSettings(tools, 0)}
	env := &benchEnv{tb: tb, client: c, queue: "tollgate-bench", run: strconv.FormatInt(time.Now().UnixNano()%1e9, 36),
		serverPID: findServerPID(ts.HostPort)}
	// The worker's options are main's: the defaults.
	w := worker.New(c, env.queue, workflows.WorkerOptions())
	workflows.Register(w, wf, activities.NewModel(model.URL+"/v1", "", scripted.ModelName, workflows.TokenSignaler{Client: c}), tools)
	w.RegisterWorkflowWithOptions(floorWorkflow, workflow.RegisterOptions{Name: floorWorkflowName})
	// The floor's one activity is the very tool the tollgate turns run, so
	// that the comparison is of everything around the tool.
	w.RegisterActivityWithOptions(floorTool{tools}.FloorWrite, activity.RegisterOptions{Name: floorActivityName})
	if err := w.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(w.Stop)

	env.srv = NewServer(Options{Client: c, TaskQueue: env.queue, Logger: log})
	env.api = serveAPI(tb, env.srv)
	env.http = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	return env
}

// benchScript is the benchmark's model. To queryApprove it asks to Write a
// file (a protected tool) and, given the result, answers "done". To the
// history queries it asks for historyToolCalls Reads, in one batch or one by
// one, and then answers with historyTokens words.
func benchScript(req openai.ChatCompletionRequest) scripted.Reply {
	var query string
	results := 0
	for _, m := range req.Messages {
		switch m.Role {
		case openai.ChatMessageRoleUser:
			query = m.Content
		case openai.ChatMessageRoleTool:
			results++
		}
	}
	read := func(i int) activities.ToolCall {
		return activities.ToolCall{ID: fmt.Sprintf("call_r%d", i), Name: activities.ToolRead, Arguments: `{"file_path":"README.md"}`}
	}
	switch query {
	case queryHistoryBatch:
		if results == 0 {
			reply := scripted.Reply{}
			for i := range historyToolCalls {
				reply.ToolCalls = append(reply.ToolCalls, read(i))
			}
			return reply
		}
		return scripted.Reply{Content: longAnswer}
	case queryHistorySteps:
		if results < historyToolCalls {
			return scripted.Reply{ToolCalls: []activities.ToolCall{read(results)}}
		}
		return scripted.Reply{Content: longAnswer}
	default:
		if results == 0 {
			return scripted.Reply{ToolCalls: []activities.ToolCall{benchWriteCall}}
		}
		return scripted.Reply{Content: "done"}
	}
}

// longAnswer is historyTokens words; the scripted server streams a word a
// chunk.
var longAnswer = strings.TrimSpace(strings.Repeat("token ", historyTokens))

// floorWorkflow is the least a workflow can do for one approved tool call:
// publish the request in a queryable log, wait for the decision signal, run
// the tool (the same Write activity a turn runs), publish its result. A
// second signal ends it. Its log answers the same events query as a turn's,
// so it is read the same way.
func floorWorkflow(ctx workflow.Context) error {
	var log []workflows.Event
	publish := func(e workflows.Event) {
		e.Seq = len(log) + 1
		log = append(log, e)
	}
	if err := workflow.SetQueryHandler(ctx, workflows.EventsQuery, func(req workflows.EventsRequest) (workflows.EventsResponse, error) {
		resp := workflows.EventsResponse{Events: []workflows.Event{}}
		if req.After < len(log) {
			resp.Events = append(resp.Events, log[max(req.After, 0):]...)
		}
		return resp, nil
	}); err != nil {
		return err
	}
	publish(workflows.Event{Type: workflows.EventApprovalRequest, RequestID: "r", ToolName: activities.ToolWrite})
	decisions := workflow.GetSignalChannel(ctx, floorSignalName)
	var d workflows.ApprovalDecision
	decisions.Receive(ctx, &d)
	// The options of a tollgate tool call.
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 3 * time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var out activities.ToolOutput
	if err := workflow.ExecuteActivity(actx, floorActivityName, activities.ToolInput{Call: benchWriteCall}).Get(ctx, &out); err != nil {
		return err
	}
	publish(workflows.Event{Type: workflows.EventToolResult, ToolResults: []workflows.ToolResult{{
		ID: benchWriteCall.ID, Name: benchWriteCall.Name, Result: out.Result, Status: out.Status,
	}}})
	decisions.Receive(ctx, nil)
	return nil
}

// floorTool runs the Write tool for the floor. It is a method of its own
// because the SDK maps a registered function's Go name to the name it was
// registered under: registering Tools.Write a second time would turn every
// "Write" a turn schedules into the floor's activity.
type floorTool struct{ tools *activities.Tools }

// FloorWrite is the floor's activity.
func (f floorTool) FloorWrite(ctx context.Context, in activities.ToolInput) (activities.ToolOutput, error) {
	return f.tools.Write(ctx, in)
}

// benchWriteCall is the protected call both sides make.
var benchWriteCall = activities.ToolCall{ID: "call_w", Name: activities.ToolWrite, Arguments: `{"file_path":"bench.txt","content":"x"}`}

// stamped is an event and when the client got it.
type stamped struct {
	workflows.Event
	at time.Time
}

// turnSample is one turn's client-side times.
type turnSample struct {
	conv, workflowID string
	// start: the request that starts the turn; headers: its response
	// headers (tollgate only); request: the approval_request event arrives;
	// decide: the decision is sent; decided: its call returns; result: the
	// tool_result event arrives; finish: the finish event arrives.
	start, headers, request, decide, decided, result, finish time.Time
	total                                                    time.Duration
}

func requestLatency(s turnSample) time.Duration { return s.request.Sub(s.start) }
func resultLatency(s turnSample) time.Duration  { return s.result.Sub(s.decide) }

// tollgateTurn runs one turn through the API as a client does: POST
// /chat/stream, wait for the approval_request on the stream, POST
// /chat/approval, wait for tool_result, then for finish.
func (e *benchEnv) tollgateTurn(ctx context.Context, name string) (turnSample, error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	s := turnSample{conv: "bench-" + e.run + "-" + name}
	body, _ := json.Marshal(protocol.ChatRequest{Query: queryApprove, ConversationID: s.conv})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.api.URL+"/chat/stream", bytes.NewReader(body))
	if err != nil {
		return s, err
	}
	req.Header.Set("Content-Type", "application/json")
	s.start = time.Now()
	resp, err := e.http.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	s.headers = time.Now()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("POST /chat/stream: %s", resp.Status)
	}
	s.workflowID = resp.Header.Get(protocol.HeaderTurnID)
	events := readStamped(resp.Body)
	ev, err := awaitEvent(ctx, events, workflows.EventApprovalRequest)
	if err != nil {
		return s, fmt.Errorf("turn %s: %w%s", s.workflowID, err, whereStuck(e.client, s.workflowID))
	}
	s.request = ev.at

	body, _ = json.Marshal(workflows.ApprovalDecision{RequestID: ev.RequestID, Decision: workflows.DecisionApprove})
	s.decide = time.Now()
	areq, err := http.NewRequestWithContext(ctx, http.MethodPost, e.api.URL+"/chat/approval", bytes.NewReader(body))
	if err != nil {
		return s, err
	}
	areq.Header.Set("Content-Type", "application/json")
	aresp, err := e.http.Do(areq)
	if err != nil {
		return s, err
	}
	var accepted struct{ Accepted bool }
	err = json.NewDecoder(aresp.Body).Decode(&accepted)
	aresp.Body.Close()
	s.decided = time.Now()
	if err != nil || !accepted.Accepted {
		return s, fmt.Errorf("approval of %s not accepted (%s): %v", ev.RequestID, aresp.Status, err)
	}

	ev, err = awaitEvent(ctx, events, workflows.EventToolResult)
	if err != nil {
		return s, fmt.Errorf("turn %s: %w%s", s.workflowID, err, whereStuck(e.client, s.workflowID))
	}
	if st := ev.ToolResults[0].Status; st != activities.StatusOK {
		return s, fmt.Errorf("turn %s: tool result %s: %s", s.workflowID, st, ev.ToolResults[0].Result)
	}
	s.result = ev.at
	if ev, err = awaitEvent(ctx, events, workflows.EventFinish); err != nil {
		return s, fmt.Errorf("turn %s: %w%s", s.workflowID, err, whereStuck(e.client, s.workflowID))
	}
	s.finish = ev.at
	s.total = time.Since(s.start)
	return s, nil
}

// floorTurn runs the floor workflow as tollgate's API reads a turn: start
// it, learn of its progress from its history's long poll, read its log with
// the events query; signal the decision; signal it to end.
func (e *benchEnv) floorTurn(ctx context.Context, name string) (turnSample, error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	s := turnSample{workflowID: "bench-floor-" + e.run + "-" + name}
	s.start = time.Now()
	run, err := e.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: s.workflowID, TaskQueue: e.queue}, floorWorkflowName)
	if err != nil {
		return s, err
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	events := e.watchFloor(watchCtx, s.workflowID)
	ev, err := awaitEvent(ctx, events, workflows.EventApprovalRequest)
	if err != nil {
		return s, fmt.Errorf("floor %s: %w%s", s.workflowID, err, whereStuck(e.client, s.workflowID))
	}
	s.request = ev.at
	s.decide = time.Now()
	d := workflows.ApprovalDecision{RequestID: ev.RequestID, Decision: workflows.DecisionApprove}
	if err := e.client.SignalWorkflow(ctx, s.workflowID, "", floorSignalName, d); err != nil {
		return s, err
	}
	s.decided = time.Now()
	if ev, err = awaitEvent(ctx, events, workflows.EventToolResult); err != nil {
		return s, fmt.Errorf("floor %s: %w%s", s.workflowID, err, whereStuck(e.client, s.workflowID))
	}
	s.result = ev.at
	stopWatching()
	if err := e.client.SignalWorkflow(ctx, s.workflowID, "", floorSignalName, nil); err != nil {
		return s, err
	}
	if err := run.Get(ctx, nil); err != nil {
		return s, err
	}
	s.total = time.Since(s.start)
	return s, nil
}

// watchFloor reads a floor workflow's log the way the API's poller reads a
// turn's: temporalSource's history long poll says when, its events query
// reads what is new.
func (e *benchEnv) watchFloor(ctx context.Context, workflowID string) <-chan stamped {
	src := temporalSource{client: e.client, log: slog.New(slog.DiscardHandler)}
	out := make(chan stamped, 16)
	wake := make(chan struct{}, 1)
	go func() {
		_ = src.Watch(ctx, workflowID, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
	}()
	go func() {
		after := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			qctx, qcancel := context.WithTimeout(ctx, defaultHubSettings.queryTimeout)
			resp, err := src.Events(qctx, workflowID, after, false)
			qcancel()
			if err != nil && ctx.Err() == nil {
				e.floorQueryErrors.Add(1)
				e.lastFloorQueryErr.Store(err.Error())
			}
			if err != nil {
				// As the hub does: read again after a pause. Waiting for the
				// next history event instead would wait forever on a floor
				// that waits for its signal.
				select {
				case <-ctx.Done():
					return
				case <-time.After(defaultHubSettings.minBackoff):
				}
				select {
				case wake <- struct{}{}:
				default:
				}
				continue
			}
			now := time.Now()
			for _, ev := range resp.Events {
				after = ev.Seq
				select {
				case out <- stamped{Event: ev, at: now}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// readStamped parses an SSE stream's numbered events, noting when each
// arrived. The channel closes at the stream's end.
func readStamped(r io.Reader) <-chan stamped {
	out := make(chan stamped, 64)
	go func() {
		defer close(out)
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: ")
			if !ok {
				continue
			}
			at := time.Now()
			var ev workflows.Event
			if json.Unmarshal([]byte(data), &ev) != nil || ev.Seq == 0 {
				continue // a keep-alive
			}
			out <- stamped{Event: ev, at: at}
		}
	}()
	return out
}

// awaitEvent returns the next event of type typ; an error event or the
// stream's end before it is an error.
func awaitEvent(ctx context.Context, events <-chan stamped, typ string) (stamped, error) {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return ev, fmt.Errorf("stream ended before %s", typ)
			}
			if ev.Type == typ {
				return ev, nil
			}
			if ev.Type == workflows.EventError || ev.Type == workflows.EventFinish {
				return ev, fmt.Errorf("%s before %s: %s%s", ev.Type, typ, ev.Message, ev.Reason)
			}
		case <-ctx.Done():
			return stamped{}, fmt.Errorf("no %s: %w", typ, ctx.Err())
		}
	}
}

// burst runs benchBurstTurns turns, benchConcurrency at a time, and returns
// turns per second and the latencies under that load.
func burst(ctx context.Context, name string, turn func(context.Context, string) (turnSample, error)) (float64, burstLatency, error) {
	var (
		mu      sync.Mutex
		samples []turnSample
		errs    []error
		wg      sync.WaitGroup
	)
	next := make(chan int, benchBurstTurns)
	for i := range benchBurstTurns {
		next <- i
	}
	close(next)
	start := time.Now()
	for range benchConcurrency {
		wg.Go(func() {
			for i := range next {
				s, err := turn(ctx, fmt.Sprintf("burst-%d", i))
				mu.Lock()
				samples, errs = append(samples, s), append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, burstLatency{}, fmt.Errorf("%s burst: %w", name, err)
	}
	return float64(benchBurstTurns) / elapsed.Seconds(),
		burstLatency{Request: latencies(samples, requestLatency), Result: latencies(samples, resultLatency)}, nil
}

// summary is a latency distribution.
type summary struct{ p50, p95, max time.Duration }

func latencies(samples []turnSample, f func(turnSample) time.Duration) summary {
	ds := make([]time.Duration, len(samples))
	for i, s := range samples {
		ds[i] = f(s)
	}
	return summarize(ds)
}

func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return summary{p50: percentile(ds, 50), p95: percentile(ds, 95), max: ds[len(ds)-1]}
}

// percentile is the nearest-rank percentile of sorted ds.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// medianSample is the sample whose f is the median.
func medianSample(samples []turnSample, f func(turnSample) time.Duration) turnSample {
	sorted := slices.Clone(samples)
	slices.SortFunc(sorted, func(a, b turnSample) int { return cmp.Compare(f(a), f(b)) })
	return sorted[(len(sorted)-1)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// history returns a workflow's whole history.
func history(ctx context.Context, c client.Client, workflowID string) ([]*historypb.HistoryEvent, error) {
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var all []*historypb.HistoryEvent
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", workflowID, err)
		}
		all = append(all, ev)
	}
	return all, nil
}

// whereStuck says what a workflow that did not get on is doing: its last
// history events and its pending activities and workflow task, for the
// error of a benchmark that waited in vain.
func whereStuck(c client.Client, workflowID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	fmt.Fprintf(&b, "\n  %s at %s:", workflowID, time.Now().Format("15:04:05.000"))
	if h, err := history(ctx, c, workflowID); err != nil {
		fmt.Fprintf(&b, "\n    history: %v", err)
	} else {
		for _, ev := range h[max(0, len(h)-8):] {
			fmt.Fprintf(&b, "\n    %s %s", ev.GetEventTime().AsTime().Format("15:04:05.000"), ev.GetEventType())
		}
	}
	desc, err := c.DescribeWorkflow(ctx, workflowID, "")
	if err != nil {
		fmt.Fprintf(&b, "\n    describe: %v", err)
		return b.String()
	}
	d := desc.RawResponse
	for _, a := range d.GetPendingActivities() {
		fmt.Fprintf(&b, "\n    pending activity %s: %s, attempt %d, last started %s, last heartbeat %s, last failure %v",
			a.GetActivityType().GetName(), a.GetState(), a.GetAttempt(),
			a.GetLastStartedTime().AsTime().Format("15:04:05.000"), a.GetLastHeartbeatTime().AsTime().Format("15:04:05.000"), a.GetLastFailure().GetMessage())
	}
	if wt := d.GetPendingWorkflowTask(); wt != nil {
		fmt.Fprintf(&b, "\n    pending workflow task: %s, attempt %d, scheduled %s", wt.GetState(), wt.GetAttempt(), wt.GetScheduledTime().AsTime().Format("15:04:05.000"))
	}
	return b.String()
}

func historyLength(ctx context.Context, c client.Client, workflowID string) (int, error) {
	h, err := history(ctx, c, workflowID)
	return len(h), err
}

// cpuTimes returns the CPU time used so far by this process (worker, API,
// model and clients) and by the dev server, or -1 for the server where
// /proc cannot tell.
func (e *benchEnv) cpuTimes() (self, server time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	server = -1
	if e.serverPID == 0 {
		return self, server
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", e.serverPID))
	if err != nil {
		return self, server
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th of the whole line, in clock ticks of 1/100 s.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return self, server
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return self, server
	}
	return self, time.Duration(utime+stime) * 10 * time.Millisecond
}

// findServerPID finds the dev server listening on hostPort by its command
// line, or returns 0.
func findServerPID(hostPort string) int {
	_, port, _ := strings.Cut(hostPort, ":")
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if slices.Contains(args, "start-dev") && slices.Contains(args, port) && slices.Contains(args, "--port") {
			return pid
		}
	}
	return 0
}

// loadAverage is the machine's one-minute load average, or "" where
// /proc/loadavg does not exist.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Fields(string(b))[0]
}
