package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"time"
)

// report is everything BenchmarkTollgate measured.
type report struct {
	Date                  time.Time
	Runs                  int
	LoadBefore, LoadAfter string

	Floor, Tollgate pathStats
	// QueriesPerTurn is the API's events queries per sequential turn, from
	// POST /chat/stream to finish, with one client.
	QueriesPerTurn  float64
	Breakdown       []segment
	Timeline        []timelineRow
	HistoryApproved int

	FanOut   fanOutResult
	History  []historyCost
	LongTurn [2]longTurnResult // payloads inline, then with the store
	Sandbox  sandboxResult
	Backtest backtestResult
	Scale    scaleResult
	// ScaleDev is the scale stage on make dev's dev server.
	ScaleDev scaleResult
	Load     []loadResult

	// Stages are how long each stage took, in order; Took the whole run
	// from the start of the first stage (the build and the servers'
	// starts before it not counted).
	Stages []stageTime
	Took   time.Duration
}

// stageTime is how long one stage of the run took.
type stageTime struct {
	Name string
	Took time.Duration
}

// pathStats are one side's latencies and throughput.
type pathStats struct {
	Request, Result             summary
	TurnsPerSec1, TurnsPerSec20 float64
	Burst                       burstLatency
	// CPU is the CPU time per turn of the concurrent run, by process.
	CPU cpuTimes
}

// burstLatency is the latencies measured during the concurrent run.
type burstLatency struct{ Request, Result summary }

// goalRatio is the goal: tollgate within 1.25x of the floor at p50.
const goalRatio = 1.25

// The parts of the results file. writeReport replaces the latest run's
// block with a new one and moves it to the run before's, and keeps the notes
// after notesMarker.
const (
	latestMarker = "<!-- The latest run: written by `make bench`. -->"
	beforeMarker = "<!-- The run before: moved here by `make bench`. -->"
	runEnd       = "<!-- end of run -->"
	notesMarker  = "<!-- Notes below this line are written by hand; `make bench` keeps them. -->"
)

