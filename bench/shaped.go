package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// Names of the same-shape floor, registered on the floor's worker.
const (
	shapedConversationName = "BenchShapedConversation"
	shapedTurnName         = "BenchShapedTurn"
	shapedModelName        = "BenchShapedModel"
)

// shapedConversation is the same-shape floor's conversation: a parent
// workflow that runs its one turn as a child, as a Conversation runs a
// ChatTurn. Indexed, it keeps the search attributes a tollgate
// conversation keeps (see shapedTurn).
func shapedConversation(ctx workflow.Context, query string, indexed bool) error {
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	opts := workflow.ChildWorkflowOptions{WorkflowID: shapedTurnID(id)}
	if indexed {
		if err := upsert(ctx, temporal.NewSearchAttributeKeyKeyword(contract.StatusAttribute).ValueSet(contract.StatusRunning)); err != nil {
			return err
		}
		opts.TypedSearchAttributes = temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(contract.ConversationIDAttribute).ValueSet(id),
			temporal.NewSearchAttributeKeyKeyword(contract.StatusAttribute).ValueSet(contract.StatusRunning))
	}
	if err := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), shapedTurnName, query, indexed).Get(ctx, nil); err != nil {
		return err
	}
	if indexed {
		return upsert(ctx, temporal.NewSearchAttributeKeyKeyword(contract.StatusAttribute).ValueSet(contract.StatusIdle))
	}
	return nil
}

// upsert sets search attributes as a tollgate workflow does; the SDK
// refuses only a reserved or unencodable one. The namespace must have
// them (the server fails the workflow task otherwise): tollgate's worker,
// started first on the same namespace, adds them.
func upsert(ctx workflow.Context, updates ...temporal.SearchAttributeUpdate) error {
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		return fmt.Errorf("upsert search attributes: %w", err)
	}
	return nil
}

func shapedTurnID(conversationID string) string { return conversationID + "-turn" }

// shapedTurn is the least a turn of the same shape as tollgate's does: a
// model call (the same Model activity, on the same model server) that asks
// for Write, the request published in a queryable log, the decision
// signal, the Write tool, its result published, a second model call, and
// finish. Everything tollgate adds around that (the policy, the
// normalization, the preview, search attributes, grants, the ledger, the
// Update's validation) is what the comparison weighs.
//
// Indexed, the floor also keeps the search attributes a tollgate turn and
// its conversation keep, with the same writes at the same moments: the
// turn starts with its conversation and running, lists its request while
// it waits, and is running again once decided; the conversation is running
// while its turn runs and idle after. The difference between the two
// floors is what those visibility writes cost the server.
func shapedTurn(ctx workflow.Context, query string, indexed bool) error {
	var log []protocol.Event
	publish := func(e protocol.Event) {
		e.Seq = len(log) + 1
		log = append(log, e)
	}
	if err := setFloorEventsQuery(ctx, func() []protocol.Event { return log }); err != nil {
		return err
	}
	mctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	in := activities.ModelInput{
		Messages: []protocol.Message{{Role: protocol.RoleUser, Content: query}},
		Tools:    []protocol.ToolSpec{{Name: protocol.ToolWrite}},
	}
	var out activities.ModelOutput
	if err := workflow.ExecuteActivity(mctx, shapedModelName, in).Get(ctx, &out); err != nil {
		return err
	}
	if len(out.ToolCalls) != 1 {
		return fmt.Errorf("the model asked for %d calls, not 1", len(out.ToolCalls))
	}
	call := out.ToolCalls[0]
	publish(protocol.Event{Type: protocol.EventApprovalRequest, RequestID: "r", ToolCallID: call.ID, ToolName: call.Name})
	pending := temporal.NewSearchAttributeKeyKeywordList(contract.PendingApprovalsAttribute)
	status := temporal.NewSearchAttributeKeyKeyword(contract.StatusAttribute)
	if indexed {
		if err := upsert(ctx, pending.ValueSet([]string{workflow.GetInfo(ctx).WorkflowExecution.ID + "/r"}), status.ValueSet(contract.StatusWaiting)); err != nil {
			return err
		}
	}
	var d protocol.ApprovalDecision
	workflow.GetSignalChannel(ctx, floorSignalName).Receive(ctx, &d)
	if indexed {
		if err := upsert(ctx, pending.ValueUnset(), status.ValueSet(contract.StatusRunning)); err != nil {
			return err
		}
	}
	var result activities.ToolOutput
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, floorToolOptions), floorActivityName,
		activities.ToolInput{Call: call}).Get(ctx, &result); err != nil {
		return err
	}
	publish(protocol.Event{Type: protocol.EventToolResult, ToolResults: []protocol.ToolResult{{
		ID: call.ID, Name: call.Name, Result: result.Result, Status: result.Status,
	}}})
	in.Messages = append(in.Messages,
		protocol.Message{Role: protocol.RoleAssistant, ToolCalls: out.ToolCalls},
		protocol.Message{Role: protocol.RoleTool, ToolCallID: call.ID, Name: call.Name, Content: result.Result})
	if err := workflow.ExecuteActivity(mctx, shapedModelName, in).Get(ctx, &out); err != nil {
		return err
	}
	publish(protocol.Event{Type: protocol.EventFinish, Reason: protocol.FinishStop, Text: out.Content})
	return nil
}

