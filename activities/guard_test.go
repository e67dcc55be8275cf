package activities

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startGroup starts a command that runs until killed, in a process group of
// its own, as runBash does; the test kills the group when it ends.
func startGroup(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("bash", "-c", "sleep 60 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
	})
	return cmd
}

func TestGuardKillsTheGroupWhenItsWorkerGoes(t *testing.T) {
	cmd := startGroup(t)
	g, err := guardGroup(cmd.Process.Pid)
	require.NoError(t, err)

	// What a dying worker does: its end of the pipe closes, with no word.
	require.NoError(t, g.done.Close())
	require.NoError(t, g.cmd.Wait())

	require.Eventually(t, func() bool { return processGone(cmd.Process.Pid) }, 5*time.Second, 10*time.Millisecond,
		"the command's group is killed")
}

func TestGuardReleasedLeavesTheGroupAlone(t *testing.T) {
	cmd := startGroup(t)
	g, err := guardGroup(cmd.Process.Pid)
	require.NoError(t, err)

	g.release() // returns once the guard has exited

	require.False(t, processGone(cmd.Process.Pid), "a released guard kills nothing")
}
