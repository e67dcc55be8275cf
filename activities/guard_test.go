package activities

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// startGuardedIn starts command under its guard in a new workspace, and
// kills what is left of it when the test ends.
func startGuardedIn(t *testing.T, command string) (g *guardedCommand, ws string, out *bytes.Buffer) {
	t.Helper()
	ws, _ = newWorkspace(t)
	out = &bytes.Buffer{}
	g, err := startGuarded(context.Background(), ws, command, allowedEnv(nil), out)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = g.stop.Close()
		_, _, _ = g.wait()
	})
	return g, ws, out
}

func TestGuardKillsEverythingWhenItsWorkerGoes(t *testing.T) {
	g, ws, _ := startGuardedIn(t, escapeCommand)
	escapees := escapeesStarted(t, ws)

	// What a dying worker does: its end of the pipe closes, with no word.
	require.NoError(t, g.stop.Close())
	status, reported, err := g.wait()

	require.Error(t, err)
	require.True(t, reported, "the guard reports bash's status")
	require.True(t, status.Signaled())
	require.Equal(t, syscall.SIGKILL, status.Signal())
	requireTreeGone(t, ws, escapees)
}

func TestGuardReportsTheCommandsOwnEnd(t *testing.T) {
	for _, tc := range []struct {
		command  string
		exited   bool
		code     int
		signal   syscall.Signal
		guardErr bool
	}{
		{command: "echo out; echo err >&2", exited: true},
		{command: "exit 3", exited: true, code: 3, guardErr: true},
		{command: "kill -TERM $$", signal: syscall.SIGTERM, guardErr: true},
	} {
		g, _, out := startGuardedIn(t, tc.command)
		status, reported, err := g.wait()
		require.True(t, reported, tc.command)
		require.Equal(t, tc.exited, status.Exited(), tc.command)
		if tc.exited {
			require.Equal(t, tc.code, status.ExitStatus(), tc.command)
		} else {
			require.Equal(t, tc.signal, status.Signal(), tc.command)
		}
		require.Equal(t, tc.guardErr, err != nil, "the guard fails only when bash did: %s, %v", tc.command, err)
		if tc.command == "echo out; echo err >&2" {
			require.Equal(t, "out\nerr\n", out.String(), "bash writes to the guard's output")
		}
	}
}

func TestGuardLeavesWhatACommandThatEndedLeftRunning(t *testing.T) {
	g, ws, _ := startGuardedIn(t, "sleep 30 & echo $! > bg.pid")
	var pid int
	t.Cleanup(func() {
		if pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	status, reported, err := g.wait()
	require.ErrorIs(t, err, exec.ErrWaitDelay, "the background sleep held the output open")
	require.True(t, reported)
	require.True(t, status.Exited())
	require.Zero(t, status.ExitStatus())

	pid, err = strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(ws, "bg.pid"))))
	require.NoError(t, err)
	require.False(t, processGone(pid), "a command that ended by itself keeps its background processes, as before")
}
