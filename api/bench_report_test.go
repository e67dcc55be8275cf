package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"time"
)

// benchReport is everything BenchmarkTollgate measured.
type benchReport struct {
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

	FanOut  fanOutResult
	History []historyCost
}

// pathStats are one side's latencies and throughput.
type pathStats struct {
	Request, Result             summary
	TurnsPerSec1, TurnsPerSec20 float64
	Burst                       burstLatency
	// CPUSelf and CPUServer are the CPU time per turn of the concurrent
	// run: of this process (worker, API, model, clients) and of the dev
	// server (-1 when unknown).
	CPUSelf, CPUServer time.Duration
}

// goalRatio is the goal: tollgate within 1.25x of the floor at p50.
const goalRatio = 1.25

// notesMarker separates the generated report from notes written by hand,
// which writeReport keeps.
const notesMarker = "<!-- Notes below this line are written by hand; `make bench` keeps them. -->"

func (r *benchReport) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	ratio := func(t, f time.Duration) string { return fmt.Sprintf("%.2fx", t.Seconds()/f.Seconds()) }

	p("# tollgate benchmarks")
	p("")
	p("Written by `make bench` (BenchmarkTollgate in `api/bench_test.go`) on %s.", r.Date.UTC().Format("2006-01-02 15:04 MST"))
	p("Machine: %d cores (%s), %s/%s, %s. Load average before / after the run: %s / %s.",
		runtime.NumCPU(), cpuModel(), runtime.GOOS, runtime.GOARCH, runtime.Version(), r.LoadBefore, r.LoadAfter)
	p("One tuned Temporal dev server (`internal/devserver`), one worker in the benchmark's process with")
	p("main's (default) options, the scripted model answering at once (no chunk delay), the API over")
	p("HTTP on loopback with its production settings. The raw floor is `floorWorkflow`: it publishes an")
	p("approval request in a log its events query reads, waits for a signal, runs one activity (the same")
	p("Write tool with the same options as a turn's), publishes the result; it runs on the same worker and")
	p("task queue and is read the way the API reads a turn (history long poll, then the events query).")
	p("%d turns of each, one at a time, floor and tollgate alternating; percentiles are nearest-rank.", r.Runs)
	p("Everything shares the machine's cores.")
	p("")

	p("## tollgate against the raw Temporal floor")
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
	row(fmt.Sprintf("CPU per turn, %d at a time: worker, API, model and clients (one process)", benchConcurrency), r.Floor.CPUSelf, r.Tollgate.CPUSelf)
	if r.Floor.CPUServer > 0 && r.Tollgate.CPUServer > 0 {
		row(fmt.Sprintf("CPU per turn, %d at a time: Temporal dev server", benchConcurrency), r.Floor.CPUServer, r.Tollgate.CPUServer)
	}
	row(fmt.Sprintf("start → `approval_request`, p50 with %d at a time", benchConcurrency), r.Floor.Burst.Request.p50, r.Tollgate.Burst.Request.p50)
	row(fmt.Sprintf("approve → `tool_result`, p50 with %d at a time", benchConcurrency), r.Floor.Burst.Result.p50, r.Tollgate.Burst.Result.p50)
	p("")
	p("A floor turn ends when its result is read (a last signal closes it); a tollgate turn ends at its")
	p("`finish` event, after a second model call that answers \"done\".")
	p("")

	p("### Where the time goes")
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
	p("## Fan-out: %d SSE clients on %d paused turns", f.Clients[1], fanTurns)
	p("")
	p("The clients run in a child process, so the memory below is the API's alone.")
	p("")
	p("| | %d clients (1 per turn) | %d clients (%d per turn) |", f.Clients[0], f.Clients[1], f.Clients[1]/fanTurns)
	p("|---|---:|---:|")
	p("| events queries the API sent as the clients connected (until a second without any) | %d | %d |", f.ConnectQueries[0], f.ConnectQueries[1])
	p("| events queries per second while the turns waited (%s) | %.1f | %.1f |", fanIdle, f.IdleQPS[0], f.IdleQPS[1])
	p("| CPU while the turns waited: worker and API process | %.1f%% of a core | %.1f%% of a core |", 100*f.IdleCPUSelf[0], 100*f.IdleCPUSelf[1])
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

	p("## History cost")
	p("")
	p("Each turn streams a %d-word answer from the scripted model at a word a millisecond, after %d Read",
		historyTokens, historyToolCalls)
	p("calls (unprotected). Temporal warns at %d events in one history.", historyLimit)
	p("")
	p("| turn | events in the turn's history | of the %d warning | model calls | tool calls | token signals | `token` events | conversation's history |", historyLimit)
	p("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, h := range r.History {
		p("| %s | %d | %.1f%% | %d | %d | %d | %d | %d |", strings.TrimPrefix(h.Query, "bench-history: "), h.TurnEvents,
			100*float64(h.TurnEvents)/historyLimit, h.ModelCalls, h.ToolCalls, h.TokenSignals, h.TokenEvents, h.ConvEvents)
	}
	p("")
	p("An approved turn of the latency runs (one model call asking for Write, the approval, Write, a")
	p("second model call) has %d events.", r.HistoryApproved)
	p("")

	p("## What the numbers mean")
	p("")
	p("%s", r.verdict())
	p("")
	return b.String()
}