// shapedFloorTurn runs one same-shape turn as tollgate's clients run one:
// start its conversation, read the turn as the API reads one, decide by
// signal, wait for tool_result and finish.
func (e *env) shapedFloorTurn(ctx context.Context, name string) (turnSample, error) {
	return e.runShapedTurn(ctx, name, false)
}

// indexedFloorTurn runs one same-shape turn that keeps tollgate's search
// attributes.
func (e *env) indexedFloorTurn(ctx context.Context, name string) (turnSample, error) {
	return e.runShapedTurn(ctx, name, true)
}

// runShapedTurn runs the same-shape floor's conversation, indexed or not,
// and its turn, as a client of tollgate runs a turn.
func (e *env) runShapedTurn(ctx context.Context, name string, indexed bool) (turnSample, error) {
	ctx, cancel := context.WithTimeout(ctx, benchWait)
	defer cancel()
	conv := "bench-shaped-" + e.run + "-" + name
	s := turnSample{conv: conv, workflowID: shapedTurnID(conv)}
	s.start = time.Now()
	run, err := e.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: conv, TaskQueue: e.floorQueue}, shapedConversationName, queryApprove, indexed)
	if err != nil {
		return s, err
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	events := e.floor.watch(watchCtx, s.workflowID)
	if err := e.approveFloor(ctx, "same-shape floor", &s, events); err != nil {
		return s, err
	}
	ev, err := awaitEvent(ctx, events, protocol.EventFinish)
	if err != nil {
		return s, fmt.Errorf("same-shape floor %s: %w%s", s.workflowID, err, whereStuck(e.temporal, s.workflowID))
	}
	s.finish = ev.at
	// The turn ends at its finish, as a tollgate turn does: a tollgate
	// client does not wait for the conversation's task after the turn
	// (it goes idle), so the floor's client does not wait for its
	// conversation's (it completes). Its result is still checked, before
	// the part's CPU is read (runPart waits for e.tails).
	s.total = time.Since(s.start)
	check := func(ctx context.Context) error {
		if err := run.Get(ctx, nil); err != nil {
			return fmt.Errorf("same-shape floor conversation %s: %w", conv, err)
		}
		return nil
	}
	e.tails.Go(func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchWait)
		defer cancel()
		return check(ctx)
	})
	return s, nil
}

// side is one side of the decision path under load: a name for its turns
// and how to run one.
type side struct {
	name string
	turn func(context.Context, string) (turnSample, error)
}

