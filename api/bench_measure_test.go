package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// segment is one stretch of a path, from one moment to the next.
type segment struct {
	Key, Name       string
	Floor, Tollgate time.Duration
	HasFloor        bool
}

// Stretches of the two measured paths, in order.
var stretches = []struct{ key, name string }{
	{"created", "start: client starts → the workflow that will publish exists"},
	{"first-wait", "start: its first workflow task waits for the worker"},
	{"first-run", "start: the worker runs its first workflow task (the floor publishes here)"},
	{"model", "start: model activity (scheduled → completed)"},
	{"pub-wait", "start: next workflow task waits for the worker"},
	{"pub-run", "start: the worker runs it, publishing approval_request"},
	{"seen", "start: published → client has it (history long poll, events query, SSE)"},
	{"decision-wait", "approval: decision sent → a workflow task takes it"},
	{"decision-run", "approval: the worker runs that task, scheduling the tool"},
	{"tool", "approval: tool activity (scheduled → completed)"},
	{"result-wait", "approval: next workflow task waits for the worker"},
	{"result-run", "approval: the worker runs it, publishing tool_result"},
	{"result-seen", "approval: published → client has it (history long poll, events query, SSE)"},
}

// breakdown splits the two measured paths of every sample into stretches
// that the workflows' histories (server time, same machine clock) and the
// client's clock mark, and returns the median of each stretch.
func (e *benchEnv) breakdown(ctx context.Context, floor, tg []turnSample) ([]segment, error) {
	fl, tl := map[string][]time.Duration{}, map[string][]time.Duration{}
	for _, side := range []struct {
		samples []turnSample
		into    map[string][]time.Duration
		floor   bool
	}{{floor, fl, true}, {tg, tl, false}} {
		for _, s := range side.samples {
			h, err := history(ctx, e.client, s.workflowID)
			if err != nil {
				return nil, err
			}
			marks, err := pathMarks(timedHistory(h), s, side.floor)
			if err != nil {
				return nil, fmt.Errorf("%s: %w\n%s", s.workflowID, err, timedHistory(h))
			}
			addStretches(side.into, marks)
		}
	}
	return medians(fl, tl), nil
}

// mark is the moment a stretch ends.
type mark struct {
	key string
	at  time.Time
}

// pathMarks finds the moments that end each stretch of one sample's two
// paths: the start path's marks, then the approval path's. The first mark
// of each path is its start and has no key.
func pathMarks(h timedEvents, s turnSample, floor bool) ([]mark, error) {
	started := h.find(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 0, "")
	first := h.find(enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, 0, "")
	marks := []mark{{"", s.start}, {"created", started.at}, {"first-wait", h.byID(first.startedID).at}, {"first-run", first.at}}
	if !floor {
		msched := h.find(enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 0, activities.ModelActivity)
		mdone := h.find(enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, msched.id, "")
		publish := h.find(enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, mdone.id, "")
		marks = append(marks, mark{"model", mdone.at}, mark{"pub-wait", h.byID(publish.startedID).at}, mark{"pub-run", publish.at})
	}
	marks = append(marks, mark{"seen", s.request})
	marks = append(marks, approvalMarks(h, s.decide, s.result, floor)...)
	return marks, checkMarks(marks)
}

// approvalMarks finds the moments that end each stretch of the approval
// path, decided at decide and seen by the client at seen.
func approvalMarks(h timedEvents, decide, seen time.Time, floor bool) []mark {
	tool := activities.ToolWrite
	if floor {
		tool = floorActivityName
	}
	tsched := h.find(enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 0, tool)
	took := h.byID(tsched.taskCompletedID)
	tdone := h.find(enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, tsched.id, "")
	result := h.find(enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, tdone.id, "")
	return []mark{{"", decide}, {"decision-wait", h.byID(took.startedID).at}, {"decision-run", took.at},
		{"tool", tdone.at}, {"result-wait", h.byID(result.startedID).at}, {"result-run", result.at},
		{"result-seen", seen}}
}

func checkMarks(marks []mark) error {
	for _, m := range marks {
		if m.at.IsZero() {
			return fmt.Errorf("history lacks the event that ends %q", m.key)
		}
	}
	return nil
}

// addStretches adds the stretches between marks to into; a mark without a
// key starts a new path.
func addStretches(into map[string][]time.Duration, marks []mark) {
	for i := 1; i < len(marks); i++ {
		if marks[i].key != "" {
			into[marks[i].key] = append(into[marks[i].key], marks[i].at.Sub(marks[i-1].at))
		}
	}
}