// verdict says in words what the tables show, computed from them so that it
// is true of every run.
func (r *benchReport) verdict() string {
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
	if r.Tollgate.CPUServer > 0 {
		perTurn := r.Tollgate.CPUServer + r.Tollgate.CPUSelf
		fmt.Fprintf(&s, "Throughput is bound by CPU: a tollgate turn costs %.0f ms of dev-server CPU and %.0f ms in the worker/API process (the floor %.0f and %.0f), so %d cores allow about %.0f turns a second at best. ",
			ms(r.Tollgate.CPUServer), ms(r.Tollgate.CPUSelf), ms(r.Floor.CPUServer), ms(r.Floor.CPUSelf),
			runtime.NumCPU(), float64(runtime.NumCPU())*float64(time.Second)/float64(perTurn))
	}
	f := r.FanOut
	fmt.Fprintf(&s, "Watching costs the API one poller per turn, not per client: %d and %d clients caused %d and %d events queries to connect and %.1f and %.1f per second while the turns waited, ",
		f.Clients[0], f.Clients[1], f.ConnectQueries[0], f.ConnectQueries[1], f.IdleQPS[0], f.IdleQPS[1])
	fmt.Fprintf(&s, "an idle stream costs about %.0f KiB of heap and %.0f KiB of stack, ", f.HeapPerStream/1024, f.StackPerStream/1024)
	fmt.Fprintf(&s, "and an approved turn's `tool_result` reached its %d watching clients in %.1f ms at p50 (%.1f ms with one client each). ",
		f.Watched.PerTurn, ms(f.Watched.Latency.p50), ms(f.Control.Latency.p50))
	if len(r.History) > 0 {
		most := r.History[0]
		for _, h := range r.History {
			if h.TurnEvents > most.TurnEvents {
				most = h
			}
		}
		fmt.Fprintf(&s, "A turn of %d tool calls and a %d-word answer leaves at most %d history events (%.1f%% of the %d warning): token batches are capped, so a long answer costs a handful of signals, not one per word.",
			historyToolCalls, historyTokens, most.TurnEvents, 100*float64(most.TurnEvents)/historyLimit, historyLimit)
	}
	return s.String()
}

// writeReport writes md to path, keeping the hand-written notes after
// notesMarker of the file it replaces.
func writeReport(path, md string) error {
	notes := notesMarker + "\n"
	old, err := os.ReadFile(path)
	switch {
	case err == nil:
		if _, after, ok := strings.Cut(string(old), notesMarker); ok {
			notes += strings.TrimLeft(after, "\n")
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return os.WriteFile(path, []byte(md+notes), 0o644)
}

// cpuModel names the processor, where /proc/cpuinfo says.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(b)) {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimLeft(name, "\t :"))
		}
	}
	return "unknown CPU"
}