// runPart runs n turns of s, concurrency at a time, and adds their
// samples, time and CPU to r; part numbers the side's parts of a level.
//
// One at a time, the one client is busy from its first turn's start to
// its last turn's end: every turn is a sample, and the turns a second are
// per second of the turns' own time. With more clients, only the stretch
// in which all are busy counts (busy).
func (e *env) runPart(ctx context.Context, s side, concurrency, n, part int, r *loadRun) error {
	cpu0, err := e.readCPU(ctx)
	if err != nil {
		return err
	}
	_, _, samples, err := burstOf(ctx, fmt.Sprintf("%s-c%d-%d", s.name, concurrency, part), concurrency, n, s.turn)
	if err != nil {
		return err
	}
	if err := e.tails.Wait(); err != nil {
		return err
	}
	cpu1, err := e.readCPU(ctx)
	if err != nil {
		return err
	}
	r.CPU = r.CPU.add(cpu1.sub(cpu0))
	if concurrency == 1 {
		for _, t := range samples {
			r.busyTurns++
			r.busyTime += t.total
			r.samples = append(r.samples, t)
		}
		return nil
	}
	from, to := busy(samples)
	for _, t := range samples {
		// A turn that ended at from marks the stretch's start: the
		// stretch holds the turns that ended after it.
		if end := t.start.Add(t.total); end.After(from) && !end.After(to) {
			r.busyTurns++
		}
		if !t.decide.Before(from) && !t.decide.After(to) {
			r.samples = append(r.samples, t)
		}
	}
	r.busyTime += to.Sub(from)
	return nil
}

// busy is the stretch of a burst in which every client was busy: from the
// first turn's end (before it, clients only started turns, and the turns
// met less load) to the last turn's start (after it, clients run out of
// turns one by one, and the burst waits for its slowest). Turns a second
// over a whole burst would count both ramps, which at 50 turns at a time
// are most of it.
func busy(samples []turnSample) (from, to time.Time) {
	for i, s := range samples {
		if end := s.start.Add(s.total); i == 0 || end.Before(from) {
			from = end
		}
		if i == 0 || s.start.After(to) {
			to = s.start
		}
	}
	if to.Before(from) {
		to = from
	}
	return from, to
}

// loadLevel is one concurrency of the decision path under load and the
// turns each side runs at it.
type loadLevel struct{ concurrency, turns int }

// String is how a level reads in the log.
func (l loadLevel) String() string {
	return fmt.Sprintf("%d at a time (%d turns)", l.concurrency, l.turns)
}

// Concurrencies of the decision path under load, and the turns of each:
// enough that every client runs several, so that the stretch in which all
// are busy holds most of them. The goals are at 1, 10 and 50. One
// at a time, each turn is one sample of the p50, so that level runs 300:
// with 100, one build's ratio there moved from 1.00x to 1.24x between runs
// (a p50 of 100 turns whose p95 is twice it moves by some 5% each way
// from sampling alone, a ratio of two such by some 7%), and in rounds
// (loadOrder) as much as in halves; three times the turns cut that by
// some 40%.
var loadLevels = []loadLevel{{1, 300}, {10, 200}, {50, 400}}

// envBenchLoadTurns, set to k, makes every level run 2k turns a client
// (in the parts loadOrder makes of them), for a quick try of the stage.
const envBenchLoadTurns = "TOLLGATE_BENCH_LOAD_TURNS"

// loadRun is one side at one concurrency.
type loadRun struct {
	Concurrency, Turns int
	// TurnsPerSec are the turns that ended while every client was busy,
	// per second of that stretch (busy); one at a time, every turn, per
	// second of the turns' own time.
	TurnsPerSec float64
	// Latency is of the turns decided while every client was busy (one at
	// a time, of every turn).
	Latency burstLatency
	// CPU is each process's CPU time per turn over the run: for the
	// floor, the benchmark's process holds its worker.
	CPU cpuTimes
	// samples are the turns Latency is of.
	samples   []turnSample
	busyTurns int
	busyTime  time.Duration
}

// loadResult is the decision path under load: the same-shape floor, the
// same floor keeping tollgate's search attributes (Indexed) and tollgate
// at each of loadLevels, and where the approval path's time goes at the
// highest.
type loadResult struct {
	// Server is the Temporal server the stage ran on; Err, when set, why
	// it did not finish.
	Server, Err              string
	Floor, Indexed, Tollgate []loadRun
	// Breakdown splits the approval path of the highest level into
	// stretches; FirstBreakdown, of the lowest (one turn at a time, where
	// tollgate's own work shows most), when there are two levels or more.
	Breakdown, FirstBreakdown []segment
}

