package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
)

// Sizes of the scale runs.
const (
	// waitingN is the turns paused at their approval at once; lower it (or
	// set $TOLLGATE_BENCH_WAITING) for a quick try. The watchers' turns are
	// among them, so it must be at least watchFewTurns+watchManyTurns.
	waitingN = 2000
	// waitingConcurrency is how many turns are started at once, and
	// decideConcurrency how many are decided at once after the worker's
	// restart: more decisions at once pile up behind the turns they resume,
	// until an Update outwaits the API's 30 s.
	waitingConcurrency = 10
	decideConcurrency  = 10
	// decideRetries is how often a decision answered 503 is sent again.
	decideRetries = 3
	// listRequests is how many GET /approvals of each kind are timed, and
	// listPage the page size they ask for (an inbox's first screen).
	listRequests = 12
	listPage     = 50
	// watchClients watch watchFewTurns turns, then watchManyTurns turns.
	watchClients   = 500
	watchFewTurns  = 50
	watchManyTurns = 500
	// watchDecisions is how many watched turns are decided, one after
	// another, in each watch run.
	watchDecisions = 30
	// scaleApprovalTimeout is the waiting turns' approval timeout.
	scaleApprovalTimeout = time.Hour
	// scaleWait bounds each step of the scale runs.
	scaleWait = 15 * time.Minute
)

// envBenchWaiting overrides waitingN.
const envBenchWaiting = "TOLLGATE_BENCH_WAITING"

// metricPollersStarted and metricRSS are the API's pollers started and a
// process's resident memory.
const (
	metricPollersStarted = "tollgate_api_pollers_started_total"
	metricRSS            = "process_resident_memory_bytes"
)

// scaleResult is what the scale runs measured.
type scaleResult struct {
	Waiting int
	// PauseTime is how long starting every turn up to its approval took,
	// waitingConcurrency at a time.
	PauseTime time.Duration
	// Worker and API are each process's memory per waiting turn.
	Worker, API memoryPerUnit
	// Lists are GET /approvals while every turn waits.
	Lists []listStats
	// Watch is the watchers on few turns, then on many.
	Watch [2]watchStats
	// Decided is how many turns were decided after the worker's restart;
	// DecideAll the time until every decision call returned, Resumed until
	// every one of those turns had finished, both from the first decision;
	// Restart from the crash to the new worker polling.
	Decided                     int
	Restart, DecideAll, Resumed time.Duration
	// Retried counts the decisions sent again after a 503.
	Retried int
}

// memoryPerUnit is the growth of a process's memory per unit.
type memoryPerUnit struct{ RSS, Heap float64 }

// listStats is the latency of one kind of GET /approvals.
type listStats struct {
	Kind     string
	Listed   int
	Requests int
	Latency  summary
}

// watchStats is one watch run: Clients SSE clients spread over Turns
// waiting turns.
type watchStats struct {
	Turns, Clients int
	// PollersStarted and ConnectQueries are what connecting every client
	// cost the API; DecisionQueries the events queries per decided turn
	// until it finished.
	PollersStarted, ConnectQueries int64
	DecisionQueries                float64
	// HeapPerClient is the API's heap per client (its turn's poller
	// shared).
	HeapPerClient float64
	// Decisions were timed: decision → approval_decision at the last of the
	// turn's clients.
	Decisions int
	Last      summary
}

// memoryOfBoth reads the worker's and the API's memory.
func (e *env) memoryOfBoth(ctx context.Context) (worker, api memoryPerUnit, err error) {
	if worker, err = memoryOf(ctx, e.worker); err != nil {
		return worker, api, err
	}
	api, err = memoryOf(ctx, e.apiMetrics)
	return worker, api, err
}

