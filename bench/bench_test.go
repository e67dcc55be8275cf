package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
)

// Environment of the benchmark.
const (
	// envBenchOut names the markdown file the benchmark writes its report
	// to; `make bench` sets it to bench/RESULTS.md.
	envBenchOut = "TOLLGATE_BENCH_OUT"
	// envBenchRuns overrides benchRuns, for a quick try.
	envBenchRuns = "TOLLGATE_BENCH_RUNS"
)

// waitingTurns is waitingN, or $TOLLGATE_BENCH_WAITING.
func waitingTurns(b *testing.B) int {
	v := os.Getenv(envBenchWaiting)
	if v == "" {
		return waitingN
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < waitingLeast {
		b.Fatalf("%s=%q: want a number of %d or more", envBenchWaiting, v, waitingLeast)
	}
	return n
}

// loadLevelsOf is loadLevels, or with twice $TOLLGATE_BENCH_LOAD_TURNS
// turns a client at every level.
func loadLevelsOf(tb testing.TB) []loadLevel {
	v := os.Getenv(envBenchLoadTurns)
	if v == "" {
		return loadLevels
	}
	k, err := strconv.Atoi(v)
	if err != nil || k < 1 {
		tb.Fatalf("%s=%q: want a number of 1 or more", envBenchLoadTurns, v)
	}
	out := make([]loadLevel, len(loadLevels))
	for i, l := range loadLevels {
		out[i] = loadLevel{concurrency: l.concurrency, turns: 2 * k * l.concurrency}
	}
	return out
}

// BenchmarkScale runs the scale stage of BenchmarkTollgate alone and logs
// its section of the report on standard output, for a try of the waiting
// turns and the watchers without the rest; it writes no file.
//
//	go test -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -timeout 40m ./bench/
func BenchmarkScale(b *testing.B) {
	waiting := waitingTurns(b)
	sys := startSystem(b)
	for b.Loop() {
		rep := &report{}
		for _, onDev := range []bool{false, true} {
			res, err := sys.scale(context.Background(), waiting, onDev)
			if err != nil {
				res.Err = err.Error()
				fmt.Fprintf(os.Stderr, "the scale stage (on the dev server: %t): %v\n", onDev, err)
			}
			if onDev {
				rep.ScaleDev = res
			} else {
				rep.Scale = res
			}
		}
		// Standard output: the testing package cuts a benchmark's long log.
		fmt.Println(rep.scaleMarkdown())
	}
}

// BenchmarkSandboxStage runs the sandbox stage of BenchmarkTollgate alone
// (each command's cost plain and sandboxed, and the scripted session with
// and without sandbox: auto) and logs its section of the report on standard
// output; it writes no file.
//
//	go test -run '^$' -bench '^BenchmarkSandboxStage$' -benchtime 1x ./bench/
func BenchmarkSandboxStage(b *testing.B) {
	sys := startSystem(b)
	for b.Loop() {
		fmt.Println((&report{Sandbox: sys.sandboxStage(context.Background())}).sandboxMarkdown())
	}
}

// BenchmarkPolicyBacktest runs the policy backtest stage of
// BenchmarkTollgate alone (a 100,000-row ledger seeded, then the backtest
// timed over all of it) and logs its section of the report on standard
// output; it writes no file. It needs no Temporal.
//
//	go test -run '^$' -bench '^BenchmarkPolicyBacktest$' -benchtime 1x ./bench/
func BenchmarkPolicyBacktest(b *testing.B) {
	for b.Loop() {
		r := &report{Backtest: backtestStage(context.Background(), b.TempDir())}
		fmt.Println(r.backtestMarkdown())
		fmt.Println(r.backtestVerdict())
	}
}

// BenchmarkHistory runs the history stage of BenchmarkTollgate alone (a
// turn of each shape) and logs its section of the report on standard
// output; it writes no file.
//
//	go test -run '^$' -bench '^BenchmarkHistory$' -benchtime 1x ./bench/
func BenchmarkHistory(b *testing.B) {
	sys := startSystem(b)
	for b.Loop() {
		res, err := sys.env.historyShapes(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		fmt.Println((&report{History: res}).historyMarkdown())
	}
}

// BenchmarkLoad runs the decision path under load alone (the same-shape
// floor and tollgate at each of loadLevels, after a warm-up, on a dev
// server and on the Temporal server on PostgreSQL) and logs its section of
// the report on standard output, for an A/B of a change to the decision
// path; it writes no file.
//
//	go test -run '^$' -bench '^BenchmarkLoad$' -benchtime 1x -timeout 40m ./bench/
func BenchmarkLoad(b *testing.B) {
	sys := startSystem(b)
	for b.Loop() {
		res, err := sys.loads(context.Background(), loadLevelsOf(b))
		if err != nil {
			b.Fatal(err)
		}
		fmt.Println((&report{Load: res}).loadMarkdown())
	}
}

// BenchmarkTollgate measures tollgate against the raw Temporal floor, and
// the history of a long turn with and without the payload store, and
// writes the report to $TOLLGATE_BENCH_OUT when set. Run it once:
//
//	go test -run '^$' -bench '^BenchmarkTollgate$' -benchtime 1x ./bench/
func BenchmarkTollgate(b *testing.B) {
	runs := benchRuns
	if v := os.Getenv(envBenchRuns); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			b.Fatalf("%s=%q: want a number of 2 or more", envBenchRuns, v)
		}
		runs = n
	}
	waiting := waitingTurns(b)
	rep := &report{Date: time.Now(), Runs: runs, LoadBefore: loadAverage()}
	sys := startSystem(b)
	e := sys.env
	b.Cleanup(func() {
		if n := e.floor.queryErrors.Load(); n > 0 {
			b.Logf("the floor's events queries failed %d times, each read again; the last: %v", n, e.floor.lastQueryErr.Load())
		}
	})
	ctx := context.Background()
	// stage times each stage, into the report and the log as it ends.
	stage := func(name string, f func() error) {
		start := time.Now()
		err := f()
		rep.Stages = append(rep.Stages, stageTime{Name: name, Took: time.Since(start)})
		// Standard error as well, as it ends: the testing package prints a
		// benchmark's log only when the benchmark ends.
		fmt.Fprintf(os.Stderr, "bench: stage %q took %s\n", name, time.Since(start).Round(time.Second))
		b.Logf("stage %q took %s", name, time.Since(start).Round(time.Second))
		if err != nil {
			b.Fatal(err)
		}
	}
	runStart := time.Now()
	for range b.N {
		b.Log("warming up")
		for i := range benchWarmup {
			if _, err := e.floorTurn(ctx, fmt.Sprintf("warm-%d", i)); err != nil {
				b.Fatal(err)
			}
			if _, err := e.tollgateTurn(ctx, fmt.Sprintf("warm-%d", i)); err != nil {
				b.Fatal(err)
			}
		}

		b.Logf("latency: %d turns of each, one at a time, alternating", runs)
		var floor, tg []turnSample
		var floorTime, tgTime time.Duration
		queriesBefore, err := e.apiMetrics.count(ctx, metricEventQueries)
		if err != nil {
			b.Fatal(err)
		}
		for i := range runs {
			s, err := e.floorTurn(ctx, fmt.Sprintf("seq-%d", i))
			if err != nil {
				b.Fatal(err)
			}
			floor, floorTime = append(floor, s), floorTime+s.total
			s, err = e.tollgateTurn(ctx, fmt.Sprintf("seq-%d", i))
			if err != nil {
				b.Fatal(err)
			}
			tg, tgTime = append(tg, s), tgTime+s.total
		}
		queriesAfter, err := e.apiMetrics.count(ctx, metricEventQueries)
		if err != nil {
			b.Fatal(err)
		}
		rep.QueriesPerTurn = float64(queriesAfter-queriesBefore) / float64(runs)
		rep.Floor.Request, rep.Tollgate.Request = latencies(floor, requestLatency), latencies(tg, requestLatency)
		rep.Floor.Result, rep.Tollgate.Result = latencies(floor, resultLatency), latencies(tg, resultLatency)
		rep.Floor.TurnsPerSec1 = float64(runs) / floorTime.Seconds()
		rep.Tollgate.TurnsPerSec1 = float64(runs) / tgTime.Seconds()

		b.Log("where the time goes")
		if rep.Breakdown, err = breakdown(ctx, e.temporal, floor, tg, ""); err != nil {
			b.Fatal(err)
		}
		median := medianSample(tg, requestLatency)
		if rep.Timeline, err = timeline(ctx, e.temporal, median); err != nil {
			b.Fatal(err)
		}
		if rep.HistoryApproved, err = historyLength(ctx, e.temporal, median.workflowID); err != nil {
			b.Fatal(err)
		}

		b.Logf("throughput: %d turns of each, %d at a time", benchBurstTurns, benchConcurrency)
		for _, side := range []struct {
			name  string
			stats *pathStats
			turn  func(context.Context, string) (turnSample, error)
		}{{"floor", &rep.Floor, e.floorTurn}, {"tollgate", &rep.Tollgate, e.tollgateTurn}} {
			cpu0, err := e.readCPU(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if side.stats.TurnsPerSec20, side.stats.Burst, err = burst(ctx, side.name, side.turn); err != nil {
				b.Fatal(err)
			}
			cpu1, err := e.readCPU(ctx)
			if err != nil {
				b.Fatal(err)
			}
			side.stats.CPU = cpu1.sub(cpu0).div(benchBurstTurns)
		}

		rep.Stages = append(rep.Stages, stageTime{Name: "warm-up, latency, throughput (dev server)", Took: time.Since(runStart)})
		fmt.Fprintf(os.Stderr, "bench: stage %q took %s\n", rep.Stages[0].Name, rep.Stages[0].Took.Round(time.Second))

		levels := loadLevelsOf(b)
		b.Logf("the decision path under load: the same-shape floor and tollgate at %v", levels)
		stage("the decision path under load (dev server, then PostgreSQL)", func() (err error) {
			rep.Load, err = sys.loads(ctx, levels)
			return err
		})

		b.Logf("fan-out: %d clients on %d paused turns", fanClients, fanTurns)
		stage("fan-out", func() (err error) {
			rep.FanOut, err = e.fanOut(ctx)
			return err
		})

		b.Log("history per turn shape")
		stage("history per turn shape", func() (err error) {
			rep.History, err = e.historyShapes(ctx)
			return err
		})

		b.Logf("a long turn: %d steps of %d Reads, inline and with the payload store", longTurnSteps, longTurnReads)
		stage("a long turn, inline and with the payload store", func() (err error) {
			rep.LongTurn, err = sys.longTurns(ctx)
			return err
		})

		b.Log("the Bash sandbox: its cost per command, and a session with and without sandbox: auto")
		stage("the Bash sandbox", func() error {
			// A machine without the sandbox, or a stage that fails, says
			// so in the report; the run goes on.
			rep.Sandbox = sys.sandboxStage(ctx)
			return nil
		})

		b.Logf("the policy backtest of a %d-row ledger", backtestRows)
		stage("the policy backtest", func() error {
			// A backtest that fails says so in the report; the run goes on.
			rep.Backtest = backtestStage(ctx, b.TempDir())
			return nil
		})

		sz := sizesFor(waiting)
		b.Logf("scale: %d waiting turns, and %d watchers on %d and on %d turns", waiting, sz.Clients, sz.FewTurns, sz.ManyTurns)
		for _, onDev := range []bool{false, true} {
			name, into := "thousands waiting (PostgreSQL)", &rep.Scale
			if onDev {
				name, into = "thousands waiting (make dev's dev server)", &rep.ScaleDev
			}
			stage(name, func() error {
				// A scale run that cannot hold says why in the report; the
				// run goes on to write it.
				res, err := sys.scale(ctx, waiting, onDev)
				if err != nil {
					res.Err = err.Error()
					b.Logf("%s: %v", name, err)
					fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
				}
				*into = res
				return nil
			})
		}
	}
	rep.Took = time.Since(runStart)
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
	if len(rep.History) > 0 {
		b.ReportMetric(float64(rep.History[0].TurnEvents), "history-events/approved-turn")
	}
	b.ReportMetric(float64(rep.LongTurn[1].historyBytes), "long-turn-history-bytes")
	b.ReportMetric(float64(rep.LongTurn[1].storeBytes), "long-turn-store-bytes")

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

// system is everything a run starts: the dev server, the binaries, the
// scripted model, tollgate and the floor.
type system struct {
	tb testing.TB
	// address and namespace are where Temporal is: the run's dev server,
	// or the scale stage's Temporal server.
	address, namespace string
	// compression is how tollgate's processes there compress their
	// requests (config.EnvGRPCCompression): see compressionOn.
	compression string
	client      client.Client
	bins        binaries
	env         *env
	// modelURL and workspace are the main tollgate's, for the scale runs'
	// tollgate of their own.
	modelURL, workspace string
	// cl is the Temporal server on PostgreSQL that the load and scale
	// stages share, started by the first that needs it.
	cl *cluster
}

// cluster is a Temporal server on PostgreSQL, configured as
// docker-compose.yml configures it, and a client of it.
type cluster struct {
	server proctest.TemporalServer
	pg     proctest.Postgres
	client client.Client
}

// cluster starts the run's Temporal server on PostgreSQL, once.
func (s *system) cluster() (*cluster, error) {
	if s.cl != nil {
		return s.cl, nil
	}
	pg := proctest.StartPostgres(s.tb, "temporal")
	ts := proctest.StartTemporalServer(s.tb, pg)
	c, err := dialQuietly(ts.HostPort, ts.Namespace, onCluster)
	if err != nil {
		return nil, err
	}
	s.tb.Cleanup(c.Close)
	s.cl = &cluster{server: ts, pg: pg, client: c}
	return s.cl, nil
}

// cpu is the CPU time the cluster's Temporal server and PostgreSQL have
// used so far.
func (cl *cluster) cpu() time.Duration {
	t, g := processCPU(cl.server.Process.Cmd.Process.Pid), groupCPU(cl.pg.PID)
	if t < 0 || g < 0 {
		return -1
	}
	return t + g
}

// Where a stage's Temporal server runs, for compressionOn.
const (
	onDevServer = false
	onCluster   = true
)

// compressionOn is how tollgate's processes and the benchmark's clients
// compress their requests to a Temporal server (config.EnvGRPCCompression):
// on a dev server, none, as `make dev` runs tollgate beside its dev server
// (scripts/dev.sh); on the cluster, gzip, tollgate's default, as
// docker-compose.yml runs it. The floor's connections compress as
// tollgate's do, so that the two sides pay alike.
func compressionOn(cluster bool) string {
	if cluster {
		return config.GRPCCompressionGzip
	}
	return config.GRPCCompressionNone
}

// The benchmark's clients gzip at gzip's fastest level, as tollgate's
// worker and API do (config.FastGzip): on the cluster, the floor's
// requests cost what tollgate's cost.
func init() { config.FastGzip() }

// dialQuietly connects a client without a log, compressing as tollgate
// does on that server (compressionOn).
func dialQuietly(hostPort, namespace string, cluster bool) (client.Client, error) {
	opts := client.Options{HostPort: hostPort, Namespace: namespace, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))}
	if compressionOn(cluster) == config.GRPCCompressionNone {
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	}
	return client.Dial(opts)
}