// decisionPathUnderLoad runs the same-shape floor, the indexed floor and
// tollgate at each concurrency of loadLevels and splits the approval path
// of the highest into stretches. The sides take turns (loadOrder), so that
// a server that slows as its database grows, or a machine whose speed
// drifts, weighs on each side alike.
//
// A level that fails ends the stage with the error; the levels before it
// are kept, and the breakdown is of the last of them.
func (e *env) decisionPathUnderLoad(ctx context.Context, levels []loadLevel) (loadResult, error) {
	var res loadResult
	floor := side{"shaped", e.shapedFloorTurn}
	indexed := side{"indexed", e.indexedFloorTurn}
	tollgate := side{"tollgate", e.tollgateTurn}
	var failed error
levels:
	for _, l := range levels {
		f := loadRun{Concurrency: l.concurrency, Turns: l.turns}
		x, t := f, f
		sides, runs := []side{floor, indexed, tollgate}, []*loadRun{&f, &x, &t}
		for _, part := range loadOrder(l) {
			if err := e.runPart(ctx, sides[part.side], l.concurrency, part.turns, part.number, runs[part.side]); err != nil {
				failed = fmt.Errorf("at %d turns at a time: %w", l.concurrency, err)
				break levels
			}
		}
		for _, r := range runs {
			if r.busyTime > 0 {
				r.TurnsPerSec = float64(r.busyTurns) / r.busyTime.Seconds()
			}
			r.Latency = burstLatency{Request: latencies(r.samples, requestLatency), Result: latencies(r.samples, resultLatency)}
			r.CPU = r.CPU.div(r.Turns)
		}
		res.Floor, res.Indexed, res.Tollgate = append(res.Floor, f), append(res.Indexed, x), append(res.Tollgate, t)
	}
	last := len(res.Floor) - 1
	if last < 0 {
		return res, failed
	}
	// After a level that failed, the server may not answer: the level's
	// error comes first, so the report says what failed.
	b, err := breakdown(ctx, e.temporal, res.Floor[last].samples, res.Tollgate[last].samples, shapedModelName)
	if err != nil {
		return res, errors.Join(failed, fmt.Errorf("where the time goes: %w", err))
	}
	res.Breakdown = b
	if last > 0 {
		if res.FirstBreakdown, err = breakdown(ctx, e.temporal, res.Floor[0].samples, res.Tollgate[0].samples, shapedModelName); err != nil {
			return res, errors.Join(failed, fmt.Errorf("where the time goes at %d at a time: %w", res.Floor[0].Concurrency, err))
		}
	}
	return res, failed
}

// loadPart is one run of a side's turns within a level: the side (0 the
// same-shape floor, 1 the indexed floor, 2 tollgate), how many turns,
// and which of the side's parts it is.
type loadPart struct{ side, turns, number int }

// roundTurns is how many turns each side runs in one round at one turn
// at a time (loadOrder).
const roundTurns = 10

// roundOrders are the six orders of the three sides; the rounds take them
// in turn, so that each side follows each other side, and runs first,
// second and third, as often as the others.
var roundOrders = [6][3]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}, {2, 1, 0}, {1, 0, 2}}