// medians turns stretches into segments, in the order of stretches; keys
// without samples are left out.
func medians(floor, tg map[string][]time.Duration) []segment {
	var out []segment
	for _, st := range stretches {
		if len(tg[st.key]) == 0 {
			continue
		}
		seg := segment{Key: st.key, Name: st.name, Tollgate: summarize(tg[st.key]).p50}
		if len(floor[st.key]) > 0 {
			seg.Floor, seg.HasFloor = summarize(floor[st.key]).p50, true
		}
		out = append(out, seg)
	}
	return out
}

// timedEvent is what the breakdown needs of a history event.
type timedEvent struct {
	id  int64
	typ enumspb.EventType
	at  time.Time
	// activity is the type of a scheduled activity.
	activity string
	// scheduledID is the scheduled event a completed activity refers to.
	scheduledID int64
	// startedID is the started event of a completed workflow task.
	startedID int64
	// taskCompletedID is the completed workflow task that scheduled an
	// activity.
	taskCompletedID int64
}

type timedEvents []timedEvent

func timedHistory(h []*historypb.HistoryEvent) timedEvents {
	out := make(timedEvents, len(h))
	for i, ev := range h {
		out[i] = timedEvent{id: ev.GetEventId(), typ: ev.GetEventType(), at: ev.GetEventTime().AsTime()}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			out[i].activity = a.GetActivityType().GetName()
			out[i].taskCompletedID = a.GetWorkflowTaskCompletedEventId()
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil {
			out[i].scheduledID = a.GetScheduledEventId()
		}
		if a := ev.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			out[i].startedID = a.GetStartedEventId()
		}
	}
	return out
}

// find returns the first event of type typ after event id after (and, for
// scheduled activities, of the named activity; for completions, of the
// activity scheduled as event after), or a zero event.
func (h timedEvents) find(typ enumspb.EventType, after int64, activity string) timedEvent {
	for _, ev := range h {
		if ev.typ != typ || ev.id <= after {
			continue
		}
		if activity != "" && ev.activity != activity {
			continue
		}
		if typ == enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED && ev.scheduledID != after {
			continue
		}
		return ev
	}
	return timedEvent{}
}

// String lists the events, one a line, for an error message.
func (h timedEvents) String() string {
	var b strings.Builder
	for _, ev := range h {
		fmt.Fprintf(&b, "%d %s %s %s sched=%d started=%d wtc=%d\n", ev.id, ev.at.Format("15:04:05.000000"),
			ev.typ, ev.activity, ev.scheduledID, ev.startedID, ev.taskCompletedID)
	}
	return b.String()
}

// byID returns the event with id, or a zero event.
func (h timedEvents) byID(id int64) timedEvent {
	for _, ev := range h {
		if ev.id == id {
			return ev
		}
	}
	return timedEvent{}
}

// timelineRow is one moment of a turn, in ms from the client's request.
type timelineRow struct {
	At    time.Duration
	Where string
	What  string
}

// timeline lists what happened during one turn, in order: the client's
// moments and the events of the conversation's and the turn's histories.
func (e *benchEnv) timeline(ctx context.Context, s turnSample) ([]timelineRow, error) {
	rows := []timelineRow{
		{0, "client", "POST /chat/stream"},
		{s.headers.Sub(s.start), "client", "response headers (the message Update has completed)"},
		{s.request.Sub(s.start), "client", "approval_request event"},
		{s.decide.Sub(s.start), "client", "POST /chat/approval"},
		{s.decided.Sub(s.start), "client", "POST /chat/approval answered (the approval Update has completed)"},
		{s.result.Sub(s.start), "client", "tool_result event"},
		{s.finish.Sub(s.start), "client", "finish event"},
	}
	for _, wf := range []struct{ where, id string }{
		{"conversation", workflows.ConversationWorkflowID(s.conv)},
		{"turn", s.workflowID},
	} {
		h, err := history(ctx, e.client, wf.id)
		if err != nil {
			return nil, err
		}
		for _, ev := range timedHistory(h) {
			at := ev.at.Sub(s.start)
			if ev.at.After(s.finish) {
				break
			}
			what := strings.TrimPrefix(ev.typ.String(), "EVENT_TYPE_")
			if ev.activity != "" {
				what += " " + ev.activity
			}
			rows = append(rows, timelineRow{at, wf.where, what})
		}
	}
	slices.SortStableFunc(rows, func(a, b timelineRow) int { return cmp.Compare(a.At, b.At) })
	return rows, nil
}

