package activities

// The guard. A Bash command runs as the child of a guard process, which
// kills everything the command started when the worker closes its end of a
// pipe (the command timed out, or the activity was cancelled) and when the
// worker dies, however it dies: a SIGKILLed worker runs no code, and its
// death closes the pipe all the same. "Everything" includes processes that
// left the command's process group and session (setsid, a daemon's double
// fork), which a kill of the group misses: the guard is a child subreaper
// (prctl PR_SET_CHILD_SUBREAPER), so every orphan among the command's
// descendants is re-parented to it rather than to init, however it escaped,
// and the guard finds them all among its own children.
//
// Why a subreaper and not a cgroup, which would hold every descendant too:
// the image runs the worker as an unprivileged user in a container, where
// the cgroup tree is not writable; the subreaper needs no privilege, so it
// would have to exist and work alone anyway, and a cgroup path besides it
// would be a second mechanism that production never runs.
//
// Why the worker's own binary: the guard must call prctl before it starts
// bash, which no shell or common tool does. It re-executes /proc/self/exe
// (the running binary, even if its file was replaced since) as guardName,
// and init below turns that process into the guard before main runs.
// Written here rather than taken from elsewhere: init processes that
// subreap (tini, dumb-init) are binaries the image would have to carry, and
// kill their children on signals, not when a pipe closes. A pipe rather than
// a parent-death signal: Go's Pdeathsig fires when the thread that started
// the guard exits, not only when the worker does.
//
// What the guard is given: argv [guardName, command]; the command's folder as
// its working folder; the control pipe as its stdin, which it only waits to
// see closed; the command's output as its stdout and stderr, which bash
// inherits; and a status pipe as fd 3, where it writes bash's wait status
// before it exits. SIGINT, SIGTERM and SIGHUP make it kill everything too.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// guardName is the guard's argv[0], by which init recognises it.
const guardName = "tollgate-bash-guard"

// killRound bounds how long the guard waits for a killed child's SIGCHLD
// before it looks for children again.
const killRound = 100 * time.Millisecond

func init() {
	if len(os.Args) == 2 && os.Args[0] == guardName {
		// syscall.Exit rather than os.Exit: the guard has nothing to flush,
		// and a binary built with -race would sleep a second in os.Exit(0).
		syscall.Exit(runGuard(os.Args[1]))
	}
}

// guardedCommand is a bash command running under its guard, as the worker
// sees it.
type guardedCommand struct {
	cmd    *exec.Cmd
	stop   *os.File // the control pipe's write end: closing it kills the command
	status *os.File // the status pipe's read end
}

// startGuarded starts command with bash -c in dir under a guard, with the
// environment env (the guard's, which bash inherits), its stdout and stderr
// written to out. The end of ctx kills the command and all it started, as
// does the death of this process.
func startGuarded(ctx context.Context, dir, command string, env []string, out io.Writer) (*guardedCommand, error) {
	stopR, stopW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("cannot guard the command: %w", err)
	}
	defer stopR.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		stopW.Close()
		return nil, fmt.Errorf("cannot guard the command: %w", err)
	}
	defer statusW.Close()
	cmd := exec.CommandContext(ctx, "/proc/self/exe", command)
	cmd.Args[0] = guardName
	cmd.Dir = dir
	// Never nil, which would give the guard the worker's whole environment.
	cmd.Env = append([]string{}, env...)
	cmd.Stdin = stopR
	// The same writer for both streams: exec then uses one pipe, so the
	// output keeps its order and Write is never called concurrently.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{statusW}
	// A group of its own, so that a signal to the worker's group (^C in a
	// terminal) does not end the guard before it has killed the command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// What the worker's death would do: the guard kills everything.
	cmd.Cancel = stopW.Close
	// How long bash's background processes may hold the output open once
	// bash has exited, and the guard take to kill everything once told (it
	// takes milliseconds; past that, exec kills the guard alone).
	cmd.WaitDelay = pipeGrace
	if err := cmd.Start(); err != nil {
		stopW.Close()
		statusR.Close()
		return nil, fmt.Errorf("cannot start bash: %w", err)
	}
	return &guardedCommand{cmd: cmd, stop: stopW, status: statusR}, nil
}