// loads runs the decision path under load twice: on a tuned dev server of
// its own, where tollgate's own costs show most (the server dispatches in
// milliseconds), and on the cluster, as a deployment runs. A dev server
// keeps its database behind one SQLite connection; the release's SQLite
// driver left it interrupting every statement once 50 turns at a time had
// a query cancelled at the wrong moment (third_party/temporal-cli). A
// server that stops answering is reported with its error, and the run
// goes on.
func (s *system) loads(ctx context.Context, levels []loadLevel) ([]loadResult, error) {
	// The stage's own dev server stops when the stage ends: two dev
	// servers' databases on one machine slow each other down.
	ds, err := devserver.Run(devserver.Options{Dir: s.tb.TempDir()})
	if err != nil {
		return nil, err
	}
	defer ds.Stop()
	dc, err := dialQuietly(ds.HostPort, ds.Namespace, onDevServer)
	if err != nil {
		return nil, err
	}
	defer dc.Close()
	pid := findServerPID(ds.HostPort)
	dev := s.loadOn(ctx, levels, "a tuned dev server (SQLite) of its own", ds.HostPort, ds.Namespace, onDevServer, dc, func() time.Duration { return processCPU(pid) })
	cl, err := s.cluster()
	if err != nil {
		return nil, err
	}
	return []loadResult{dev, s.loadOn(ctx, levels, "the Temporal server on PostgreSQL, as docker-compose.yml configures it", cl.server.HostPort, cl.server.Namespace, onCluster, cl.client, cl.cpu)}, nil
}