// fileHeader opens the results file.
const fileHeader = `# tollgate benchmarks

` + "`make bench`" + ` (BenchmarkTollgate in ` + "`bench/`" + `) writes this file: the latest run, then the run before
it, then notes written by hand, which it keeps. Two runs side by side show how much a figure moves
from one run to the next; read the notes before reading much into one ratio.

`

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	ratio := func(t, f time.Duration) string { return fmt.Sprintf("%.2fx", t.Seconds()/f.Seconds()) }

	p("Written by `make bench` (BenchmarkTollgate in `bench/`) on %s.", r.Date.UTC().Format("2006-01-02 15:04 MST"))
	p("Machine: %d cores (%s), %s/%s, %s. Load average before / after the run: %s / %s.",
		runtime.NumCPU(), cpuModel(), runtime.GOOS, runtime.GOARCH, runtime.Version(), r.LoadBefore, r.LoadAfter)
	p("One tuned Temporal dev server (`internal/devserver`); tollgate's worker and API are the binaries of")
	p("this tree, each a process of its own with its default settings (the API on loopback) but one that")
	p("`make dev` sets too: on a dev server, every process talks to Temporal without gzip (no process here")
	p("compresses, the floor's neither), as over loopback it costs only CPU; on the Temporal server on")
	p("PostgreSQL, every process gzips at gzip's fastest level, tollgate's default. The scripted")
	p("model answers at once (no chunk delay) from the benchmark's process. Everything tollgate's figures")
	p("say comes from outside: the clients' clocks on POST /chat/stream, POST /chat/approval and GET")
	p("/chat/turns/:turnId/events, the API's and the worker's GET /metrics, the processes' CPU time in")
	p("/proc (the figure their `process_cpu_seconds_total` reads, without a scrape), and the workflows'")
	p("histories.")
	p("The raw floor is `floorWorkflow`: it publishes an approval request in a log its events query reads,")
	p("waits for a signal, runs one activity (the same Write tool with the same options as a turn's),")
	p("publishes the result; it runs on an SDK worker in the benchmark's process with the worker binary's")
	p("options, and is read the way the API reads a turn (history long poll, then the events query).")
	p("%d turns of each, one at a time, floor and tollgate alternating; percentiles are nearest-rank.", r.Runs)
	p("Everything shares the machine's cores.")
	p("")

	p("### tollgate against the raw Temporal floor")
	p("")
	p("| | raw floor | tollgate | tollgate / floor |")
	p("|---|---:|---:|---:|")
	row := func(name string, f, t time.Duration) {
		p("| %s | %.1f ms | %.1f ms | %s |", name, ms(f), ms(t), ratio(t, f))
	}
	row("start → `approval_request` at the client, p50", r.Floor.Request.p50, r.Tollgate.Request.p50)
	row("start → `approval_request` at the client, p95", r.Floor.Request.p95, r.Tollgate.Request.p95)
	row("approve → `tool_result` at the client, p50", r.Floor.Result.p50, r.Tollgate.Result.p50)
	row("approve → `tool_result` at the client, p95", r.Floor.Result.p95, r.Tollgate.Result.p95)
	p("| turns per second, 1 at a time | %.1f | %.1f | %.2fx |", r.Floor.TurnsPerSec1, r.Tollgate.TurnsPerSec1, r.Tollgate.TurnsPerSec1/r.Floor.TurnsPerSec1)
	p("| turns per second, %d at a time (%d turns) | %.1f | %.1f | %.2fx |", benchConcurrency, benchBurstTurns,
		r.Floor.TurnsPerSec20, r.Tollgate.TurnsPerSec20, r.Tollgate.TurnsPerSec20/r.Floor.TurnsPerSec20)
	fc, tc := r.Floor.CPU, r.Tollgate.CPU
	row(fmt.Sprintf("CPU per turn, %d at a time: worker, API, model and clients (every process but the dev server)", benchConcurrency), fc.ours(), tc.ours())
	p("| … of which tollgate's worker process (from /proc) | %.1f ms (idle) | %.1f ms | |", ms(fc.worker), ms(tc.worker))
	p("| … of which tollgate's API process (from /proc) | %.1f ms (idle) | %.1f ms | |", ms(fc.api), ms(tc.api))
	p("| … of which the benchmark's process (the floor's worker, the model, the clients) | %.1f ms | %.1f ms | |", ms(fc.bench), ms(tc.bench))
	if fc.server > 0 && tc.server > 0 {
		row(fmt.Sprintf("CPU per turn, %d at a time: Temporal dev server", benchConcurrency), fc.server, tc.server)
	}
	row(fmt.Sprintf("start → `approval_request`, p50 with %d at a time", benchConcurrency), r.Floor.Burst.Request.p50, r.Tollgate.Burst.Request.p50)
	row(fmt.Sprintf("approve → `tool_result`, p50 with %d at a time", benchConcurrency), r.Floor.Burst.Result.p50, r.Tollgate.Burst.Result.p50)
	p("")
	p("A floor turn ends when its result is read (a last signal closes it); a tollgate turn ends at its")
	p("`finish` event, after a second model call that answers \"done\".")
	p("")

	p("#### Where the time goes")
	p("")
	p("Medians of each stretch over the %d sequential turns, from the workflows' histories (server time)", r.Runs)
	p("and the client's clock, on the same machine; medians of parts need not add up to the p50 of the whole.")
	p("")
	p("| stretch | raw floor | tollgate |")
	p("|---|---:|---:|")
	for _, s := range r.Breakdown {
		floor := "—"
		if s.HasFloor {
			floor = fmt.Sprintf("%.1f ms", ms(s.Floor))
		}
		p("| %s | %s | %.1f ms |", s.Name, floor, ms(s.Tollgate))
	}
	p("")
	p("One tollgate turn step by step, to its finish (the one with the median start → `approval_request`), in ms from")
	p("POST /chat/stream; its turn's history has %d events when it ends.", r.HistoryApproved)
	p("")
	p("| ms | where | what |")
	p("|---:|---|---|")
	for _, t := range r.Timeline {
		p("| %.1f | %s | %s |", ms(t.At), t.Where, t.What)
	}
	p("")

	f := r.FanOut
	p("### Fan-out: %d SSE clients on %d paused turns", f.Clients[1], fanTurns)
	p("")
	p("The clients run in the benchmark's process; the queries, streams and pollers are the API's")
	p("`tollgate_api_event_queries_total`, `tollgate_api_open_streams` and `tollgate_api_pollers_running`,")
	p("its heap `go_memstats_heap_alloc_bytes` (live objects: the least seen over the %d GC cycles that a run", memoryGCs)
	p("of scrapes brings about, as the API collects no garbage on demand) and its stacks")
	p("`go_memstats_stack_inuse_bytes`.")
	p("")
	p("| | %d clients (1 per turn) | %d clients (%d per turn) |", f.Clients[0], f.Clients[1], f.Clients[1]/fanTurns)
	p("|---|---:|---:|")
	p("| events queries the API sent as the clients connected (until a second without any) | %d | %d |", f.ConnectQueries[0], f.ConnectQueries[1])
	p("| events queries per second while the turns waited (%s) | %.1f | %.1f |", fanIdle, f.IdleQPS[0], f.IdleQPS[1])
	p("| CPU while the turns waited: worker and API processes | %.1f%% of a core | %.1f%% of a core |", 100*f.IdleCPUOurs[0], 100*f.IdleCPUOurs[1])
	if f.IdleCPUServer[0] >= 0 {
		p("| CPU while the turns waited: Temporal dev server | %.1f%% of a core | %.1f%% of a core |", 100*f.IdleCPUServer[0], 100*f.IdleCPUServer[1])
	}
	p("| API heap per stream, after GC | %.1f KiB (its turn's poller included) | %.1f KiB |", f.HeapPerFirst/1024, f.HeapPerStream/1024)
	p("| API goroutine stacks per stream | %.1f KiB | %.1f KiB |", f.StackPerFirst/1024, f.StackPerStream/1024)
	p("")
	w, c := f.Watched, f.Control
	p("With all %d connected: %d open streams, %d pollers. Then %d of the turns were approved one after",
		f.Clients[1], f.OpenStreams, f.Pollers, w.Turns)
	p("another, each run to its finish, while every client watched; then the further clients left and %d",
		c.Turns)
	p("more turns were approved with one client on each remaining turn, as a control.")
	p("")
	p("| | %d clients, %d per turn | control: %d clients, 1 per turn |", f.Clients[1], w.PerTurn, fanTurns-w.Turns)
	p("|---|---:|---:|")
	p("| approve → `tool_result` at every client of the turn, p50 | %.1f ms | %.1f ms |", ms(w.Latency.p50), ms(c.Latency.p50))
	p("| the same, p95 | %.1f ms | %.1f ms |", ms(w.Latency.p95), ms(c.Latency.p95))
	p("| the same, at the first client of each turn, p50 | %.1f ms | %.1f ms |", ms(w.First.p50), ms(c.First.p50))
	p("| events queries per approved turn, from the approval to its finish | %.1f | %.1f |", w.QueriesPerApproval, c.QueriesPerApproval)
	for i, seg := range w.Breakdown {
		if i < len(c.Breakdown) {
			p("| %s (median) | %.1f ms | %.1f ms |", seg.Name, ms(seg.Tollgate), ms(c.Breakdown[i].Tollgate))
		}
	}
	p("")
	p("For comparison, a whole sequential turn with one client cost %.1f events queries.", r.QueriesPerTurn)
	p("")

	p("%s", r.historyMarkdown())

	p("%s", r.loadMarkdown())

	p("%s", r.longTurnMarkdown())

	p("%s", r.sandboxMarkdown())

	p("%s", r.backtestMarkdown())

	p("%s", r.scaleMarkdown())

	p("%s", r.stagesMarkdown())

	p("### What the numbers mean")
	p("")
	p("%s", r.verdict())
	p("")
	return b.String()
}