// wait waits for the guard to exit and gives bash's wait status when the
// guard reported it (reported is false when the guard itself failed or was
// killed), and the error of the guard's exec.Cmd.Wait. The guard exits 0
// only if bash did, so that err is exec.ErrWaitDelay when bash succeeded but
// left processes holding its output open.
func (g *guardedCommand) wait() (ws syscall.WaitStatus, reported bool, err error) {
	err = g.cmd.Wait()
	_ = g.stop.Close()
	// The guard has exited, and no other process holds the status pipe
	// (the guard keeps it from bash), so this read ends.
	b, _ := io.ReadAll(g.status)
	_ = g.status.Close()
	n, perr := strconv.ParseUint(string(b), 10, 32)
	return syscall.WaitStatus(n), perr == nil, err
}

// guard is the guard process's state.
type guard struct {
	bash   int
	ended  bool               // bash has been reaped
	status syscall.WaitStatus // bash's, once ended
}

// runGuard is the guard's main: it runs command, kills everything when told
// to, and gives its exit code.
func runGuard(command string) int {
	status := os.NewFile(3, "status")
	syscall.CloseOnExec(3) // the worker reads it once the guard exits: bash must not hold it
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "cannot guard the command: %v\n", err)
		return 1
	}
	// Before bash starts, so that no exit goes unnoticed.
	exited := make(chan os.Signal, 1)
	signal.Notify(exited, syscall.SIGCHLD)
	signalled := make(chan os.Signal, 1)
	signal.Notify(signalled, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(closed)
	}()

	bash, err := startBash(command)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot start bash: %v\n", err)
		return 1
	}
	g := &guard{bash: bash}
wait:
	for !g.ended {
		select {
		case <-exited:
			g.reap()
		case <-closed:
			g.killAll(exited)
			break wait
		case <-signalled:
			g.killAll(exited)
			break wait
		}
	}
	if !g.ended {
		return 1 // cannot happen: killAll reaps every child, bash included
	}
	// Processes that bash left running when it exited by itself are left
	// so, as before: a command that succeeds may mean them to run on (a
	// server). They are re-parented to init when the guard exits.
	fmt.Fprintf(status, "%d", uint32(g.status))
	switch {
	case g.status.Exited():
		return g.status.ExitStatus()
	case g.status.Signaled():
		return 128 + int(g.status.Signal())
	}
	return 1
}

// startBash starts bash -c command in the guard's folder, with no input and
// the guard's output, and gives its pid.
func startBash(command string) (int, error) {
	path, err := exec.LookPath("bash")
	if err != nil {
		return 0, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	// syscall.ForkExec rather than exec.Cmd: the guard reaps every child
	// itself, bash included, with wait4(-1), which would race exec.Cmd.Wait.
	return syscall.ForkExec(path, []string{"bash", "-c", command}, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{null.Fd(), 1, 2},
		// A process group of its own, as commands always had: a command's
		// signal to its group (kill 0) stays in it and spares the guard.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
}

// reap reaps every child that has exited, noting bash's status, and reports
// whether any child is left.
func (g *guard) reap() (left bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil: // ECHILD
			return false
		case pid == 0:
			return true
		case pid == g.bash:
			g.ended, g.status = true, ws
		}
	}
}

// killAll kills every process the command started, and reaps them all.
// Only children are signalled, and only this goroutine reaps, so a pid read
// from /proc cannot have been freed and reused by another process before
// the signal reaches it. A grandchild becomes a child when its parent dies,
// the guard being its subreaper, and is killed in the next round; there is
// no descendant left when there is no child left.
func (g *guard) killAll(exited <-chan os.Signal) {
	for g.reap() {
		for _, pid := range children() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-exited:
		case <-time.After(killRound):
		}
	}
}

// children lists the guard's children (zombies included), from the parent
// pid of every process in /proc: the kernel's own lists of children
// (/proc/PID/task/TID/children) are not built into every kernel.
func children() []int {
	self := strconv.Itoa(os.Getpid())
	var pids []int
	eachProcess(func(pid int, dir string) {
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil {
			return // it has gone
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		fields := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
		if len(fields) > 1 && string(fields[1]) == self {
			pids = append(pids, pid)
		}
	})
	return pids
}

// eachProcess calls fn with the pid and the /proc folder of every process.
func eachProcess(fn func(pid int, dir string)) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			fn(pid, "/proc/"+e.Name())
		}
	}
}