// burstLatency is the latencies measured during the concurrent run.
type burstLatency struct{ Request, Result summary }

// fanOutResult is what the fan-out measured. Index 0 of the pairs is with
// one client per turn, index 1 with all clients.
type fanOutResult struct {
	Clients        [2]int
	ConnectQueries [2]int64
	IdleQPS        [2]float64
	// IdleCPUSelf and IdleCPUServer are the share of one core that this
	// process and the dev server (-1 when unknown) used while the turns
	// waited.
	IdleCPUSelf, IdleCPUServer [2]float64
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

// fanOut pauses fanTurns turns at their approval request, watches them with
// fanClients SSE clients in another process (so that their memory is not
// the API's), and measures the API's queries, memory and event latency.
func (e *benchEnv) fanOut(ctx context.Context) (fanOutResult, error) {
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
	if err := waitUntil(ctx, func() bool { return current(e.srv.metrics.pollersRunning) == 0 }); err != nil {
		return res, fmt.Errorf("pollers of the paused turns did not stop: %w", err)
	}
	ids := make([]string, fanTurns)
	for i, t := range turns {
		ids[i] = t.turnID
	}
	queries := func() int64 { return current(e.srv.metrics.eventQueries) }

	heap0, stack0 := memInUse()
	q0 := queries()
	first, err := startWatchers(ctx, e.api.URL, ids, 1)
	if err != nil {
		return res, err
	}
	defer first.stop()
	if err := waitQuiet(ctx, queries); err != nil {
		return res, err
	}
	q1 := queries()
	self0, server0 := e.cpuTimes()
	time.Sleep(fanIdle) // the measurement is of the idle period itself
	self1, server1 := e.cpuTimes()
	q2 := queries()
	heap1, stack1 := memInUse()

	rest, err := startWatchers(ctx, e.api.URL, ids, fanClients/fanTurns-1)
	if err != nil {
		return res, err
	}
	defer rest.stop()
	if err := waitQuiet(ctx, queries); err != nil {
		return res, err
	}
	q3 := queries()
	self2, server2 := e.cpuTimes()
	time.Sleep(fanIdle)
	self3, server3 := e.cpuTimes()
	q4 := queries()
	heap2, stack2 := memInUse()
	res.OpenStreams, res.Pollers = current(e.srv.metrics.openStreams), current(e.srv.metrics.pollersRunning)

	res.Clients = [2]int{fanTurns, fanClients}
	res.ConnectQueries = [2]int64{q1 - q0, q3 - q2}
	res.IdleQPS = [2]float64{float64(q2-q1) / fanIdle.Seconds(), float64(q4-q3) / fanIdle.Seconds()}
	res.IdleCPUSelf = [2]float64{float64(self1-self0) / float64(fanIdle), float64(self3-self2) / float64(fanIdle)}
	res.IdleCPUServer = [2]float64{-1, -1}
	if server0 >= 0 && server3 >= 0 {
		res.IdleCPUServer = [2]float64{float64(server1-server0) / float64(fanIdle), float64(server3-server2) / float64(fanIdle)}
	}
	res.HeapPerFirst = float64(int64(heap1)-int64(heap0)) / fanTurns
	res.StackPerFirst = float64(int64(stack1)-int64(stack0)) / fanTurns
	extra := float64(fanClients - fanTurns)
	res.HeapPerStream = float64(int64(heap2)-int64(heap1)) / extra
	res.StackPerStream = float64(int64(stack2)-int64(stack1)) / extra

	if res.Watched, err = e.approveWatched(ctx, turns[:fanApprovals], fanClients/fanTurns, first, rest); err != nil {
		return res, err
	}
	// The control: the further clients leave, and more turns are approved
	// with one client each watching.
	rest.stop()
	if err := waitUntil(ctx, func() bool { return current(e.srv.metrics.openStreams) == int64(fanTurns-fanApprovals) }); err != nil {
		return res, fmt.Errorf("the further streams did not end: %w", err)
	}
	if res.Control, err = e.approveWatched(ctx, turns[fanApprovals:2*fanApprovals], 1, first); err != nil {
		return res, err
	}
	return res, nil
}

// paused is a turn that waits for its approval.
type paused struct{ turnID, requestID string }

// approveWatched approves turns one after another, each watched by perTurn
// clients across ws, and times the tool_result at every client.
func (e *benchEnv) approveWatched(ctx context.Context, turns []paused, perTurn int, ws ...*watchers) (approvalStats, error) {
	st := approvalStats{Turns: len(turns), PerTurn: perTurn}
	var all, firsts []time.Duration
	stretched := map[string][]time.Duration{}
	q0 := current(e.srv.metrics.eventQueries)
	for _, t := range turns {
		at := time.Now()
		if err := e.approve(ctx, t.requestID); err != nil {
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
		if err := e.client.GetWorkflow(ctx, t.turnID, "").Get(ctx, nil); err != nil {
			return st, fmt.Errorf("turn %s: %w%s", t.turnID, err, whereStuck(e.client, t.turnID))
		}
		h, err := history(ctx, e.client, t.turnID)
		if err != nil {
			return st, err
		}
		marks := approvalMarks(timedHistory(h), at, firstAt, false)
		if err := checkMarks(marks); err != nil {
			return st, fmt.Errorf("%s: %w", t.turnID, err)
		}
		addStretches(stretched, marks)
	}
	if err := waitQuiet(ctx, func() int64 { return current(e.srv.metrics.eventQueries) }); err != nil {
		return st, err
	}
	st.Breakdown = medians(nil, stretched)
	st.QueriesPerApproval = float64(current(e.srv.metrics.eventQueries)-q0) / float64(len(turns))
	st.Latency, st.First = summarize(all), summarize(firsts)
	return st, nil
}

// pauseTurn starts a turn and returns once it waits for its approval,
// leaving its stream.
func (e *benchEnv) pauseTurn(ctx context.Context, conv string) (turnID, requestID string, err error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	body, _ := json.Marshal(protocol.ChatRequest{Query: queryApprove, ConversationID: conv})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.api.URL+"/chat/stream", bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	ev, err := awaitEvent(ctx, readStamped(resp.Body), workflows.EventApprovalRequest)
	if err != nil {
		return "", "", fmt.Errorf("conversation %s: %w", conv, err)
	}
	return resp.Header.Get(protocol.HeaderTurnID), ev.RequestID, nil
}

func (e *benchEnv) approve(ctx context.Context, requestID string) error {
	body, _ := json.Marshal(workflows.ApprovalDecision{RequestID: requestID, Decision: workflows.DecisionApprove})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.api.URL+"/chat/approval", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct{ Accepted bool }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || !out.Accepted {
		return fmt.Errorf("approval of %s not accepted (%s): %v", requestID, resp.Status, err)
	}
	return nil
}

// memInUse returns the heap and stack memory in use after a full GC.
func memInUse() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.StackInuse
}

// waitQuiet returns once the counter has not moved for a second: the
// pollers have read what there was to read.
func waitQuiet(ctx context.Context, counter func() int64) error {
	last, since := counter(), time.Now()
	return waitUntil(ctx, func() bool {
		if n := counter(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= time.Second
	})
}

func waitUntil(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// Watchers run as a child process: this test binary again, running
// TestBenchSSEWatchers with envBenchWatch set.
const envBenchWatch = "TOLLGATE_BENCH_WATCH"

// watchSpec tells the child process what to watch.
type watchSpec struct {
	BaseURL string   `json:"baseUrl"`
	Turns   []string `json:"turns"`
	PerTurn int      `json:"perTurn"`
}

// watchers is a running child process of SSE clients.
type watchers struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer
	// results gets the arrival of every tool_result event at a client.
	results chan watcherEvent
}

type watcherEvent struct {
	turnID string
	at     time.Time
}

// startWatchers starts perTurn SSE clients for each turn in a child process
// and returns once every client has received its turn's approval_request.
func startWatchers(ctx context.Context, baseURL string, turns []string, perTurn int) (*watchers, error) {
	spec, _ := json.Marshal(watchSpec{BaseURL: baseURL, Turns: turns, PerTurn: perTurn})
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchSSEWatchers$", "-test.count=1")
	cmd.Env = append(os.Environ(), envBenchWatch+"="+string(spec))
	w := &watchers{cmd: cmd, stderr: &bytes.Buffer{}, results: make(chan watcherEvent, fanClients)}
	cmd.Stderr = w.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start SSE watchers: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "bench-ready":
				close(ready)
			case len(f) == 3 && f[0] == "bench-result":
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				w.results <- watcherEvent{turnID: f[1], at: time.Unix(0, ns)}
			}
		}
	}()
	select {
	case <-ready:
		return w, nil
	case <-time.After(benchWait):
	case <-ctx.Done():
	}
	w.stop()
	return nil, fmt.Errorf("SSE watchers not ready within %s:\n%s", benchWait, w.stderr)
}

