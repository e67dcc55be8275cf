package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
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

// Queries that tell the benchmark's model what to answer.
const (
	queryApprove      = "bench: ask to write a file"
	queryHistoryBatch = "bench-history: 10 reads in one batch, then a long answer"
	queryHistorySteps = "bench-history: 10 reads one by one, then a long answer"
	// queryHistoryProtected asks for historyToolCalls Writes in one batch,
	// each decided by a person through the API.
	queryHistoryProtected = "bench-history: 10 writes in one batch, each approved by a person, then a long answer"
	// historyMarker marks the queries whose answers stream slowly.
	historyMarker = "bench-history"
)

// env is what the benchmark measures: tollgate's API and worker, and the
// floor beside them on the same dev server.
type env struct {
	// temporal starts, signals and reads the floor, and reads every
	// workflow's history.
	temporal client.Client
	api      apiClient
	// apiMetrics and worker read the API's and the worker's GET /metrics.
	apiMetrics, worker metricsReader
	floorQueue         string
	floor              *floorReader
	// run keeps this run's conversation and workflow ids apart from any
	// earlier run's on a reused server.
	run string
	// serverCPU is the CPU time the Temporal server has used so far (with
	// its database's processes), or -1 when it cannot tell.
	serverCPU func() time.Duration
	// tollgateCPU is the CPU time tollgate's worker and API have used so
	// far, from /proc (tollgate.cpu), or -1 each when it cannot tell.
	tollgateCPU func() (worker, api time.Duration)
	// tails checks the same-shape floor's conversations after their turns
	// have ended (runShapedTurn); runPart waits for it.
	tails *errgroup.Group
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
	read := func(i int) protocol.ToolCall {
		return protocol.ToolCall{ID: fmt.Sprintf("call_r%d", i), Name: protocol.ToolRead, Arguments: `{"file_path":"README.md"}`}
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
	case queryHistoryProtected:
		if results == 0 {
			reply := scripted.Reply{}
			for i := range historyToolCalls {
				reply.ToolCalls = append(reply.ToolCalls, protocol.ToolCall{ID: fmt.Sprintf("call_w%d", i), Name: protocol.ToolWrite,
					Arguments: fmt.Sprintf(`{"file_path":"bench-%d.txt","content":"x"}`, i)})
			}
			return reply
		}
		return scripted.Reply{Content: longAnswer}
	case queryHistorySteps:
		if results < historyToolCalls {
			return scripted.Reply{ToolCalls: []protocol.ToolCall{read(results)}}
		}
		return scripted.Reply{Content: longAnswer}
	default:
		if results == 0 {
			return scripted.Reply{ToolCalls: []protocol.ToolCall{benchWriteCall}}
		}
		return scripted.Reply{Content: "done"}
	}
}

// longAnswer is historyTokens words; the scripted server streams a word a
// chunk.
var longAnswer = strings.TrimSpace(strings.Repeat("token ", historyTokens))

// tollgateTurn runs one turn through the API as a client does: POST
// /chat/stream, wait for the approval_request on the stream, POST
// /chat/approval, wait for tool_result, then for finish.
func (e *env) tollgateTurn(ctx context.Context, name string) (turnSample, error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	s := turnSample{conv: "bench-" + e.run + "-" + name}
	s.start = time.Now()
	resp, turnID, err := e.api.chat(ctx, queryApprove, s.conv)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	s.headers, s.workflowID = time.Now(), turnID
	events := readStamped(resp.Body)
	ev, err := awaitEvent(ctx, events, protocol.EventApprovalRequest)
	if err != nil {
		return s, fmt.Errorf("turn %s: %w%s", s.workflowID, err, whereStuck(e.temporal, s.workflowID))
	}
	s.request = ev.at

	s.decide = time.Now()
	if err := e.api.approve(ctx, ev.RequestID); err != nil {
		return s, err
	}
	s.decided = time.Now()

	ev, err = awaitEvent(ctx, events, protocol.EventToolResult)
	if err != nil {
		return s, fmt.Errorf("turn %s: %w%s", s.workflowID, err, whereStuck(e.temporal, s.workflowID))
	}
	if st := ev.ToolResults[0].Status; st != protocol.StatusOK {
		return s, fmt.Errorf("turn %s: tool result %s: %s", s.workflowID, st, ev.ToolResults[0].Result)
	}
	s.result = ev.at
	if ev, err = awaitEvent(ctx, events, protocol.EventFinish); err != nil {
		return s, fmt.Errorf("turn %s: %w%s", s.workflowID, err, whereStuck(e.temporal, s.workflowID))
	}
	s.finish = ev.at
	s.total = time.Since(s.start)
	return s, nil
}