// loadOn runs the decision path under load on the Temporal server at
// address: a tollgate of its own and the same-shape floor's worker, each
// with a connection of its own, warmed up first. A failure is the result's
// Err.
func (s *system) loadOn(ctx context.Context, levels []loadLevel, server, address, namespace string, cluster bool, c client.Client, serverCPU func() time.Duration) loadResult {
	res, err := func() (loadResult, error) {
		own := &system{tb: s.tb, address: address, namespace: namespace, compression: compressionOn(cluster), client: c, bins: s.bins}
		queue := "load-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
		tg := own.startTollgate(queue, s.workspace, s.modelURL)
		defer tg.stop(s.tb)
		fc, err := dialQuietly(address, namespace, cluster)
		if err != nil {
			return loadResult{}, err
		}
		defer fc.Close()
		w, err := startFloorWorker(fc, queue+"-floor", s.workspace, s.modelURL)
		if err != nil {
			return loadResult{}, err
		}
		defer w.Stop()
		e := &env{temporal: c, api: tg.api, apiMetrics: tg.apiMetrics, worker: tg.workerMetrics,
			floorQueue: queue + "-floor", floor: &floorReader{client: c}, run: s.env.run, serverCPU: serverCPU, tollgateCPU: tg.cpu, tails: new(errgroup.Group)}
		for i := range benchWarmup {
			if _, err := e.shapedFloorTurn(ctx, fmt.Sprintf("warm-%d", i)); err != nil {
				return loadResult{}, err
			}
			if _, err := e.indexedFloorTurn(ctx, fmt.Sprintf("warm-indexed-%d", i)); err != nil {
				return loadResult{}, err
			}
			if _, err := e.tollgateTurn(ctx, fmt.Sprintf("warm-%d", i)); err != nil {
				return loadResult{}, err
			}
		}
		res, err := e.decisionPathUnderLoad(ctx, levels)
		if err != nil {
			err = fmt.Errorf("%w%s", err, tg.problems())
		}
		return res, err
	}()
	res.Server = server
	if err != nil {
		// Whole, on standard error too: the testing package keeps only the
		// first ten lines of a benchmark's log, and the worker's and the
		// API's warnings come after them.
		s.tb.Logf("the decision path under load on %s: %v", server, err)
		fmt.Fprintf(os.Stderr, "the decision path under load on %s: %v\n", server, err)
		res.Err = err.Error()
	}
	return res
}