// memoryOf reads a process's resident memory and its live heap. An idle
// worker collects garbage seldom, so when memoryGCs cycles do not pass
// within a few seconds it takes the heap as it is.
func memoryOf(ctx context.Context, m metricsReader) (memoryPerUnit, error) {
	var out memoryPerUnit
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	heap, _, err := m.memory(gctx)
	cancel()
	s, rerr := m.read(ctx)
	if rerr != nil {
		return out, rerr
	}
	if err != nil {
		if ctx.Err() != nil {
			return out, err
		}
		heap = s.value(metricHeapAlloc)
	}
	return memoryPerUnit{RSS: s.value(metricRSS), Heap: heap}, nil
}

func (m memoryPerUnit) sub(o memoryPerUnit) memoryPerUnit {
	return memoryPerUnit{RSS: m.RSS - o.RSS, Heap: m.Heap - o.Heap}
}

func (m memoryPerUnit) div(n int) memoryPerUnit {
	return memoryPerUnit{RSS: m.RSS / float64(n), Heap: m.Heap / float64(n)}
}

// pauseMany pauses n turns, each in a conversation of its own,
// waitingConcurrency at a time.
func (e *env) pauseMany(ctx context.Context, n int) ([]paused, error) {
	turns := make([]paused, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	slots := make(chan struct{}, waitingConcurrency)
	for i := range n {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			turns[i].conv = fmt.Sprintf("bench-%s-wait-%d", e.run, i)
			turns[i].turnID, turns[i].requestID, errs[i] = e.pauseTurn(ctx, turns[i].conv)
		})
	}
	wg.Wait()
	return turns, errors.Join(errs...)
}

// timeLists times GET /approvals unfiltered, by tool and by conversation.
func (e *env) timeLists(ctx context.Context, turns []paused) ([]listStats, error) {
	kinds := []struct {
		name  string
		query func(i int) url.Values
	}{
		{"?limit=" + strconv.Itoa(listPage), func(int) url.Values { return url.Values{"limit": {strconv.Itoa(listPage)}} }},
		{"?limit=" + strconv.Itoa(listPage) + "&tool=" + activities.ToolWrite, func(int) url.Values {
			return url.Values{"limit": {strconv.Itoa(listPage)}, "tool": {activities.ToolWrite}}
		}},
		{"?conversationId=", func(i int) url.Values {
			return url.Values{"conversationId": {turns[i*len(turns)/listRequests].conv}}
		}},
	}
	var out []listStats
	for _, k := range kinds {
		st := listStats{Kind: k.name, Requests: listRequests}
		var ds []time.Duration
		for i := range listRequests {
			at := time.Now()
			got, err := e.api.approvals(ctx, k.query(i))
			if err != nil {
				return nil, err
			}
			ds = append(ds, time.Since(at))
			st.Listed = got
		}
		st.Latency = summarize(ds)
		out = append(out, st)
	}
	return out, nil
}

