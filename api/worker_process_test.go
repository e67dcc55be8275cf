package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/workflows"
)

// Workers as processes of their own, which a test can kill as a crash would.

// workerProcess is the worker binary running as a process of its own, in
// its own process group.
type workerProcess struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// buildWorker starts building ./worker into the test's temporary folder and
// returns a function that waits for the build and gives the binary.
func buildWorker(t *testing.T) func() string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "worker")
	built := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/tollgate/tollgate/worker").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build ./worker: %w\n%s", err, out)
		}
		built <- err
	}()
	wait := sync.OnceValue(func() error { return <-built })
	t.Cleanup(func() { _ = wait() }) // the build writes into a folder cleanup removes
	return func() string {
		t.Helper()
		require.NoError(t, wait())
		return bin
	}
}

// startWorker runs bin with env. Cleanup kills its process group, waits for
// it, and shows its log when the test failed.
func startWorker(t *testing.T, bin string, env []string, name string) *workerProcess {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own group, so a kill reaches whatever it started (a Bash tool's
	// shell); and killed with the test binary, so nothing outlives a test
	// that times out.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		require.NoError(t, err, "start %s", name)
	}
	w := &workerProcess{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(w.exited)
	}()
	t.Cleanup(func() {
		w.kill(t)
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("--- %s log ---\n%s", name, out)
		}
	})
	return w
}

// kill sends SIGKILL to the worker's process group and waits until the
// worker has been reaped and no process of its group is left. It may be
// called again.
func (w *workerProcess) kill(t *testing.T) {
	t.Helper()
	pgid := w.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-w.exited:
	case <-time.After(waitFor):
		t.Errorf("%s (pid %d) survived SIGKILL", w.name, pgid)
		return
	}
	require.Eventually(t, func() bool {
		return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
	}, waitFor, 10*time.Millisecond, "%s's process group is gone", w.name)
}

// environWithout is this process's environment without the variables whose
// names start with one of prefixes.
func environWithout(prefixes ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

// envTestWorker, when set, makes the test binary run a worker instead of its
// tests; its value is a testWorkerSpec in JSON. startTestWorker sets it, so
// that a test can kill a worker whose settings it chose (the worker binary
// takes its settings from the environment, which has no heartbeat knobs).
const envTestWorker = "TOLLGATE_TEST_WORKER"

func TestMain(m *testing.M) {
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
}

// runTestWorker runs the worker that specJSON describes until it is
// interrupted or killed, logging to stderr.
func runTestWorker(specJSON string) error {
	var spec testWorkerSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("%s: %w", envTestWorker, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := client.Dial(client.Options{
		HostPort:  spec.HostPort,
		Namespace: spec.Namespace,
		Logger:    sdklog.NewStructuredLogger(log),
	})
	if err != nil {
		return fmt.Errorf("dial Temporal at %s: %w", spec.HostPort, err)
	}
	defer c.Close()
	w := worker.New(c, spec.TaskQueue, worker.Options{})
	workflows.Register(w, &workflows.Workflows{Settings: spec.Settings},
		activities.NewModel(spec.ModelURL, "test", scripted.ModelName, workflows.TokenSignaler{Client: c}),
		stackTools(spec.Workspace))
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
func (st *stack) startTestWorker(t *testing.T, name string, settings workflows.Settings) *workerProcess {
	t.Helper()
	spec, err := json.Marshal(testWorkerSpec{
		HostPort:  st.temporal.HostPort,
		Namespace: st.temporal.Namespace,
		TaskQueue: st.queue,
		Workspace: st.workspace,
		ModelURL:  st.model.URL + "/v1",
		Settings:  settings,
	})
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	env := append(environWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_"), envTestWorker+"="+string(spec))
	return startWorker(t, exe, env, name)
}
