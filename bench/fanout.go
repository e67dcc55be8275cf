package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/protocol"
)

// fanOutResult is what the fan-out measured. Index 0 of the pairs is with
// one client per turn, index 1 with all clients.
type fanOutResult struct {
	Clients        [2]int
	ConnectQueries [2]int64
	IdleQPS        [2]float64
	// IdleCPUOurs and IdleCPUServer are the share of one core that the
	// worker and API processes and the dev server (-1 when unknown) used
	// while the turns waited.
	IdleCPUOurs, IdleCPUServer [2]float64
	OpenStreams                int64
	Pollers                    int64
	// HeapPerFirst and StackPerFirst are per stream of the first client of
	// each turn (its turn's poller included); HeapPerStream and
	// StackPerStream per further stream.
	HeapPerFirst, StackPerFirst   float64
	HeapPerStream, StackPerStream float64
	// Watched is approvals with all clients watching; Control is more
	// approvals once the further clients have left, with one client on
	// each remaining turn.
	Watched, Control approvalStats
}

// approvalStats are the approvals of paused turns while clients watch.
type approvalStats struct {
	Turns, PerTurn int
	// Latency is approve → tool_result at every client watching the
	// approved turn; First at the first of them.
	Latency, First summary
	// QueriesPerApproval are the events queries from the approval to the
	// turn's finish.
	QueriesPerApproval float64
	// Breakdown is the approval path's stretches, to the first client.
	Breakdown []segment
}

// paused is a turn that waits for its approval, and its conversation
// (when known).
type paused struct{ conv, turnID, requestID string }