// approvals calls GET /approvals with query and returns how many it listed.
func (a apiClient) approvals(ctx context.Context, query url.Values) (int, error) {
	u := a.base + "/approvals"
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	var body struct {
		Approvals []protocol.PendingApproval `json:"approvals"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("GET %s: %w", u, err)
	}
	return len(body.Approvals), nil
}

// watchRun connects perTurn clients to each turn, then decides
// watchDecisions of the turns one after another, timing the
// approval_decision at every client of the turn.
func (e *env) watchRun(ctx context.Context, turns []paused, perTurn int) (watchStats, error) {
	st := watchStats{Turns: len(turns), Clients: len(turns) * perTurn, Decisions: watchDecisions}
	counts := func() (queries, pollers int64, err error) {
		s, err := e.apiMetrics.read(ctx)
		return int64(s.value(metricEventQueries)), int64(s.value(metricPollersStarted)), err
	}
	heap0, _, err := e.apiMetrics.memory(ctx)
	if err != nil {
		return st, err
	}
	q0, p0, err := counts()
	if err != nil {
		return st, err
	}
	ids := make([]string, len(turns))
	for i, t := range turns {
		ids[i] = t.turnID
	}
	w, err := e.startWatchersOf(ctx, ids, perTurn, protocol.EventApprovalDecision)
	if err != nil {
		return st, err
	}
	defer w.stop()
	if err := e.waitQuiet(ctx); err != nil {
		return st, err
	}
	q1, p1, err := counts()
	if err != nil {
		return st, err
	}
	st.ConnectQueries, st.PollersStarted = q1-q0, p1-p0
	heap1, _, err := e.apiMetrics.memory(ctx)
	if err != nil {
		return st, err
	}
	st.HeapPerClient = (heap1 - heap0) / float64(st.Clients)

	var lasts []time.Duration
	for _, t := range turns[:watchDecisions] {
		at := time.Now()
		if err := e.api.approve(ctx, t.requestID); err != nil {
			return st, err
		}
		got, err := collectResults(ctx, t.turnID, perTurn, w)
		if err != nil {
			return st, err
		}
		lasts = append(lasts, slices.MaxFunc(got, time.Time.Compare).Sub(at))
		if err := e.temporal.GetWorkflow(ctx, t.turnID, "").Get(ctx, nil); err != nil {
			return st, fmt.Errorf("turn %s: %w%s", t.turnID, err, whereStuck(e.temporal, t.turnID))
		}
	}
	if err := e.waitQuiet(ctx); err != nil {
		return st, err
	}
	q2, _, err := counts()
	if err != nil {
		return st, err
	}
	st.DecisionQueries = float64(q2-q1) / watchDecisions
	st.Last = summarize(lasts)
	return st, nil
}

// decideAll approves every turn through the API, decideConcurrency at a
// time, and returns when the last decision call returned and when the last
// turn finished, both from the first decision.
func (e *env) decideAll(ctx context.Context, turns []paused) (decided, finished time.Duration, retries int, err error) {
	ctx, cancel := context.WithTimeout(ctx, scaleWait)
	defer cancel()
	start := time.Now()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		last    time.Time
		retried atomic.Int64
	)
	errs := make([]error, len(turns))
	slots := make(chan struct{}, decideConcurrency)
	for i, t := range turns {
		wg.Go(func() {
			slots <- struct{}{}
			// A decision the API could not deliver within its Update
			// timeout answers 503; a client sends it again, and the turn
			// takes it once (the request id is the Update's id).
			status, err := e.api.approveOnce(ctx, t.requestID, false)
			for try := 1; status == http.StatusServiceUnavailable && try <= decideRetries; try++ {
				retried.Add(1)
				status, err = e.api.approveOnce(ctx, t.requestID, true)
			}
			<-slots
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			if now := time.Now(); now.After(last) {
				last = now
			}
			mu.Unlock()
			if err := e.temporal.GetWorkflow(ctx, t.turnID, "").Get(ctx, nil); err != nil {
				errs[i] = fmt.Errorf("turn %s: %w", t.turnID, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, int(retried.Load()), err
	}
	return last.Sub(start), time.Since(start), int(retried.Load()), nil
}

// scaleMarkdown is the section of the scale runs.
func (r *report) scaleMarkdown() string {
	sc := r.Scale
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	kib := func(x float64) string { return fmt.Sprintf("%.1f KiB", x/1024) }
	p("### Thousands of waiting turns")
	p("")
	p("%d turns, each in a conversation of its own, paused at their approval at once on a worker and an", sc.Waiting)
	p("API of their own (default settings) on the Temporal server v1.29.1 on PostgreSQL, configured as")
	p("docker-compose.yml configures it (four history shards), all on this machine; starting them took %s, %d at a time",
		sc.PauseTime.Round(time.Millisecond), waitingConcurrency)
	p("(%.0f turns a second). Memory from each process's /metrics before and after, over the turns:", float64(sc.Waiting)/sc.PauseTime.Seconds())
	p("")
	p("| per waiting turn | resident (`%s`) | heap (`%s`) |", metricRSS, metricHeapAlloc)
	p("|---|---:|---:|")
	p("| worker | %s | %s |", kib(sc.Worker.RSS), kib(sc.Worker.Heap))
	p("| API | %s | %s |", kib(sc.API.RSS), kib(sc.API.Heap))
	p("")
	p("The heaps are read just after a GC where one came within 5 s, else as they are. GET /approvals")
	p("while all %d wait, %d requests of each kind one after another:", sc.Waiting, listRequests)
	p("")
	p("| GET /approvals | approvals listed | p50 | p95 | max |")
	p("|---|---:|---:|---:|---:|")
	for _, l := range sc.Lists {
		p("| %s | %d | %.1f ms | %.1f ms | %.1f ms |", l.Kind, l.Listed, ms(l.Latency.p50), ms(l.Latency.p95), ms(l.Latency.max))
	}
	p("")
	p("A page (`limit`) queries the %d turns visibility lists for it, 8 at a time; by conversation,", listPage)
	p("visibility narrows it to that conversation's turn. Without `limit` it would query every waiting")
	p("turn, up to `maxListedTurns` (api/server.go).")
	p("")
	p("Then the worker was killed (SIGKILL) with the turns in its cache and a new one started (%s from",
		sc.Restart.Round(time.Millisecond))
	p("the kill to its /metrics answering), and the %d turns the watch runs below left waiting were approved",
		sc.Decided)
	p("through POST /chat/approval, %d at a time: the last decision call returned after %s (%.0f",
		decideConcurrency, sc.DecideAll.Round(time.Millisecond), float64(sc.Decided)/sc.DecideAll.Seconds())
	p("decisions a second), and every one of those turns had finished %s after the first decision.",
		sc.Resumed.Round(time.Millisecond))
	p("%d decisions answered 503 (the API waits 30 s for the turn to take an Update) and were sent again,", sc.Retried)
	p("as a client would: each was taken once.")
	p("")
	p("### Hundreds of watchers")
	p("")
	p("%d SSE clients on %d of the waiting turns, then %d clients on %d others, each client a connection",
		sc.Watch[0].Clients, sc.Watch[0].Turns, sc.Watch[1].Clients, sc.Watch[1].Turns)
	p("of its own from the turn's start; then %d of the watched turns decided one after another, each", watchDecisions)
	p("awaited to its finish.")
	p("")
	p("| clients on turns | pollers started | events queries to connect | per turn | per client | queries per decided turn | API heap per client | decision → last client's `approval_decision` p50 | p95 |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, w := range sc.Watch {
		p("| %d on %d | %d | %d | %.2f | %.2f | %.1f | %s | %.1f ms | %.1f ms |", w.Clients, w.Turns, w.PollersStarted,
			w.ConnectQueries, float64(w.ConnectQueries)/float64(w.Turns), float64(w.ConnectQueries)/float64(w.Clients),
			w.DecisionQueries, kib(w.HeapPerClient), ms(w.Last.p50), ms(w.Last.p95))
	}
	p("")
	few, many := sc.Watch[0], sc.Watch[1]
	p("The API starts one poller per watched turn, whatever the clients: %d clients on %d turns started %d",
		few.Clients, few.Turns, few.PollersStarted)
	p("pollers, and on %d turns %d. Its events queries and history reads follow the pollers, so they scale",
		many.Turns, many.PollersStarted)
	p("with the turns watched (%.2f and %.2f queries per turn to connect), not with the clients.",
		float64(few.ConnectQueries)/float64(max(few.Turns, 1)), float64(many.ConnectQueries)/float64(max(many.Turns, 1)))
	p("")
	return b.String()
}

// tail is the end of a process's log.
func tail(log string) string {
	const keep = 4 << 10
	if len(log) > keep {
		return log[len(log)-keep:]
	}
	return log
}