// binaries are tollgate's worker and API, built from this tree.
type binaries struct{ worker, api string }

// startSystem builds the binaries while a tuned dev server starts, then
// starts the model, tollgate's worker and API, and the floor's worker.
func startSystem(tb testing.TB) *system {
	tb.Helper()
	buildWorker := proctest.Build(tb, "github.com/tollgate/tollgate/worker")
	buildAPI := proctest.Build(tb, "github.com/tollgate/tollgate/api")
	ts := devserver.ForTest(tb)
	c, err := dialQuietly(ts.HostPort, ts.Namespace, onDevServer)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	sys := &system{tb: tb, address: ts.HostPort, namespace: ts.Namespace, compression: compressionOn(onDevServer), client: c, bins: binaries{worker: buildWorker(), api: buildAPI()}}

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
	sys.modelURL, sys.workspace = model.URL, workspace
	tg := sys.startTollgate("tollgate-bench", workspace, model.URL)
	floorQueue := "tollgate-bench-floor"
	// The floor's worker has a connection of its own, as tollgate's worker
	// (a process of its own) does: its polls and task completions do not
	// share one with the floor's clients and reader.
	fc, err := dialQuietly(ts.HostPort, ts.Namespace, onDevServer)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(fc.Close)
	w, err := startFloorWorker(fc, floorQueue, workspace, model.URL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(w.Stop)
	pid := findServerPID(ts.HostPort)
	sys.env = &env{
		temporal:    c,
		api:         tg.api,
		apiMetrics:  tg.apiMetrics,
		worker:      tg.workerMetrics,
		floorQueue:  floorQueue,
		floor:       &floorReader{client: c},
		run:         strconv.FormatInt(time.Now().UnixNano()%1e9, 36),
		serverCPU:   func() time.Duration { return processCPU(pid) },
		tollgateCPU: tg.cpu,
		tails:       new(errgroup.Group),
	}
	return sys
}

// tollgate is a worker and an API, the binaries, on a task queue of their
// own.
type tollgate struct {
	worker, apiProcess *proctest.Process
	// workerName and workerEnv start the worker again after a crash.
	workerName                string
	workerEnv                 []string
	api                       apiClient
	apiMetrics, workerMetrics metricsReader
}

// startTollgate starts a worker and an API on queue with the variables of
// internal/config: their defaults, but for where Temporal, the model, the
// workspace and the payload store are, and extra ("NAME=value" each; they
// come last, so they win).
// It returns once the API is healthy and the worker polls.
func (s *system) startTollgate(queue, workspace, modelURL string, extra ...string) *tollgate {
	tb := s.tb
	tb.Helper()
	common := append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_", "OTEL_", config.EnvHTTPAddr+"="),
		config.EnvTemporalAddress+"="+s.address,
		config.EnvTemporalNamespace+"="+s.namespace,
		config.EnvTaskQueue+"="+queue,
		// The worker and the API must use the same store and ledger, the
		// run's own.
		config.EnvPayloadDir+"="+tb.TempDir(),
		config.EnvAuditDB+"="+filepath.Join(tb.TempDir(), "audit.db"),
		config.EnvGRPCCompression+"="+s.compression,
	)
	common = append(common, extra...)
	workerAddr, apiAddr := proctest.FreeAddr(tb), proctest.FreeAddr(tb)
	workerEnv := append(common[:len(common):len(common)],
		config.EnvWorkspace+"="+workspace,
		config.EnvOpenAIBaseURL+"="+modelURL+"/v1",
		config.EnvOpenAIAPIKey+"=bench",
		config.EnvOpenAIModel+"="+scripted.ModelName,
		config.EnvMetricsAddr+"="+workerAddr,
		config.EnvMCPConfig+"="+config.MCPOff,
	)
	apiEnv := append(common[:len(common):len(common)], config.EnvHTTPAddr+"="+apiAddr)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	tg := &tollgate{
		worker:        proctest.Start(tb, queue+"-worker", s.bins.worker, workerEnv),
		workerName:    queue + "-worker",
		workerEnv:     workerEnv,
		apiProcess:    proctest.Start(tb, queue+"-api", s.bins.api, apiEnv),
		api:           apiClient{base: "http://" + apiAddr, http: hc},
		apiMetrics:    metricsReader{url: "http://" + apiAddr + "/metrics", http: hc},
		workerMetrics: metricsReader{url: "http://" + workerAddr + "/metrics", http: hc},
	}

	ctx := context.Background()
	err := waitUntil(ctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, tg.api.base+"/healthz", nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil // not listening yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		tb.Fatalf("the API on %s is not healthy: %v", queue, err)
	}
	err = waitUntil(ctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		q, err := s.client.DescribeTaskQueue(ctx, queue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err != nil {
			return false, err
		}
		return len(q.GetPollers()) > 0, nil
	})
	if err != nil {
		tb.Fatalf("no worker polls %s: %v", queue, err)
	}
	if _, err := tg.workerMetrics.read(ctx); err != nil {
		tb.Fatalf("the worker on %s serves no metrics: %v", queue, err)
	}
	return tg
}

