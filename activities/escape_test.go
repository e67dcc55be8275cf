package activities

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

// escapeCommand starts two processes that leave the command's process group
// and session: one setsid'd in the background, one double-forked (its
// parent, a subshell, exits at once) into a session of its own. Each writes
// its pid, would write late<N>.txt ten seconds later, and sleep on (so
// that only a kill ends it within the tests' deadlines). The command says
// "ready" once both pids are written, and sleeps on too. A pid is read from
// /proc/self/stat, which gives it as the worker sees it, not as the PID
// namespace of the command does ($$).
const escapeCommand = `setsid sh -c 'read -r pid _ < /proc/self/stat; echo $pid > esc1.pid; sleep 10; echo late > late1.txt; sleep 30' &
(setsid sh -c 'read -r pid _ < /proc/self/stat; echo $pid > esc2.pid; sleep 10; echo late > late2.txt; sleep 30' &)
until [ -s esc1.pid ] && [ -s esc2.pid ]; do sleep 0.01; done
echo ready; sleep 30`

// escapeTimeout is the Bash timeout of escapeCommand: long enough for it to
// be ready on a loaded machine, well short of the escapees' late writes.
const escapeTimeout = 3 * time.Second

// killWait bounds how long the death of a command's processes may take.
const killWait = 5 * time.Second

// escapeesStarted waits until both escapees of escapeCommand in ws have
// written their pids, and gives them.
func escapeesStarted(t *testing.T, ws string) []int {
	t.Helper()
	var pids []int
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pids = pids[:0]
		for _, name := range []string{"esc1.pid", "esc2.pid"} {
			b, err := os.ReadFile(filepath.Join(ws, name))
			require.NoError(c, err)
			require.True(c, strings.HasSuffix(string(b), "\n"), "%s is written whole", name)
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			require.NoError(c, err)
			require.Greater(c, pid, 1)
			pids = append(pids, pid)
		}
	}, killWait, 10*time.Millisecond, "the escapees started")
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pids
}

// requireTreeGone requires that the escapees, and every process working in
// ws (all that the command started), are gone within killWait, and that no
// escapee wrote its late file: a process that is gone writes nothing more.
func requireTreeGone(t *testing.T, ws string, escapees []int) {
	t.Helper()
	for _, pid := range escapees {
		require.Eventually(t, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }, killWait, 10*time.Millisecond,
			"escaped process %d is killed", pid)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, processesIn(ws)) }, killWait, 10*time.Millisecond,
		"no process of the command is left")
	requireNotExist(t, filepath.Join(ws, "late1.txt"))
	requireNotExist(t, filepath.Join(ws, "late2.txt"))
}

// processesIn lists the live processes whose working folder is dir.
func processesIn(dir string) []int {
	var pids []int
	eachProcess(func(pid int, proc string) {
		if cwd, err := os.Readlink(proc + "/cwd"); err == nil && cwd == dir && !processGone(pid) {
			pids = append(pids, pid)
		}
	})
	return pids
}

func TestToolsBashTimeoutKillsProcessesThatLeftItsGroupAndSession(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws, BashTimeout: escapeTimeout}

	out := call(t, tools.Bash, map[string]any{"command": escapeCommand})
	requireToolError(t, out, "Bash: command timed out after 3s")
	require.Contains(t, out.Result, "ready")

	requireTreeGone(t, ws, escapeesStarted(t, ws))
}

func TestToolsBashCancelKillsProcessesThatLeftItsGroupAndSession(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	errs := make(chan error, 1)
	go func() {
		_, err := tools.Bash(ctx, ToolInput{Call: protocol.ToolCall{Arguments: `{"command": ` + strconv.Quote(escapeCommand) + `}`}})
		errs <- err
	}()
	escapees := escapeesStarted(t, ws)
	cancel()
	select {
	case err := <-errs:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(killWait):
		t.Fatal("the cancelled Bash call did not return")
	}

	requireTreeGone(t, ws, escapees)
}

// envBashWorker, when set, makes the test binary a stand-in worker that runs
// escapeCommand with Bash in the workspace it names, until it is killed.
const envBashWorker = "TOLLGATE_TEST_BASH_WORKER"

// envHidden, when set, makes the test binary hide itself as the worker
// does (HideWorker) before it runs its tests.
const envHidden = "TOLLGATE_TEST_HIDDEN"

func TestMain(m *testing.M) {
	if os.Getenv(envHidden) != "" {
		if err := HideWorker(); err != nil {
			panic(err)
		}
	}
	if ws := os.Getenv(envBashWorker); ws != "" {
		_, _ = (&Tools{Workspace: ws}).Bash(context.Background(), ToolInput{Call: protocol.ToolCall{Arguments: `{"command": ` + strconv.Quote(escapeCommand) + `}`}})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestToolsBashWorkerKilledTakesProcessesThatLeftItsGroupAndSession(t *testing.T) {
	ws, _ := newWorkspace(t)
	worker := exec.Command(os.Args[0])
	worker.Env = append(os.Environ(), envBashWorker+"="+ws)
	require.NoError(t, worker.Start())
	waited := make(chan struct{})
	go func() { _ = worker.Wait(); close(waited) }()
	t.Cleanup(func() { _ = worker.Process.Kill(); <-waited })

	escapees := escapeesStarted(t, ws)
	require.NoError(t, worker.Process.Signal(syscall.SIGKILL), "the worker dies as a crash kills it")
	<-waited

	requireTreeGone(t, ws, escapees)
}

// killGuardCommand is issue 25's command: a background job that would
// write late.txt two seconds on, and a shell that kills its guard ($PPID)
// and sleeps past its time limit. It writes killed.txt once the kill has
// been sent, whatever became of it.
const killGuardCommand = `(sleep 2; echo late > late.txt) & kill -9 $PPID; echo $? > killed.txt; sleep 30`

func TestToolsBashCommandThatKillsItsGuardStillEndsAtItsTimeLimit(t *testing.T) {
	if guardIsolation() == isolationNone {
		t.Skip("this system allows no PID namespace, without which a command can kill its guard (docs/security.md)")
	}
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws, BashTimeout: time.Second}

	start := time.Now()
	out := call(t, tools.Bash, map[string]any{"command": killGuardCommand})
	requireToolError(t, out, "Bash: command timed out after 1s")
	require.FileExists(t, filepath.Join(ws, "killed.txt"), "the kill was sent before the time limit")

	// The background job would write at 2 s; it is gone, so nothing is
	// written by 4 s (twice its delay).
	require.Never(t, func() bool {
		_, err := os.Lstat(filepath.Join(ws, "late.txt"))
		return err == nil
	}, time.Until(start.Add(4*time.Second)), 20*time.Millisecond, "the background job outlived the call")
	require.Empty(t, processesIn(ws), "no process of the command is left")
}