// fanOut pauses fanTurns turns at their approval request, watches them with
// fanClients SSE clients, and measures the API's queries, memory and CPU
// (from its /metrics) and the event latency at the clients.
func (e *env) fanOut(ctx context.Context) (fanOutResult, error) {
	var res fanOutResult
	turns := make([]paused, fanTurns)
	var wg sync.WaitGroup
	errs := make([]error, fanTurns)
	slots := make(chan struct{}, 10)
	for i := range fanTurns {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			turns[i].turnID, turns[i].requestID, errs[i] = e.pauseTurn(ctx, fmt.Sprintf("bench-%s-fan-%d", e.run, i))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	// The streams that started the turns have left; wait for their pollers
	// to stop, so the watchers start from nothing.
	if err := e.waitMetric(ctx, metricPollersRunning, 0); err != nil {
		return res, fmt.Errorf("pollers of the paused turns did not stop: %w", err)
	}
	ids := make([]string, fanTurns)
	for i, t := range turns {
		ids[i] = t.turnID
	}
	queries := func() (int64, error) { return e.apiMetrics.count(ctx, metricEventQueries) }

	// measure connects the watchers of one step and takes its figures:
	// the queries they cost to connect, the queries and CPU while the turns
	// wait, and the API's memory after.
	type step struct {
		connect, idle int64
		cpu           cpuTimes
		heap, stack   float64
	}
	measure := func(perTurn int) (*watchers, step, error) {
		var st step
		q0, err := queries()
		if err != nil {
			return nil, st, err
		}
		w, err := e.startWatchers(ctx, ids, perTurn)
		if err != nil {
			return nil, st, err
		}
		if err := e.waitQuiet(ctx); err != nil {
			return w, st, err
		}
		q1, err := queries()
		if err != nil {
			return w, st, err
		}
		cpu0, err := e.readCPU(ctx)
		if err != nil {
			return w, st, err
		}
		time.Sleep(fanIdle) // the measurement is of the idle period itself
		cpu1, err := e.readCPU(ctx)
		if err != nil {
			return w, st, err
		}
		q2, err := queries()
		if err != nil {
			return w, st, err
		}
		st.connect, st.idle, st.cpu = q1-q0, q2-q1, cpu1.sub(cpu0)
		st.heap, st.stack, err = e.apiMetrics.memory(ctx)
		return w, st, err
	}

	heap0, stack0, err := e.apiMetrics.memory(ctx)
	if err != nil {
		return res, err
	}
	first, one, err := measure(1)
	if first != nil {
		defer first.stop()
	}
	if err != nil {
		return res, err
	}
	rest, all, err := measure(fanClients/fanTurns - 1)
	if rest != nil {
		defer rest.stop()
	}
	if err != nil {
		return res, err
	}
	s, err := e.apiMetrics.read(ctx)
	if err != nil {
		return res, err
	}
	res.OpenStreams, res.Pollers = int64(s.value(metricOpenStreams)), int64(s.value(metricPollersRunning))

	res.Clients = [2]int{fanTurns, fanClients}
	res.ConnectQueries = [2]int64{one.connect, all.connect}
	res.IdleQPS = [2]float64{float64(one.idle) / fanIdle.Seconds(), float64(all.idle) / fanIdle.Seconds()}
	share := func(d time.Duration) float64 { return float64(d) / float64(fanIdle) }
	res.IdleCPUOurs = [2]float64{share(one.cpu.worker + one.cpu.api), share(all.cpu.worker + all.cpu.api)}
	res.IdleCPUServer = [2]float64{-1, -1}
	if one.cpu.server >= 0 && all.cpu.server >= 0 {
		res.IdleCPUServer = [2]float64{share(one.cpu.server), share(all.cpu.server)}
	}
	res.HeapPerFirst = (one.heap - heap0) / fanTurns
	res.StackPerFirst = (one.stack - stack0) / fanTurns
	extra := float64(fanClients - fanTurns)
	res.HeapPerStream = (all.heap - one.heap) / extra
	res.StackPerStream = (all.stack - one.stack) / extra

	if res.Watched, err = e.approveWatched(ctx, turns[:fanApprovals], fanClients/fanTurns, first, rest); err != nil {
		return res, err
	}
	// The control: the further clients leave, and more turns are approved
	// with one client each watching.
	rest.stop()
	if err := e.waitMetric(ctx, metricOpenStreams, int64(fanTurns-fanApprovals)); err != nil {
		return res, fmt.Errorf("the further streams did not end: %w", err)
	}
	if res.Control, err = e.approveWatched(ctx, turns[fanApprovals:2*fanApprovals], 1, first); err != nil {
		return res, err
	}
	return res, nil
}

// approveWatched approves turns one after another, each watched by perTurn
// clients across ws, and times the tool_result at every client.
func (e *env) approveWatched(ctx context.Context, turns []paused, perTurn int, ws ...*watchers) (approvalStats, error) {
	st := approvalStats{Turns: len(turns), PerTurn: perTurn}
	var all, firsts []time.Duration
	stretched := map[string][]time.Duration{}
	q0, err := e.apiMetrics.count(ctx, metricEventQueries)
	if err != nil {
		return st, err
	}
	for _, t := range turns {
		at := time.Now()
		if err := e.api.approve(ctx, t.requestID); err != nil {
			return st, err
		}
		got, err := collectResults(ctx, t.turnID, perTurn, ws...)
		if err != nil {
			return st, err
		}
		for _, g := range got {
			all = append(all, g.Sub(at))
		}
		firstAt := slices.MinFunc(got, time.Time.Compare)
		firsts = append(firsts, firstAt.Sub(at))
		// The turn goes on to its finish; wait for it, so that its queries
		// are this approval's and its work does not overlap the next one.
		if err := e.temporal.GetWorkflow(ctx, t.turnID, "").Get(ctx, nil); err != nil {
			return st, fmt.Errorf("turn %s: %w%s", t.turnID, err, whereStuck(e.temporal, t.turnID))
		}
		h, err := history(ctx, e.temporal, t.turnID)
		if err != nil {
			return st, err
		}
		marks := approvalMarks(timedHistory(h), at, firstAt, protocol.ToolWrite)
		if err := checkMarks(marks); err != nil {
			return st, fmt.Errorf("%s: %w", t.turnID, err)
		}
		addStretches(stretched, marks)
	}
	if err := e.waitQuiet(ctx); err != nil {
		return st, err
	}
	q1, err := e.apiMetrics.count(ctx, metricEventQueries)
	if err != nil {
		return st, err
	}
	st.Breakdown = medians(nil, stretched)
	st.QueriesPerApproval = float64(q1-q0) / float64(len(turns))
	st.Latency, st.First = summarize(all), summarize(firsts)
	return st, nil
}

// pauseTurn starts a turn and returns once it waits for its approval,
// leaving its stream.
func (e *env) pauseTurn(ctx context.Context, conv string) (turnID, requestID string, err error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	resp, turnID, err := e.api.chat(ctx, queryApprove, conv)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	ev, err := awaitEvent(ctx, readStamped(resp.Body), protocol.EventApprovalRequest)
	if err != nil {
		return "", "", fmt.Errorf("conversation %s: %w", conv, err)
	}
	return turnID, ev.RequestID, nil
}

// watchers are SSE clients of the API, each on a connection of its own.
type watchers struct {
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	transport *http.Transport
	// results gets the arrival of every event of the watched type (a
	// tool_result unless said otherwise) at a client.
	results chan watcherEvent
}

type watcherEvent struct {
	turnID string
	at     time.Time
}

// startWatchers starts perTurn SSE clients for each turn and returns once
// every client has received its turn's approval_request; they report each
// tool_result.
func (e *env) startWatchers(ctx context.Context, turns []string, perTurn int) (*watchers, error) {
	return e.startWatchersOf(ctx, turns, perTurn, protocol.EventToolResult)
}

// startWatchersOf is startWatchers reporting events of type typ.
func (e *env) startWatchersOf(ctx context.Context, turns []string, perTurn int, typ string) (*watchers, error) {
	n := len(turns) * perTurn
	wctx, cancel := context.WithCancel(context.Background())
	w := &watchers{cancel: cancel, transport: &http.Transport{}, results: make(chan watcherEvent, n)}
	api := apiClient{base: e.api.base, http: &http.Client{Transport: w.transport}, token: e.api.token}
	ready := make(chan struct{}, n)
	failed := make(chan error, 1)
	for _, turn := range turns {
		for range perTurn {
			w.wg.Go(func() {
				err := watchOne(wctx, api, turn, typ, func() { ready <- struct{}{} },
					func(at time.Time) { w.results <- watcherEvent{turnID: turn, at: at} })
				if err != nil && wctx.Err() == nil {
					select {
					case failed <- err:
					default:
					}
				}
			})
		}
	}
	timeout := time.After(benchWait)
	for got := 0; got < n; got++ {
		select {
		case <-ready:
		case err := <-failed:
			w.stop()
			return nil, fmt.Errorf("SSE watchers: %w", err)
		case <-timeout:
			w.stop()
			return nil, fmt.Errorf("%d of %d SSE watchers ready within %s", got, n, benchWait)
		case <-ctx.Done():
			w.stop()
			return nil, ctx.Err()
		}
	}
	return w, nil
}

// stop makes the clients leave their streams. It may be called again.
func (w *watchers) stop() {
	w.cancel()
	w.wg.Wait()
	w.transport.CloseIdleConnections()
}

// watchOne streams a turn from its start, calling ready at its
// approval_request and result at each event of type typ.
func watchOne(ctx context.Context, api apiClient, turn, typ string, ready func(), result func(time.Time)) error {
	resp, err := api.events(ctx, turn)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	for ev := range readStamped(resp.Body) {
		if ev.Type == protocol.EventApprovalRequest {
			ready()
		}
		if ev.Type == typ {
			result(ev.at)
		}
	}
	return nil
}

// collectResults waits until n clients across ws have received turnID's
// watched event (tool_result unless said otherwise), and returns when each
// did.
func collectResults(ctx context.Context, turnID string, n int, ws ...*watchers) ([]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	merged := make(chan watcherEvent)
	for _, w := range ws {
		go func() {
			for {
				select {
				case ev := <-w.results:
					select {
					case merged <- ev:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	var got []time.Time
	for len(got) < n {
		select {
		case ev := <-merged:
			if ev.turnID != turnID {
				return nil, fmt.Errorf("the watched event of %s while waiting for %s", ev.turnID, turnID)
			}
			got = append(got, ev.at)
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d clients got the watched event of %s: %w", len(got), n, turnID, ctx.Err())
		}
	}
	return got, nil
}