// cpu is the CPU time the worker and the API have used so far, from /proc
// (-1 each where it cannot tell); a worker started again counts from zero.
func (t *tollgate) cpu() (worker, api time.Duration) {
	return processCPU(t.worker.Cmd.Process.Pid), processCPU(t.apiProcess.Cmd.Process.Pid)
}

// problems are the last warnings and errors the worker and the API
// logged, to say why a stage failed.
func (t *tollgate) problems() string {
	var b strings.Builder
	for _, p := range []*proctest.Process{t.worker, t.apiProcess} {
		var lines []string
		for line := range strings.Lines(p.Log()) {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				lines = append(lines, line)
			}
		}
		fmt.Fprintf(&b, "\n--- the last of %d warnings and errors of %s ---\n%s", len(lines), p.Name, strings.Join(lines[max(len(lines)-10, 0):], ""))
	}
	return b.String()
}

// stop stops the worker and the API, as a deployment does.
func (t *tollgate) stop(tb testing.TB) {
	t.apiProcess.Stop(tb)
	t.worker.Stop(tb)
}

// longTurns runs the long turn with its payloads inline and with the
// payload store, each on a worker and an API of its own on the run's dev
// server.
func (s *system) longTurns(ctx context.Context) ([2]longTurnResult, error) {
	var out [2]longTurnResult
	workspace := s.tb.TempDir()
	if err := writeLongTurnFiles(workspace); err != nil {
		return out, err
	}
	model := httptest.NewServer(scripted.New(longTurnScript))
	defer model.Close()
	maxSteps := config.EnvMaxSteps + "=" + strconv.Itoa(longTurnMaxSteps)
	for i, way := range []struct {
		name  string
		extra []string
	}{
		{"inline", []string{config.EnvPayloadThreshold + "=" + strconv.Itoa(longTurnInline)}},
		{"store", nil},
	} {
		// The queue names the turn's conversation too, which may not hold
		// "-turn-".
		queue := "longturn-" + way.name + "-" + s.env.run
		storeDir := s.tb.TempDir()
		tg := s.startTollgate(queue, workspace, model.URL, append(way.extra, maxSteps, config.EnvPayloadDir+"="+storeDir)...)
		r, err := runLongTurn(ctx, s.client, tg.api, queue, storeDir)
		tg.stop(s.tb)
		if err != nil {
			return out, fmt.Errorf("long turn %s: %w", way.name, err)
		}
		out[i] = r
	}
	return out, nil
}