// floorTurn runs the floor workflow as tollgate's API reads a turn: start
// it, learn of its progress from its history's long poll, read its log with
// the events query; signal the decision; signal it to end.
func (e *env) floorTurn(ctx context.Context, name string) (turnSample, error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	s := turnSample{workflowID: "bench-floor-" + e.run + "-" + name}
	s.start = time.Now()
	run, err := e.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: s.workflowID, TaskQueue: e.floorQueue}, floorWorkflowName)
	if err != nil {
		return s, err
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	events := e.floor.watch(watchCtx, s.workflowID)
	if err := e.approveFloor(ctx, "floor", &s, events); err != nil {
		return s, err
	}
	stopWatching()
	if err := e.temporal.SignalWorkflow(ctx, s.workflowID, "", floorSignalName, nil); err != nil {
		return s, err
	}
	if err := run.Get(ctx, nil); err != nil {
		return s, err
	}
	s.total = time.Since(s.start)
	return s, nil
}

// approveFloor takes a floor turn from its approval_request, through the
// decision signal, to its tool_result, stamping s; kind names the floor in
// errors.
func (e *env) approveFloor(ctx context.Context, kind string, s *turnSample, events <-chan stamped) error {
	ev, err := awaitEvent(ctx, events, protocol.EventApprovalRequest)
	if err != nil {
		return fmt.Errorf("%s %s: %w%s", kind, s.workflowID, err, whereStuck(e.temporal, s.workflowID))
	}
	s.request = ev.at
	s.decide = time.Now()
	d := protocol.ApprovalDecision{RequestID: ev.RequestID, Decision: protocol.DecisionApprove}
	if err := e.temporal.SignalWorkflow(ctx, s.workflowID, "", floorSignalName, d); err != nil {
		return err
	}
	s.decided = time.Now()
	if ev, err = awaitEvent(ctx, events, protocol.EventToolResult); err != nil {
		return fmt.Errorf("%s %s: %w%s", kind, s.workflowID, err, whereStuck(e.temporal, s.workflowID))
	}
	if st := ev.ToolResults[0].Status; st != protocol.StatusOK {
		return fmt.Errorf("%s %s: tool result %s: %s", kind, s.workflowID, st, ev.ToolResults[0].Result)
	}
	s.result = ev.at
	return nil
}

// burst runs benchBurstTurns turns, benchConcurrency at a time, and returns
// turns per second and the latencies under that load.
func burst(ctx context.Context, name string, turn func(context.Context, string) (turnSample, error)) (float64, burstLatency, error) {
	tps, lat, _, err := burstOf(ctx, name, benchConcurrency, benchBurstTurns, turn)
	return tps, lat, err
}

// burstOf runs turns turns, concurrency at a time, and returns turns per
// second, the latencies under that load and the samples.
func burstOf(ctx context.Context, name string, concurrency, turns int, turn func(context.Context, string) (turnSample, error)) (float64, burstLatency, []turnSample, error) {
	var (
		mu      sync.Mutex
		samples []turnSample
		errs    []error
		wg      sync.WaitGroup
	)
	next := make(chan int, turns)
	for i := range turns {
		next <- i
	}
	close(next)
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for i := range next {
				s, err := turn(ctx, fmt.Sprintf("burst-%s-%d", name, i))
				mu.Lock()
				samples, errs = append(samples, s), append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, burstLatency{}, nil, fmt.Errorf("%s burst: %w", name, err)
	}
	return float64(turns) / elapsed.Seconds(),
		burstLatency{Request: latencies(samples, requestLatency), Result: latencies(samples, resultLatency)}, samples, nil
}

// waitUntil returns once cond holds, checking it every tick, or the error
// that cond or the deadline gave.
func waitUntil(ctx context.Context, tick time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// metricPoll is how often a wait on a metric scrapes /metrics.
const metricPoll = 100 * time.Millisecond

// waitQuiet returns once the API's events queries have not moved for a
// second: its pollers have read what there was to read.
func (e *env) waitQuiet(ctx context.Context) error {
	last, since := int64(-1), time.Now()
	return waitUntil(ctx, metricPoll, func(ctx context.Context) (bool, error) {
		n, err := e.apiMetrics.count(ctx, metricEventQueries)
		if err != nil {
			return false, err
		}
		if n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= time.Second, nil
	})
}

// waitMetric returns once the API's series name has the value want.
func (e *env) waitMetric(ctx context.Context, name string, want int64) error {
	var got int64
	err := waitUntil(ctx, metricPoll, func(ctx context.Context) (bool, error) {
		var err error
		got, err = e.apiMetrics.count(ctx, name)
		return got == want, err
	})
	if err != nil {
		return fmt.Errorf("%s is %d, not %d: %w", name, got, want, err)
	}
	return nil
}