// stop ends the child process: closing its stdin makes it leave its
// streams and exit.
func (w *watchers) stop() {
	if w.stdin != nil {
		w.stdin.Close()
		w.stdin = nil
		_ = w.cmd.Wait()
	}
}

// collectResults waits until n clients across ws have received turnID's
// tool_result, and returns when each did.
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
				return nil, fmt.Errorf("tool_result of %s while waiting for %s", ev.turnID, turnID)
			}
			got = append(got, ev.at)
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d clients got the tool_result of %s: %w", len(got), n, turnID, ctx.Err())
		}
	}
	return got, nil
}

// TestBenchSSEWatchers is not a test: it is the child process of
// BenchmarkTollgate's fan-out, and skips unless that started it.
func TestBenchSSEWatchers(t *testing.T) {
	raw := os.Getenv(envBenchWatch)
	if raw == "" {
		t.Skip("the SSE clients of BenchmarkTollgate's fan-out; runs only as its child process")
	}
	var spec watchSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	var (
		out     = bufio.NewWriter(os.Stdout)
		outMu   sync.Mutex
		pending atomic.Int64
	)
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{}}
	pending.Store(int64(len(spec.Turns) * spec.PerTurn))
	failed := make(chan error, 1)
	for _, turn := range spec.Turns {
		for range spec.PerTurn {
			go func() {
				err := watchOne(ctx, hc, spec.BaseURL, turn, func() {
					if pending.Add(-1) == 0 {
						say("bench-ready")
					}
				}, func(at time.Time) { say("bench-result %s %d", turn, at.UnixNano()) })
				if err != nil && ctx.Err() == nil {
					select {
					case failed <- err:
					default:
					}
				}
			}()
		}
	}
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-stdinClosed:
	case err := <-failed:
		t.Fatal(err)
	}
}