// sandboxStage runs the sandbox stage, whose failure is the result's Err,
// logged.
func (s *system) sandboxStage(ctx context.Context) sandboxResult {
	res, err := s.sandbox(ctx)
	if err != nil {
		res.Err = err.Error()
		s.tb.Logf("the sandbox stage: %v", err)
		fmt.Fprintf(os.Stderr, "the sandbox stage: %v\n", err)
	}
	return res
}

// sandbox runs the sandbox stage: each command's cost, then the sessions.
// A machine where the sandbox cannot start measures nothing and says why
// in Unavailable.
func (s *system) sandbox(ctx context.Context) (sandboxResult, error) {
	if err := activities.BashSandbox(); err != nil {
		return sandboxResult{Unavailable: err.Error()}, nil
	}
	res, err := sandboxCosts(ctx, s.tb.TempDir())
	if err != nil {
		return res, fmt.Errorf("the sandbox's cost per command: %w", err)
	}
	return res, s.sandboxSessions(ctx, &res)
}

// sandboxSessions runs the session without and then with sandbox: auto,
// each on a worker and an API of its own and a fresh workspace, into res.
func (s *system) sandboxSessions(ctx context.Context, res *sandboxResult) error {
	var hits atomic.Int64
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		fmt.Fprintln(w, "reached")
	}))
	defer listener.Close()
	defer func() { res.ListenerHits = hits.Load() }()
	port := listener.Listener.Addr().(*net.TCPAddr).Port
	_, gitErr := exec.LookPath("git")
	commands := sessionCommands(port, gitErr == nil)
	model := httptest.NewServer(scripted.New(sessionScript(commands)))
	defer model.Close()
	cache, err := goCache()
	if err != nil {
		return err
	}
	for i, auto := range []bool{false, true} {
		name := "without `sandbox: auto`"
		if auto {
			name = "with `sandbox: auto`"
		}
		ws := s.tb.TempDir()
		if err := sessionWorkspace(ws, gitErr == nil); err != nil {
			return err
		}
		policy := filepath.Join(s.tb.TempDir(), "policy.yaml")
		if err := os.WriteFile(policy, []byte(sessionPolicy(auto)), 0o644); err != nil {
			return err
		}
		queue := fmt.Sprintf("sandbox-%d-%s", i, s.env.run)
		// The go commands share the worker's build cache, read-only in
		// the sandbox, rather than start from an empty one each run.
		tg := s.startTollgate(queue, ws, model.URL,
			config.EnvBashSandbox+"="+protocol.SandboxPreview,
			config.EnvPolicyFile+"="+policy,
			config.EnvMaxSteps+"="+strconv.Itoa(len(commands)+1),
			config.EnvBashEnv+"=GOCACHE",
			"GOCACHE="+cache)
		r, err := runSession(ctx, tg.api, queue, commands)
		tg.stop(s.tb)
		r.Name = name
		res.Sessions = append(res.Sessions, r)
		if err != nil {
			return fmt.Errorf("the session %s: %w%s", name, err, tg.problems())
		}
	}
	return nil
}

