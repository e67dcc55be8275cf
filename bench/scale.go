package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/protocol"
)

// Sizes of the scale runs.
const (
	// waitingN is the turns paused at their approval at once; lower it (or
	// set $TOLLGATE_BENCH_WAITING) for a quick try: the watch runs and the
	// worker's cache shrink with it (sizesFor).
	waitingN = 2000
	// waitingLeast is the fewest waiting turns a run takes.
	waitingLeast = 20
	// waitingConcurrency is how many turns are started at once, and
	// decideConcurrency how many are decided at once after the worker's
	// restart: more decisions at once pile up behind the turns they resume,
	// until an Update outwaits the API's 30 s.
	waitingConcurrency = 10
	decideConcurrency  = 10
	// decideRetries is how often a decision answered 503 is sent again.
	decideRetries = 3
	// listRequests is how many GET /approvals of each kind are timed, at
	// most, and listBudget how long each kind may take in all (an unpaged
	// list that queries every waiting turn takes seconds a request);
	// listPage is the page size a paged request asks for (an inbox's first
	// screen).
	listRequests = 12
	listBudget   = time.Minute
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

// The scale run's API asks for tokens, so that its turns have principals
// to list them by: half the turns are scaleAlice's, half scaleBob's.
const (
	scaleAlice, scaleAliceToken = "alice", "bench-token-of-alice"
	scaleBob, scaleBobToken     = "bob", "bench-token-of-bob-0"
)

// envBenchWaiting overrides waitingN.
const envBenchWaiting = "TOLLGATE_BENCH_WAITING"

// metricPollersStarted and metricRSS are the API's pollers started and a
// process's resident memory; metricStickyCache the workflows the SDK's
// sticky cache holds in the worker.
const (
	metricPollersStarted = "tollgate_api_pollers_started_total"
	metricRSS            = "process_resident_memory_bytes"
	metricStickyCache    = "temporal_sticky_cache_size"
)

// scaleSizes are the sizes of one scale run, from its waiting turns.
type scaleSizes struct {
	Waiting int
	// FewTurns then ManyTurns turns are watched by Clients clients; each
	// watch run decides Decisions of its turns.
	FewTurns, ManyTurns, Clients, Decisions int
	// Cache is the worker's TOLLGATE_WORKFLOW_CACHE_SIZE, half the waiting
	// turns (the default, 1000, at 2,000 waiting). A waiting turn is two
	// workflows in it, the turn and its conversation, so the first
	// CachedFirst turns all fit and the rest evict. The first Warm of them
	// warm the worker up, and the cached turns' cost is over the others.
	Cache, CachedFirst, Warm int
}

// sizesFor scales the watch runs and the cache to n waiting turns: at
// waitingN, 500 clients on 50 turns and on 500.
func sizesFor(n int) scaleSizes {
	s := scaleSizes{Waiting: n, FewTurns: watchFewTurns, ManyTurns: watchManyTurns, Clients: watchClients, Decisions: watchDecisions}
	if n < waitingN {
		s.FewTurns = max(2, watchFewTurns*n/waitingN)
		s.ManyTurns = max(2, watchManyTurns*n/waitingN)
		s.Clients = s.FewTurns * (watchClients / watchFewTurns)
		s.Decisions = min(watchDecisions, s.FewTurns, s.ManyTurns)
	}
	s.Cache = n / 2
	s.CachedFirst = s.Cache * 2 / 5
	s.Warm = max(1, s.CachedFirst/4)
	return s
}

// perTurn is how many clients a watch run of turns puts on each.
func (s scaleSizes) perTurn(turns int) int { return max(1, s.Clients/turns) }

// scaleResult is what the scale runs measured.
type scaleResult struct {
	scaleSizes
	// OnDev says the stage ran on make dev's dev server, not on the
	// Temporal server on PostgreSQL.
	OnDev bool
	// Err, when set, is why the stage stopped; what it measured before
	// stays.
	Err string
	// PauseTime is how long starting every turn up to its approval took,
	// waitingConcurrency at a time.
	PauseTime time.Duration
	// Worker and API are each process's memory per waiting turn, over all
	// of them.
	Worker, API memoryPerUnit
	// Cached is the worker's memory per waiting turn while every one is in
	// its cache (the first CachedFirst); Evicted per further waiting turn,
	// less what the further turns that the cache took cost at Cached's
	// rate. CacheAt are the workflows its cache held then and at the end.
	Cached, Evicted memoryPerUnit
	CacheAt         [2]float64
	// Lists are GET /approvals while every turn waits; Paging is a walk
	// through all of them a page at a time.
	Lists  []listStats
	Paging pagingStats
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

// listStats is the latency of one kind of GET /approvals; Err is the
// kind's first failure (the filter may not exist yet).
type listStats struct {
	Kind string
	// Listed is how many the last request listed; Foreign how many of them
	// the filter should have left out (a filter the API ignores lists
	// them all).
	Listed, Foreign int
	Requests        int
	Latency         summary
	Err             string
}

// pagingStats is a walk through every waiting approval with pageToken.
type pagingStats struct {
	Pages, Listed int
	Took          time.Duration
	Page          summary
	Err           string
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

// pauseMany pauses turns [from, to), each in a conversation of its own,
// waitingConcurrency at a time; with tokens, the turns take them in turn.
func (e *env) pauseMany(ctx context.Context, from, to int, tokens ...string) ([]paused, error) {
	turns := make([]paused, to-from)
	errs := make([]error, len(turns))
	var wg sync.WaitGroup
	slots := make(chan struct{}, waitingConcurrency)
	for i := range turns {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			as := *e
			if len(tokens) > 0 {
				as.api.token = tokens[(from+i)%len(tokens)]
			}
			turns[i].conv = fmt.Sprintf("bench-%s-wait-%d", e.run, from+i)
			turns[i].turnID, turns[i].requestID, errs[i] = as.pauseTurn(ctx, turns[i].conv)
		})
	}
	wg.Wait()
	return turns, errors.Join(errs...)
}

// listKind is one kind of GET /approvals: its name in the report and its
// query for the i-th request.
type listKind struct {
	name  string
	query func(i int) url.Values
	// foreign, when set, says an approval the filter should have left out.
	foreign func(protocol.PendingApproval) bool
}

// timeLists times GET /approvals unfiltered, a page of it, by tool, by
// principal and by conversation, each for at most listRequests requests
// or listBudget. A kind that fails is reported with its error, and the
// others go on.
func (e *env) timeLists(ctx context.Context, turns []paused) []listStats {
	aliceAsked := map[string]bool{}
	for i := 0; i < len(turns); i += 2 {
		aliceAsked[turns[i].conv] = true
	}
	kinds := []listKind{
		{name: "(unfiltered)", query: func(int) url.Values { return nil }},
		{name: "?limit=" + strconv.Itoa(listPage), query: func(int) url.Values { return url.Values{"limit": {strconv.Itoa(listPage)}} }},
		{name: "?tool=" + protocol.ToolWrite, query: func(int) url.Values { return url.Values{"tool": {protocol.ToolWrite}} }},
		{name: "?principal=" + scaleAlice, query: func(int) url.Values { return url.Values{"principal": {scaleAlice}} },
			// pauseMany gives scaleAlice's token to every other turn, from
			// the first.
			foreign: func(a protocol.PendingApproval) bool { return !aliceAsked[a.ConversationID] }},
		{name: "?conversationId=", query: func(i int) url.Values {
			return url.Values{"conversationId": {turns[i*len(turns)/listRequests].conv}}
		}},
	}
	var out []listStats
	for _, k := range kinds {
		st := listStats{Kind: k.name}
		var ds []time.Duration
		until := time.Now().Add(listBudget)
		for i := range listRequests {
			if i > 0 && time.Now().After(until) {
				break
			}
			at := time.Now()
			got, _, err := e.api.approvals(ctx, k.query(i))
			if err != nil {
				st.Err = err.Error()
				break
			}
			ds = append(ds, time.Since(at))
			st.Listed, st.Foreign = len(got), 0
			for _, a := range got {
				if k.foreign != nil && k.foreign(a) {
					st.Foreign++
				}
			}
		}
		st.Requests, st.Latency = len(ds), summarize(ds)
		out = append(out, st)
	}
	return out
}

// pageThrough lists every waiting approval listPage turns at a time,
// following nextPageToken to the end.
func (e *env) pageThrough(ctx context.Context) pagingStats {
	var st pagingStats
	var ds []time.Duration
	start := time.Now()
	q := url.Values{"limit": {strconv.Itoa(listPage)}}
	for {
		at := time.Now()
		got, next, err := e.api.approvals(ctx, q)
		if err != nil {
			st.Err = err.Error()
			break
		}
		ds = append(ds, time.Since(at))
		st.Pages++
		st.Listed += len(got)
		if next == "" {
			break
		}
		if st.Pages > 2*waitingN/listPage+10 {
			st.Err = fmt.Sprintf("still a nextPageToken after %d pages", st.Pages)
			break
		}
		q.Set("pageToken", next)
	}
	st.Took, st.Page = time.Since(start), summarize(ds)
	return st
}

// approvals calls GET /approvals with query and returns what it listed and
// its nextPageToken.
func (a apiClient) approvals(ctx context.Context, query url.Values) ([]protocol.PendingApproval, string, error) {
	u := a.base + "/approvals"
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := a.send(req)
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, "", fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	var body struct {
		Approvals     []protocol.PendingApproval `json:"approvals"`
		NextPageToken string                     `json:"nextPageToken"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", u, err)
	}
	return body.Approvals, body.NextPageToken, nil
}

// watchRun connects perTurn clients to each turn, then decides decisions
// of the turns one after another, timing the approval_decision at every
// client of the turn.
func (e *env) watchRun(ctx context.Context, turns []paused, perTurn, decisions int) (watchStats, error) {
	st := watchStats{Turns: len(turns), Clients: len(turns) * perTurn, Decisions: decisions}
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
	for _, t := range turns[:decisions] {
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
	st.DecisionQueries = float64(q2-q1) / float64(decisions)
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
	md := scaleSection(r.Scale)
	if r.ScaleDev.Waiting > 0 {
		md += scaleSection(r.ScaleDev)
	}
	return md
}

// scaleSection is the report's section of one scale run.
func scaleSection(sc scaleResult) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	kib := func(x float64) string { return fmt.Sprintf("%.1f KiB", x/1024) }
	on := ""
	if sc.OnDev {
		on = " on make dev's dev server"
	}
	p("### Thousands of waiting turns%s", on)
	p("")
	p("%d turns, each in a conversation of its own, paused at their approval at once on a worker and an", sc.Waiting)
	if sc.OnDev {
		p("API of their own on a fresh dev server of the Temporal CLI that `make temporal` builds, with the")
		p("flags `make dev` gives it (its SQLite behind one connection), all on this machine: whether the")
		p("embedded default holds that many (issue 28, item 5). The same stage on PostgreSQL is above.")
	} else {
		p("API of their own on the Temporal server v1.29.1 on PostgreSQL, configured as docker-compose.yml")
		p("configures it (four history shards), all on this machine: what a team's server holds. The same")
		p("stage on `make dev`'s dev server follows.")
	}
	p("The worker's cache")
	p("(`TOLLGATE_WORKFLOW_CACHE_SIZE`) is %d workflows; the API asks for tokens, and two principals,", sc.Cache)
	p("%s and %s, ask for half the turns each; the rest of the settings are the defaults.", scaleAlice, scaleBob)
	if sc.Err != "" {
		p("")
		p("**The stage did not finish:** %s", firstLine(sc.Err))
		p("What it measured before that is below; a figure of a step it did not reach reads 0.")
	}
	if sc.PauseTime > 0 {
		p("Starting them took %s, %d at a time (%.0f turns a second).", sc.PauseTime.Round(time.Millisecond),
			waitingConcurrency, float64(sc.Waiting)/sc.PauseTime.Seconds())
	}
	p("")
	p("Memory from each process's /metrics before and after, over the turns; the worker's first %d turns", sc.CachedFirst)
	p("(%d workflows with their conversations) fit its cache, which held %.0f workflows after them and", 2*sc.CachedFirst, sc.CacheAt[0])
	p("%.0f after all %d (`%s`). A cached turn's cost is over turns %d to %d (the first %d warm the", sc.CacheAt[1], sc.Waiting, metricStickyCache, sc.Warm+1, sc.CachedFirst, sc.Warm)
	p("worker up); an evicted turn's over the rest, less the cost at that rate of those the cache took:")
	p("")
	p("| per waiting turn | resident (`%s`) | heap (`%s`) |", metricRSS, metricHeapAlloc)
	p("|---|---:|---:|")
	p("| worker, over all %d | %s | %s |", sc.Waiting, kib(sc.Worker.RSS), kib(sc.Worker.Heap))
	p("| worker, a turn in its cache | %s | %s |", kib(sc.Cached.RSS), kib(sc.Cached.Heap))
	p("| worker, a turn evicted from it (goal: near zero) | %s | %s |", kib(sc.Evicted.RSS), kib(sc.Evicted.Heap))
	p("| API, over all %d | %s | %s |", sc.Waiting, kib(sc.API.RSS), kib(sc.API.Heap))
	p("")
	p("The heaps are read just after a GC where one came within 5 s, else as they are; resident memory")
	p("a Go process has once taken it keeps for minutes, so an evicted turn shows in the heap first. A")
	p("cache of %d workflows (the default) costs about %.0f MiB resident at a cached turn's rate (two",
		config.DefaultWorkflowCacheSize, sc.Cached.RSS*float64(config.DefaultWorkflowCacheSize)/2/(1<<20))
	p("workflows a turn); the SDK's own default of 10,000, ten times that.")
	p("")
	p("GET /approvals while all %d wait, up to %d requests of each kind one after another (at most %s a kind):", sc.Waiting, listRequests, listBudget)
	p("")
	p("| GET /approvals | requests | approvals listed | p50 | p95 | max | goal p50 < 200 ms, p95 < 500 ms |")
	p("|---|---:|---:|---:|---:|---:|---|")
	for _, l := range sc.Lists {
		if l.Err != "" && l.Requests == 0 {
			p("| %s | 0 | — | — | — | — | failed: %s |", l.Kind, mdCell(firstLine(l.Err)))
			continue
		}
		verdict := "missed"
		if l.Latency.p50 < 200*time.Millisecond && l.Latency.p95 < 500*time.Millisecond {
			verdict = "met"
		}
		if l.Foreign > 0 {
			verdict = "not measured: the filter is ignored"
		}
		if l.Err != "" {
			verdict += "; then failed: " + mdCell(firstLine(l.Err))
		}
		listed := strconv.Itoa(l.Listed)
		if l.Foreign > 0 {
			listed += fmt.Sprintf(" (%d of them not the filter's: the API does not filter on it)", l.Foreign)
		}
		p("| %s | %d | %s | %.1f ms | %.1f ms | %.1f ms | %s |", l.Kind, l.Requests, listed, ms(l.Latency.p50), ms(l.Latency.p95), ms(l.Latency.max), verdict)
	}
	p("")
	pg := sc.Paging
	p("Paging through all of them %d turns at a time with `pageToken`: %d pages, %d approvals listed (of %d", listPage, pg.Pages, pg.Listed, sc.Waiting)
	p("waiting), %s in all; a page p50 %.1f ms, p95 %.1f ms.", pg.Took.Round(time.Millisecond), ms(pg.Page.p50), ms(pg.Page.p95))
	if pg.Err != "" {
		p("The walk stopped: %s", firstLine(pg.Err))
	}
	p("")
	if sc.Decided > 0 {
		p("Then the worker was killed (SIGKILL) with its cache full and a new one started (%s from",
			sc.Restart.Round(time.Millisecond))
		p("the kill to its /metrics answering), and the %d turns the watch runs below left waiting were approved",
			sc.Decided)
		p("through POST /chat/approval, %d at a time: the last decision call returned after %s (**%.1f",
			decideConcurrency, sc.DecideAll.Round(time.Millisecond), float64(sc.Decided)/sc.DecideAll.Seconds())
		p("decisions a second**), and every one of those turns had finished %s after the first decision.",
			sc.Resumed.Round(time.Millisecond))
		p("%d decisions answered 503 (the API waits 30 s for the turn to take an Update) and were sent again,", sc.Retried)
		p("as a client would: each was taken once.")
		p("")
	}
	p("### Hundreds of watchers%s", on)
	p("")
	p("%d SSE clients on %d of the waiting turns, then %d clients on %d others, each client a connection",
		sc.Watch[0].Clients, sc.Watch[0].Turns, sc.Watch[1].Clients, sc.Watch[1].Turns)
	p("of its own from the turn's start; then %d of the watched turns decided one after another, each", sc.Decisions)
	p("awaited to its finish. (The fan-out stage above watches 50 turns on the dev server with nothing")
	p("else waiting; these wait among all %d.)", sc.Waiting)
	p("")
	p("| clients on turns | pollers started | events queries to connect | per turn | per client | queries per decided turn | API heap per client | decision → last client's `approval_decision` p50 | p95 |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, w := range sc.Watch {
		if w.Clients == 0 {
			continue
		}
		p("| %d on %d | %d | %d | %.2f | %.2f | %.1f | %s | %.1f ms | %.1f ms |", w.Clients, w.Turns, w.PollersStarted,
			w.ConnectQueries, float64(w.ConnectQueries)/float64(w.Turns), float64(w.ConnectQueries)/float64(w.Clients),
			w.DecisionQueries, kib(w.HeapPerClient), ms(w.Last.p50), ms(w.Last.p95))
	}
	p("")
	few, many := sc.Watch[0], sc.Watch[1]
	if many.Clients > 0 {
		p("The API starts one poller per watched turn, whatever the clients: %d clients on %d turns started %d",
			few.Clients, few.Turns, few.PollersStarted)
		p("pollers, and on %d turns %d. Its events queries and history reads follow the pollers, so they scale",
			many.Turns, many.PollersStarted)
		p("with the turns watched (%.2f and %.2f queries per turn to connect), not with the clients.",
			float64(few.ConnectQueries)/float64(max(few.Turns, 1)), float64(many.ConnectQueries)/float64(max(many.Turns, 1)))
		p("")
	}
	return b.String()
}

// mdCell makes s safe in a markdown table's cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}

// tail is the end of a process's log.
func tail(log string) string {
	const keep = 4 << 10
	if len(log) > keep {
		return log[len(log)-keep:]
	}
	return log
}