// longTurnMarkdown is the section of the long turn.
func (r *report) longTurnMarkdown() string {
	in, st := r.LongTurn[0], r.LongTurn[1]
	return fmt.Sprintf(`### History of a long turn

One turn of %d steps, each with %d Reads of %d KiB files, on the same dev server (default limits),
each way on a worker and an API of its own; history bytes as GetWorkflowExecutionHistory returns them.
Inline, the payload store's threshold (`+"`TOLLGATE_PAYLOAD_THRESHOLD`"+`) is past any payload's size.

| | steps done | turn | history | history events | payload store |
|---|---:|---|---:|---:|---:|
| payloads inline (v0.2.0) | %d | %s | %d KiB | %d | none |
| payload store (local folder) | %d | %s | %d KiB | %d | %d KiB |

The files read come to %d KiB in all. Inline, every model call carries the conversation so far, so
the turn outgrows Temporal's 2 MB payload limit before its last step. With the store, history holds
claims; the store cuts payloads into content-defined chunks and keeps each chunk once. What it holds
beyond one copy of the files is the chunks where a tool output meets what surrounds it in each
payload that carries it (its own result, each later model call, the turn's result), and the
manifests (32 bytes a chunk).
`, longTurnSteps, longTurnReads, longTurnFileSize>>10,
		in.steps, in.status, in.historyBytes>>10, in.events,
		st.steps, st.status, st.historyBytes>>10, st.events, st.storeBytes>>10,
		longTurnSteps*longTurnReads*longTurnFileSize>>10)
}