// scale pauses n turns on a tollgate of its own, measures each process's
// memory (with the worker's cache holding all of them, then evicting) and
// GET /approvals at that size, watches some of them with many clients,
// then crashes the worker, starts another and decides the rest. A step that
// fails ends the stage with its error in the result; what it measured
// before stays.
//
// onDev runs it on a fresh dev server with make dev's flags (the CLI make
// temporal builds) instead of the Temporal server on PostgreSQL as
// docker-compose.yml runs it: whether the embedded default holds that many
// (issue 28, item 5).
func (s *system) scale(ctx context.Context, n int, onDev bool) (scaleResult, error) {
	sz := sizesFor(n)
	res := scaleResult{scaleSizes: sz, OnDev: onDev}
	queue := "scale-" + s.env.run
	var c client.Client
	var address, namespace string
	var serverLog func() string
	if onDev {
		dir := s.tb.TempDir()
		ds, err := devserver.Run(devserver.Options{Dir: dir})
		if err != nil {
			return res, err
		}
		defer ds.Stop()
		if c, err = dialQuietly(ds.HostPort, ds.Namespace, onDevServer); err != nil {
			return res, err
		}
		defer c.Close()
		address, namespace = ds.HostPort, ds.Namespace
		serverLog = func() string {
			b, _ := os.ReadFile(filepath.Join(dir, "temporal.log"))
			return tail(string(b))
		}
	} else {
		cl, err := s.cluster()
		if err != nil {
			return res, err
		}
		ts := cl.server
		c, address, namespace = cl.client, ts.HostPort, ts.Namespace
		serverLog = func() string { return tail(ts.Process.Log()) }
	}
	own := &system{tb: s.tb, address: address, namespace: namespace, compression: compressionOn(!onDev), client: c, bins: s.bins}
	// The turns wait longer than the run takes, so none expires; two
	// principals ask for them, so that they can be listed by principal.
	tg := own.startTollgate(queue, s.workspace, s.modelURL,
		config.EnvApprovalTimeout+"="+scaleApprovalTimeout.String(),
		config.EnvWorkflowCacheSize+"="+strconv.Itoa(sz.Cache),
		config.EnvAPITokens+"="+scaleAliceToken+":"+scaleAlice+","+scaleBobToken+":"+scaleBob)
	defer tg.stop(s.tb)
	api, apiMetrics := tg.api, tg.apiMetrics
	api.token, apiMetrics.token = scaleAliceToken, scaleAliceToken
	e := &env{temporal: c, api: api, apiMetrics: apiMetrics, worker: tg.workerMetrics, run: s.env.run, tails: new(errgroup.Group)}
	logs := func(err error) error {
		return fmt.Errorf("%w\nthe worker's log ends:\n%s\nthe API's log ends:\n%s\nthe Temporal server's log ends:\n%s",
			err, tail(tg.worker.Log()), tail(tg.apiProcess.Log()), serverLog())
	}

	// pause pauses turns [from, to) and reads both processes' memory and
	// the worker's cache once every stream has left.
	pause := func(from, to int) ([]paused, memoryPerUnit, memoryPerUnit, float64, error) {
		turns, err := e.pauseMany(ctx, from, to, scaleAliceToken, scaleBobToken)
		if err != nil {
			return nil, memoryPerUnit{}, memoryPerUnit{}, 0, logs(err)
		}
		if err := e.waitMetric(ctx, metricPollersRunning, 0); err != nil {
			return nil, memoryPerUnit{}, memoryPerUnit{}, 0, fmt.Errorf("pollers of the paused turns did not stop: %w", err)
		}
		w, a, err := e.memoryOfBoth(ctx)
		if err != nil {
			return nil, w, a, 0, err
		}
		sc, err := tg.workerMetrics.read(ctx)
		if err != nil {
			return nil, w, a, 0, err
		}
		return turns, w, a, sc.most(metricStickyCache), nil
	}
	wStart, aStart, err := e.memoryOfBoth(ctx)
	if err != nil {
		return res, err
	}
	// The first few turns warm the worker up (its pools, buffers and
	// connections grow once); the cached turns' cost is over the next.
	start := time.Now()
	warm, w0, _, _, err := pause(0, sz.Warm)
	if err != nil {
		return res, err
	}
	first, w1, _, cached1, err := pause(sz.Warm, sz.CachedFirst)
	if err != nil {
		return res, err
	}
	rest, w2, a2, cached2, err := pause(sz.CachedFirst, n)
	if err != nil {
		return res, err
	}
	turns := slices.Concat(warm, first, rest)
	res.PauseTime = time.Since(start)
	res.Worker, res.API = w2.sub(wStart).div(n), a2.sub(aStart).div(n)
	res.Cached = w1.sub(w0).div(sz.CachedFirst - sz.Warm)
	res.CacheAt = [2]float64{cached1, cached2}
	// The further turns the cache took (two workflows each) cost what the
	// first did; the rest is what an evicted turn costs.
	tookIn := max(0, (cached2-cached1)/2)
	if evicted := float64(n-sz.CachedFirst) - tookIn; evicted > 0 {
		g := w2.sub(w1)
		res.Evicted = memoryPerUnit{RSS: (g.RSS - tookIn*res.Cached.RSS) / evicted, Heap: (g.Heap - tookIn*res.Cached.Heap) / evicted}
	}

	res.Lists = e.timeLists(ctx, turns)
	res.Paging = e.pageThrough(ctx)

	few, many := turns[:sz.FewTurns], turns[sz.FewTurns:sz.FewTurns+sz.ManyTurns]
	for i, ts := range [][]paused{few, many} {
		if res.Watch[i], err = e.watchRun(ctx, ts, sz.perTurn(len(ts)), sz.Decisions); err != nil {
			return res, fmt.Errorf("%d clients on %d turns: %w", sz.perTurn(len(ts))*len(ts), len(ts), err)
		}
	}
	// The turns the watch runs did not decide.
	left := slices.Concat(few[sz.Decisions:], many[sz.Decisions:], turns[sz.FewTurns+sz.ManyTurns:])

	// The worker dies with its cache full; a new one must replay each
	// turn to take its decision.
	crashed := tg.worker.Crash(s.tb)
	tg.worker = proctest.Start(s.tb, tg.workerName, s.bins.worker, tg.workerEnv)
	if err := waitUntil(ctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := tg.workerMetrics.read(ctx)
		return err == nil, nil
	}); err != nil {
		return res, fmt.Errorf("the restarted worker serves no metrics: %w", err)
	}
	res.Restart = time.Since(crashed)
	res.Decided = len(left)
	res.DecideAll, res.Resumed, res.Retried, err = e.decideAll(ctx, left)
	if err != nil {
		return res, logs(err)
	}
	return res, nil
}
