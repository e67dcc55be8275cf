package activities

import (
	"bytes"
	"context"
	"os"
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
	return startGuardedAsIn(t, guardIsolation(), command)
}

// startGuardedAsIn is startGuardedIn under isolation iso.
func startGuardedAsIn(t *testing.T, iso isolation, command string) (g *guardedCommand, ws string, out *bytes.Buffer) {
	t.Helper()
	ws, _ = newWorkspace(t)
	out = &bytes.Buffer{}
	g, err := startGuardedAs(context.Background(), iso, ws, command, allowedEnv(nil), out)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = g.stop.Close()
		_, _ = g.wait()
	})
	return g, ws, out
}

func TestGuardKillsEverythingWhenItsWorkerGoes(t *testing.T) {
	g, ws, _ := startGuardedIn(t, escapeCommand)
	escapees := escapeesStarted(t, ws)

	// What a dying worker does: its end of the pipe closes, with no word.
	require.NoError(t, g.stop.Close())
	end, err := g.wait()

	require.Error(t, err)
	require.True(t, end.Reported, "the guard reports bash's status")
	require.True(t, end.Status.Signaled())
	require.Equal(t, syscall.SIGKILL, end.Status.Signal())
	require.False(t, end.Left, "bash did not end by itself")
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
		end, err := g.wait()
		status := end.Status
		require.True(t, end.Reported, tc.command)
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

func TestGuardEndsWhatACommandLeftRunningWhenItEnds(t *testing.T) {
	// escapeCommand, but bash ends once its escapees have started.
	g, ws, _ := startGuardedIn(t, strings.Replace(escapeCommand, "echo ready; sleep 30", "echo ready", 1))
	end, err := g.wait()
	require.NoError(t, err, "nothing holds the output open")
	require.True(t, end.Reported)
	require.True(t, end.Status.Exited())
	require.Zero(t, end.Status.ExitStatus())
	require.True(t, end.Left, "the guard says it ended what bash left")
	requireTreeGone(t, ws, escapeesStarted(t, ws))
}

func TestGuardIsTheInitOfAPIDNamespaceWhereTheSystemAllowsOne(t *testing.T) {
	if guardIsolation() == isolationNone {
		t.Skip("this system allows no PID namespace: the guard is a subreaper only")
	}
	g, _, out := startGuardedIn(t, "echo $PPID; kill -9 $PPID; kill -STOP $PPID; echo still here; id -u; id -g; grep CapEff /proc/self/status")
	end, err := g.wait()
	require.NoError(t, err)
	require.True(t, end.Reported)
	lines := strings.Split(out.String(), "\n")
	require.Equal(t, []string{"1", "still here"}, lines[:2], "bash's guard is pid 1 of its namespace, which ignores a SIGKILL and a SIGSTOP from inside")
	require.Equal(t, []string{strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid())}, lines[2:4], "the command is the worker's user and group, in a user namespace too")
	if os.Getuid() != 0 {
		require.Equal(t, "CapEff:\t0000000000000000", lines[4], "and has no capability, not even in its namespace")
	}
}

func TestGuardWithoutANamespaceStillKillsWhatLeftItsGroupAndSession(t *testing.T) {
	// Where the system allows no namespace, the guard is a subreaper.
	g, ws, _ := startGuardedAsIn(t, isolationNone, escapeCommand)
	escapees := escapeesStarted(t, ws)
	require.NoError(t, g.stop.Close())
	end, err := g.wait()
	require.Error(t, err)
	require.True(t, end.Reported)
	requireTreeGone(t, ws, escapees)

	g, ws, _ = startGuardedAsIn(t, isolationNone, strings.Replace(escapeCommand, "echo ready; sleep 30", "echo ready", 1))
	end, err = g.wait()
	require.NoError(t, err)
	require.True(t, end.Left, "what bash left ends with it there too")
	requireTreeGone(t, ws, escapeesStarted(t, ws))
}