// watchOne streams a turn from its start, calling ready at its
// approval_request and result at its tool_result.
func watchOne(ctx context.Context, hc *http.Client, base, turn string, ready func(), result func(time.Time)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/chat/turns/"+turn+"/events?after=0", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET events of %s: %s", turn, resp.Status)
	}
	for ev := range readStamped(resp.Body) {
		switch ev.Type {
		case workflows.EventApprovalRequest:
			ready()
		case workflows.EventToolResult:
			result(ev.at)
		}
	}
	return nil
}

// historyCost is the history one turn leaves.
type historyCost struct {
	Query          string
	TurnEvents     int
	ConvEvents     int
	ModelCalls     int
	ToolCalls      int
	TokenSignals   int
	TokenEvents    int
	StreamedEvents int
	Took           time.Duration
}

// historyCost runs one turn of query to its end and counts the events of
// its history and of its (new) conversation's.
func (e *benchEnv) historyCost(ctx context.Context, query string) (historyCost, error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	res := historyCost{Query: query}
	conv := fmt.Sprintf("bench-%s-history-%d", e.run, time.Now().UnixNano())
	body, _ := json.Marshal(protocol.ChatRequest{Query: query, ConversationID: conv})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.api.URL+"/chat/stream", bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := e.http.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	turnID := resp.Header.Get(protocol.HeaderTurnID)
	for ev := range readStamped(resp.Body) {
		res.StreamedEvents++
		if ev.Type == workflows.EventToken {
			res.TokenEvents++
		}
		if ev.Type == workflows.EventFinish {
			if ev.Reason != workflows.FinishStop {
				return res, fmt.Errorf("turn %s finished with %s: %s", turnID, ev.Reason, ev.Message)
			}
			break
		}
	}
	res.Took = time.Since(start)
	h, err := history(ctx, e.client, turnID)
	if err != nil {
		return res, err
	}
	res.TurnEvents = len(h)
	for _, ev := range timedHistory(h) {
		switch {
		case ev.typ == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			res.TokenSignals++
		case ev.activity == activities.ModelActivity:
			res.ModelCalls++
		case ev.activity != "":
			res.ToolCalls++
		}
	}
	// The conversation has taken the turn's result once it runs no turn.
	convID := workflows.ConversationWorkflowID(conv)
	if err := waitUntil(ctx, func() bool {
		v, err := e.client.QueryWorkflow(ctx, convID, "", workflows.StateQuery)
		var st workflows.ConversationState
		return err == nil && v.Get(&st) == nil && st.Running == "" && st.Messages > 0
	}); err != nil {
		return res, fmt.Errorf("conversation %s did not take its turn's result: %w", convID, err)
	}
	if res.ConvEvents, err = historyLength(ctx, e.client, convID); err != nil {
		return res, err
	}
	return res, nil
}