// loadOrder is the order in which the sides run a level's turns. One at a
// time, in rounds of roundTurns a side, the order of the three taking
// each of roundOrders in turn, so that every side meets the machine in the
// same states within seconds of each other, however its speed wanders.
// With more clients, and for a level too short for six rounds, in two
// halves a side, in the order floor, indexed floor, tollgate, tollgate,
// indexed floor, floor, which cancels a steady drift (a server that slows
// as its database grows): a part with several clients starts and ends with
// ramps that do not count (busy), so it must be long, and its turns a
// second count the ends of clients that still finish in step (a few turns
// a client) more than once in a while.
func loadOrder(l loadLevel) []loadPart {
	var out []loadPart
	if rounds := l.turns / roundTurns; l.concurrency == 1 && rounds >= len(roundOrders) {
		for r := range rounds {
			n := l.turns / rounds
			if r < l.turns%rounds {
				n++ // the remainder, one turn to each of the first rounds
			}
			for _, side := range roundOrders[r%len(roundOrders)] {
				out = append(out, loadPart{side: side, turns: n, number: r})
			}
		}
		return out
	}
	for i, s := range []int{0, 1, 2, 2, 1, 0} {
		n, which := l.turns/2, 0
		if i >= 3 {
			n, which = l.turns-n, 1
		}
		out = append(out, loadPart{side: s, turns: n, number: which})
	}
	return out
}

// namedRun is one side's run at one concurrency, named for the report.
type namedRun struct {
	name string
	r    loadRun
}