// verdict says in words what the tables show, computed from them so that it
// is true of every run.
func (r *report) verdict() string {
	req := r.Tollgate.Request.p50.Seconds() / r.Floor.Request.p50.Seconds()
	res := r.Tollgate.Result.p50.Seconds() / r.Floor.Result.p50.Seconds()
	met := func(x float64) string {
		if x <= goalRatio {
			return "meets"
		}
		return "misses"
	}
	seg := map[string]segment{}
	for _, sg := range r.Breakdown {
		seg[sg.Key] = sg
	}
	var s strings.Builder
	fmt.Fprintf(&s, "The goal was tollgate within %.2fx of the raw floor at p50. ", goalRatio)
	fmt.Fprintf(&s, "The approval path (approve → `tool_result`) %s it at %.2fx (%.1f ms against %.1f ms)",
		met(res), res, ms(r.Tollgate.Result.p50), ms(r.Floor.Result.p50))
	var worst segment
	extra := time.Duration(-1 << 62)
	for _, sg := range r.Breakdown {
		if sg.HasFloor && strings.HasPrefix(sg.Name, "approval: ") && sg.Tollgate-sg.Floor > extra {
			worst, extra = sg, sg.Tollgate-sg.Floor
		}
	}
	if extra > 0 {
		fmt.Fprintf(&s, "; its largest stretch beyond the floor is \"%s\" (%.1f ms against %.1f ms)",
			strings.TrimPrefix(worst.Name, "approval: "), ms(worst.Tollgate), ms(worst.Floor))
	}
	fmt.Fprintf(&s, ". The start path (start → `approval_request`) %s it at %.2fx, and cannot meet it by design: ", met(req), req)
	conv := seg["created"].Tollgate - seg["created"].Floor
	model := seg["model"].Tollgate + seg["pub-wait"].Tollgate + seg["pub-run"].Tollgate
	fmt.Fprintf(&s, "a turn calls the model before it knows which tool it wants, and that call and the workflow task after it take %.1f ms the floor never spends; ", ms(model))
	fmt.Fprintf(&s, "a turn is also a child of a conversation workflow that a message Update starts, which costs %.1f ms more than starting the floor's workflow. ", ms(conv))
	if t, f := r.Tollgate.CPU, r.Floor.CPU; t.server > 0 {
		perTurn := t.server + t.ours()
		fmt.Fprintf(&s, "Throughput is bound by CPU: a tollgate turn costs %.0f ms of dev-server CPU and %.0f ms in the other processes (the worker %.0f, the API %.0f; the floor %.0f and %.0f in all), so %d cores allow about %.0f turns a second at best. ",
			ms(t.server), ms(t.ours()), ms(t.worker), ms(t.api), ms(f.server), ms(f.ours()),
			runtime.NumCPU(), float64(runtime.NumCPU())*float64(time.Second)/float64(perTurn))
	}
	for _, ld := range r.Load {
		if ld.Err != "" {
			fmt.Fprintf(&s, "On %s, the decision path under load did not finish (%s). ", ld.Server, firstLine(ld.Err))
		}
		for i := range ld.Floor {
			fl, tg := ld.Floor[i], ld.Tollgate[i]
			lat, tps := ratio(tg.Latency.Result.p50, fl.Latency.Result.p50), tg.TurnsPerSec/fl.TurnsPerSec
			if ratioCell(lat) == "—" || ratioCell(tps) == "—" {
				fmt.Fprintf(&s, "On %s at %d turns at a time, too few turns ran for a ratio. ", ld.Server, fl.Concurrency)
				continue
			}
			fmt.Fprintf(&s, "On %s at %d turns at a time against the same-shape floor, approve → `tool_result` is %.2fx at p50 (goal %.2fx: %s) and turns a second %.2fx (goal %.2fx: %s)",
				ld.Server, fl.Concurrency, lat, loadLatencyGoal, metGoal(lat <= loadLatencyGoal), tps, loadThroughputGoal, metGoal(tps >= loadThroughputGoal))
			if i < len(ld.Indexed) {
				x := ld.Indexed[i]
				fmt.Fprintf(&s, "; against the floor keeping tollgate's search attributes, %.2fx and %.2fx", ratio(tg.Latency.Result.p50, x.Latency.Result.p50), tg.TurnsPerSec/x.TurnsPerSec)
			}
			s.WriteString(". ")
		}
	}
	for _, sc := range []scaleResult{r.Scale, r.ScaleDev} {
		if sc.Waiting == 0 {
			continue
		}
		server := "the Temporal server on PostgreSQL"
		if sc.OnDev {
			server = "make dev's dev server"
		}
		if sc.Err != "" {
			fmt.Fprintf(&s, "The scale stage on %s did not finish (%s). ", server, firstLine(sc.Err))
		}
		fmt.Fprintf(&s, "With %d turns waiting at once on %s, the worker held %.0f KiB of heap per turn in its cache and %.1f KiB per turn evicted from it, the API %.1f KiB per waiting turn",
			sc.Waiting, server, sc.Cached.Heap/1024, sc.Evicted.Heap/1024, sc.API.Heap/1024)
		for _, l := range sc.Lists {
			if l.Requests > 0 {
				fmt.Fprintf(&s, "; `GET /approvals%s` took %.0f ms at p50", strings.TrimPrefix(l.Kind, "(unfiltered)"), ms(l.Latency.p50))
			}
		}
		if sc.Decided > 0 {
			fmt.Fprintf(&s, "; after a worker restart, %d decisions took %s (%.1f a second) and every turn had finished %s after the first",
				sc.Decided, sc.DecideAll.Round(time.Second), float64(sc.Decided)/sc.DecideAll.Seconds(), sc.Resumed.Round(time.Second))
		}
		s.WriteString(". ")
	}
	f := r.FanOut
	fmt.Fprintf(&s, "Watching costs the API one poller per turn, not per client: %d and %d clients caused %d and %d events queries to connect and %.1f and %.1f per second while the turns waited, ",
		f.Clients[0], f.Clients[1], f.ConnectQueries[0], f.ConnectQueries[1], f.IdleQPS[0], f.IdleQPS[1])
	fmt.Fprintf(&s, "an idle stream costs about %.0f KiB of heap and %.0f KiB of stack, ", f.HeapPerStream/1024, f.StackPerStream/1024)
	fmt.Fprintf(&s, "and an approved turn's `tool_result` reached its %d watching clients in %.1f ms at p50 (%.1f ms with one client each). ",
		f.Watched.PerTurn, ms(f.Watched.Latency.p50), ms(f.Control.Latency.p50))
	for _, h := range r.History {
		if h.Goal > 0 {
			fmt.Fprintf(&s, "A turn of %s leaves %d history events (%d KiB; goal at most %d: %s). ", h.Shape, h.TurnEvents, h.TurnBytes>>10, h.Goal, metGoal(h.TurnEvents <= h.Goal))
		}
	}
	s.WriteString(r.sandboxVerdict())
	s.WriteString(r.backtestVerdict())
	in, st := r.LongTurn[0], r.LongTurn[1]
	fmt.Fprintf(&s, "A long turn of %d steps got through %d of them with its payloads inline and %d with the payload store, whose history held %d KiB against %d KiB inline.",
		longTurnSteps, in.steps, st.steps, st.historyBytes>>10, in.historyBytes>>10)
	return s.String()
}

