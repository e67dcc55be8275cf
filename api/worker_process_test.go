package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/workflows"
)

// envTestWorker, when set, makes the test binary run a worker instead of its
// tests; its value is a testWorkerSpec in JSON. startTestWorker sets it, so
// that a test can kill a worker whose settings it chose (the worker binary
// takes its settings from the environment, which has no heartbeat knobs).
const envTestWorker = "TOLLGATE_TEST_WORKER"

// envTestAPI, when "1", makes the test binary run the API, as the api
// binary does, from the environment's configuration: a test can kill it.
const envTestAPI = "TOLLGATE_TEST_API"

func TestMain(m *testing.M) {
	if os.Getenv(envTestAPI) == "1" {
		cfg, err := config.LoadFor(config.API, os.Getenv)
		if err == nil {
			err = run(cfg, cfg.Logger(os.Stderr))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "test api:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(envTestWorker); spec != "" {
		if err := runTestWorker(spec); err != nil {
			fmt.Fprintln(os.Stderr, "test worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testWorkerSpec is what a test worker runs: a stack's worker, with its
// tools, the scripted model and the given settings.
type testWorkerSpec struct {
	HostPort  string             `json:"hostPort"`
	Namespace string             `json:"namespace"`
	TaskQueue string             `json:"taskQueue"`
	Workspace string             `json:"workspace"`
	ModelURL  string             `json:"modelUrl"`
	Settings  workflows.Settings `json:"settings"`
	AuditDB   string             `json:"auditDb"`
	// PayloadDir, when set, is the worker's payload store, wired as the
	// worker binary wires it (the store, and LostPayloads).
	PayloadDir string `json:"payloadDir"`
}

// runTestWorker runs the worker that specJSON describes until it is
// interrupted or killed, logging to stderr.
func runTestWorker(specJSON string) error {
	var spec testWorkerSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("%s: %w", envTestWorker, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := client.Options{
		HostPort:  spec.HostPort,
		Namespace: spec.Namespace,
		Logger:    sdklog.NewStructuredLogger(log),
	}
	lost := workflows.NewLostPayloads(log, payloads.MissingKey)
	if spec.PayloadDir != "" {
		opts.ExternalStorage, _, _ = payloads.Storage(payloads.Config{Dir: spec.PayloadDir})
		opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, lost.DialOption())
	}
	c, err := client.Dial(opts)
	if err != nil {
		return fmt.Errorf("dial Temporal at %s: %w", spec.HostPort, err)
	}
	defer c.Close()
	lost.Attach(c)
	w := worker.New(c, spec.TaskQueue, workflows.WorkerOptions())
	workflows.Register(w, &workflows.Workflows{Settings: spec.Settings},
		activities.NewModel(spec.ModelURL, "test", scripted.ModelName, workflows.TokenSignaler{Client: c}),
		stackTools(spec.Workspace))
	if spec.Settings.Audit {
		ledger, err := auditdb.Open(context.Background(), spec.AuditDB)
		if err != nil {
			return err
		}
		defer ledger.Close()
		workflows.RegisterAuditor(w, &activities.Auditor{Ledger: ledger})
	}
	log.Info("test worker started", "taskQueue", spec.TaskQueue, "pid", os.Getpid())
	return w.Run(worker.InterruptCh())
}

// workerSettings are the settings of a stack's worker, changed by change.
func (st *stack) workerSettings(change func(*workflows.Settings)) workflows.Settings {
	s := stackSettings(stackTools(st.workspace), time.Minute)
	if change != nil {
		change(&s)
	}
	return s
}

// startTestWorker runs this test binary as a worker of st (a stack made
// withoutWorker) with settings, as a process of its own that the test may
// kill.
func (st *stack) startTestWorker(t *testing.T, name string, settings workflows.Settings) *proctest.Process {
	t.Helper()
	return st.startTestWorkerWith(t, name, settings)
}

// startTestWorkerWith is startTestWorker with extra variables ("NAME=value")
// in the worker's environment, which win over the test's own.
func (st *stack) startTestWorkerWith(t *testing.T, name string, settings workflows.Settings, extra ...string) *proctest.Process {
	t.Helper()
	spec, err := json.Marshal(testWorkerSpec{
		HostPort:   st.temporal.HostPort,
		Namespace:  st.temporal.Namespace,
		TaskQueue:  st.queue,
		Workspace:  st.workspace,
		ModelURL:   st.model.URL + "/v1",
		Settings:   settings,
		AuditDB:    st.auditDB,
		PayloadDir: st.payloadDir,
	})
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	env := append(append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_"), envTestWorker+"="+string(spec)), extra...)
	return proctest.Start(t, name, exe, env)
}

// startTestAPI runs this test binary as an API instance on st's Temporal
// and task queue, as a process of its own that the test may kill, and
// returns it once it answers GET /healthz, with its base URL.
func (st *stack) startTestAPI(t *testing.T, name string) (*proctest.Process, string) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	addr := proctest.FreeAddr(t)
	p := proctest.Start(t, name, exe, append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_", "HTTP_ADDR", "OTEL_"),
		envTestAPI+"=1",
		config.EnvTemporalAddress+"="+st.temporal.HostPort,
		config.EnvTemporalNamespace+"="+st.temporal.Namespace,
		config.EnvTaskQueue+"="+st.queue,
		config.EnvHTTPAddr+"="+addr,
		config.EnvAuditDB+"="+config.AuditOff,
		config.EnvHeartbeatInterval+"=200ms",
	))
	url := "http://" + addr
	require.Eventually(t, func() bool {
		select {
		case <-p.Exited:
			return true // RequireRunning says why
		default:
		}
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 20*time.Millisecond, "%s answers at %s", name, url)
	proctest.RequireRunning(t, p)
	return p, url
}