// loadMarkdown is the section of the decision path under load.
func (r *report) loadMarkdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("### The decision path under load, against a floor of the same shape")
	p("")
	p("The same-shape floor is plain Temporal doing what a tollgate turn does for one approved call: a")
	p("parent workflow per conversation, a child per turn, the Model activity on the same model server")
	p("asking for Write, the request in a queryable log, the decision by signal, the same Write tool, its")
	p("result, a second model call, finish; it runs on a worker in the benchmark's process, with a connection")
	p("of its own, and is read as the API reads a turn. Its clients and tollgate's run the same turns on the")
	p("same Temporal server. Each Temporal server below is fresh but for the warm-up; tollgate runs there")
	p("with its default settings (audit ledger, payload store, search attributes), without gzip on the dev")
	p("server as `make dev` runs it, the floor alike (see the top of this file). The indexed floor is the")
	p("same floor keeping tollgate's search attributes with the same writes at the same moments (the turn")
	p("lists its request while it waits and is running again once decided, the conversation is running")
	p("while its turn runs and idle after): what is left between it and tollgate is tollgate's own work.")
	p("One at a time the sides take turns in rounds of %d turns a side, the order of the three taking each", roundTurns)
	p("of its six orders in turn, so that every side meets the machine in the same states; every turn is")
	p("a sample, and turns a second are per second of the turns' own time. With more clients (and at a")
	p("level of fewer than six rounds) each side runs in two halves, in the order floor, indexed floor,")
	p("tollgate, tollgate, indexed floor, floor (a server slows as its database grows, and the order")
	p("cancels that out); turns a second are those that ended while every client was busy (after a half's")
	p("first end, to its last start, so neither ramp counts), per second of that stretch, and latencies")
	p("are of the turns decided in it. Every turn, the floor's as tollgate's, ends at its `finish` event;")
	p("neither client waits for its conversation's task after it. The goals")
	p("(issue 28, item 1) are against the same-shape floor, with tollgate's audit ledger on (its default,")
	p("a SQLite file here): approve → `tool_result` p50 within %.2fx and turns a second at least %.2fx,", loadLatencyGoal, loadThroughputGoal)
	p("at 1, 10 and 50 turns at a time, on both servers.")
	p("")
	for _, ld := range r.Load {
		p("#### On %s", ld.Server)
		p("")
		if ld.Err != "" {
			p("The stage did not finish: %s", firstLine(ld.Err))
			p("")
		}
		if len(ld.Floor) == 0 {
			continue
		}
		p("| concurrency (turns) | floor | approve → `tool_result` p50: floor | tollgate | ratio | goal ≤%.2fx | p95: floor | tollgate | turns/s: floor | tollgate | ratio | goal ≥%.2fx | start → `approval_request` p50: floor | tollgate |", loadLatencyGoal, loadThroughputGoal)
		p("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|")
		for i, t := range ld.Tollgate {
			floors := []namedRun{{"same-shape", ld.Floor[i]}}
			if i < len(ld.Indexed) {
				floors = append(floors, namedRun{"indexed", ld.Indexed[i]})
			}
			for j, f := range floors {
				lat, tps := ratio(t.Latency.Result.p50, f.r.Latency.Result.p50), t.TurnsPerSec/f.r.TurnsPerSec
				// The goals are against the same-shape floor.
				latGoal, tpsGoal := "", ""
				if j == 0 {
					latGoal, tpsGoal = goalCell(lat, lat <= loadLatencyGoal), goalCell(tps, tps >= loadThroughputGoal)
				}
				p("| %d (%d) | %s | %.1f ms | %.1f ms | %s | %s | %.1f ms | %.1f ms | %.1f | %.1f | %s | %s | %.1f ms | %.1f ms |", t.Concurrency, t.Turns, f.name,
					ms(f.r.Latency.Result.p50), ms(t.Latency.Result.p50), ratioCell(lat), latGoal,
					ms(f.r.Latency.Result.p95), ms(t.Latency.Result.p95),
					f.r.TurnsPerSec, t.TurnsPerSec, ratioCell(tps), tpsGoal,
					ms(f.r.Latency.Request.p50), ms(t.Latency.Request.p50))
			}
		}
		p("")
		p("CPU per turn in each run, by process (the floor's worker runs in the benchmark's process, beside the")
		p("clients and the model; tollgate's worker and API are processes of their own; the server's figure")
		p("includes PostgreSQL's processes where it has them):")
		p("")
		p("| concurrency | side | Temporal server | benchmark's process | tollgate's worker | tollgate's API | all |")
		p("|---|---|---:|---:|---:|---:|---:|")
		for i := range ld.Floor {
			sides := []namedRun{{"same-shape floor", ld.Floor[i]}, {"tollgate", ld.Tollgate[i]}}
			if i < len(ld.Indexed) {
				sides = slices.Insert(sides, 1, namedRun{"indexed floor", ld.Indexed[i]})
			}
			for _, side := range sides {
				c := side.r.CPU
				p("| %d | %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms |", side.r.Concurrency, side.name,
					ms(max(c.server, 0)), ms(c.bench), ms(c.worker), ms(c.api), ms(c.ours()+max(c.server, 0)))
			}
		}
		p("")
		if n := len(ld.Floor); n > 0 {
			// A column pair for each level broken down: the highest, and
			// the lowest before it when it was.
			type level struct {
				concurrency int
				segs        []segment
			}
			levels := []level{{ld.Floor[n-1].Concurrency, ld.Breakdown}}
			if len(ld.FirstBreakdown) == len(ld.Breakdown) {
				levels = slices.Insert(levels, 0, level{ld.Floor[0].Concurrency, ld.FirstBreakdown})
			}
			names := make([]string, len(levels))
			head, rule := "| stretch |", "|---|"
			for i, l := range levels {
				names[i] = strconv.Itoa(l.concurrency)
				head += fmt.Sprintf(" same-shape floor, %d | tollgate, %d |", l.concurrency, l.concurrency)
				rule += "---:|---:|"
			}
			p("Where a turn's time goes at concurrency %s, to its request and from its decision (medians over its turns, from their histories):", strings.Join(names, " and "))
			p("")
			p("%s", head)
			p("%s", rule)
			for i, s := range ld.Breakdown {
				row := "| " + s.Name + " |"
				for _, l := range levels {
					row += fmt.Sprintf(" %.1f ms | %.1f ms |", ms(l.segs[i].Floor), ms(l.segs[i].Tollgate))
				}
				p("%s", row)
			}
			p("")
		}
	}
	return b.String()
}

// firstLine is the first line of s, for an error in the report.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func ratio(a, b time.Duration) float64 { return a.Seconds() / b.Seconds() }

// The goals for the decision path under load, against the
// same-shape floor.
const (
	loadLatencyGoal    = 1.15
	loadThroughputGoal = 0.95
)

// ratioCell is a ratio in a table, or a dash where either side measured
// nothing.
func ratioCell(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2fx", x)
}

// goalCell is a goal's cell in a table: pass or fail, or "no figure" when
// the run measured too little to have a ratio (a quick try).
func goalCell(x float64, ok bool) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0) || x == 0:
		return "no figure"
	case ok:
		return "**pass**"
	}
	return "**fail**"
}

func metGoal(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