// writeReport writes the latest run, md, to path: the run it replaces
// becomes the run before (and the one before that goes), and the notes after
// notesMarker stay.
func writeReport(path, md string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	text := string(old)
	var b strings.Builder
	b.WriteString(fileHeader)
	writeRun(&b, latestMarker, "The latest run", md)
	if before, ok := runBody(text, latestMarker); ok {
		writeRun(&b, beforeMarker, "The run before", before)
	}
	b.WriteString(notesMarker + "\n")
	if _, notes, ok := strings.Cut(text, notesMarker); ok {
		b.WriteString(strings.TrimLeft(notes, "\n"))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeRun writes one run's block: its marker, its heading, md, the end.
func writeRun(b *strings.Builder, marker, heading, md string) {
	fmt.Fprintf(b, "%s\n## %s\n\n%s\n%s\n\n", marker, heading, strings.TrimSpace(md), runEnd)
}

// runBody is the report inside the block that marker opens, without its
// heading.
func runBody(text, marker string) (string, bool) {
	_, rest, ok := strings.Cut(text, marker)
	if !ok {
		return "", false
	}
	rest = strings.TrimLeft(rest, "\n")
	if strings.HasPrefix(rest, "## ") {
		_, rest, _ = strings.Cut(rest, "\n")
	}
	body, _, _ := strings.Cut(rest, runEnd)
	return strings.TrimSpace(body), true
}

// historyMarkdown is the section of the history per turn shape.
func (r *report) historyMarkdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("### History per turn shape")
	p("")
	p("One turn of each shape on the run's dev server, with tollgate's defaults (the audit ledger on, a")
	p("SQLite file); the long answers stream from the scripted model at a word a millisecond. Bytes are")
	p("the turn's history as GetWorkflowExecutionHistory returns it. Temporal warns at %d events in one", historyLimit)
	p("history; the goals are issue 28's (item 2).")
	p("")
	p("| turn | events | bytes | goal | decided by a person | model calls | tool calls | token signals | `token` events | conversation's events |")
	p("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, h := range r.History {
		goal := "—"
		if h.Goal > 0 {
			goal = fmt.Sprintf("≤%d: %s", h.Goal, goalCell(float64(h.TurnEvents), h.TurnEvents <= h.Goal))
		}
		p("| %s | %d | %.1f KiB | %s | %d | %d | %d | %d | %d | %d |", h.Shape, h.TurnEvents, float64(h.TurnBytes)/1024, goal,
			h.Approvals, h.ModelCalls, h.ToolCalls, h.TokenSignals, h.TokenEvents, h.ConvEvents)
	}
	in, st := r.LongTurn[0], r.LongTurn[1]
	if st.events > 0 {
		p("| a long turn: %d steps of %d Reads of %d KiB files, payloads inline | %d | %.1f KiB | — | 0 | | | | | |", longTurnSteps, longTurnReads, longTurnFileSize>>10, in.events, float64(in.historyBytes)/1024)
		p("| the same long turn with the payload store | %d | %.1f KiB | — | 0 | | | | | |", st.events, float64(st.historyBytes)/1024)
	}
	p("")
	if r.HistoryApproved > 0 {
		p("The approved call of the latency runs above (the median one) had %d events.", r.HistoryApproved)
		p("")
	}
	return b.String()
}

// stagesMarkdown is how long each stage of the run took.
func (r *report) stagesMarkdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("### How long the run took")
	p("")
	p("| stage | took |")
	p("|---|---:|")
	for _, st := range r.Stages {
		p("| %s | %s |", st.Name, st.Took.Round(time.Second))
	}
	p("| **all of them** | **%s** |", r.Took.Round(time.Second))
	p("")
	p("Before the first stage, the build of the worker and the API and the dev server's start; the")
	p("PostgreSQL server starts in the load stage, and its Temporal server with it.")
	p("")
	return b.String()
}
