package activities

// The guard. A Bash command runs as the child of a guard process, which
// kills everything the command started when the worker closes its end of a
// pipe (the command timed out, or the activity was cancelled), when the
// worker dies, however it dies (a SIGKILLed worker runs no code, and its
// death closes the pipe all the same), and when bash itself ends: the whole
// tree ends with the call. "Everything" includes processes that left the
// command's process group and session (setsid, a daemon's double fork),
// which a kill of the group misses.
//
// Where the system lets it, the guard is the init of a PID namespace of its
// own (started with CLONE_NEWPID, and CLONE_NEWUSER besides when the worker
// is not privileged: an unprivileged user namespace that maps the worker's
// user to itself). That holds against a command that kills its guard (`…
// & kill -9 $PPID`): the kernel drops every signal to a namespace's init
// from inside that it has no handler for, SIGKILL and SIGSTOP always, and
// kills every process of the namespace when its init ends, however it
// ends. Every orphan of the command is re-parented to it, and kill(-1)
// reaches all of them at once. The command cannot signal the worker
// either: no pid inside names a process outside.
//
// Where namespaces are not allowed (a container's default seccomp profile
// refuses them), the guard is a child subreaper (prctl
// PR_SET_CHILD_SUBREAPER) instead, so that every orphan among the command's
// descendants is re-parented to it rather than to init, and it finds them
// all among its own children; a command that kills its guard then escapes
// it, and the worker says so when it starts (BashIsolation).
//
// Why not a cgroup, which would hold every descendant too: the image runs
// the worker as an unprivileged user in a container, where the cgroup tree
// is not writable; a namespace needs no privilege where user namespaces are
// allowed.
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
// What the guard is given: argv [guardName, mapping, command] (mapping: the
// user and group it maps in its user namespace, if it has one); the command's folder as
// its working folder; the environment bash gets; the control pipe as its
// stdin, which it only waits to see closed; the command's output as its
// stdout and stderr, which bash inherits; and a status pipe as fd 3, where
// it writes bash's wait status, and whether bash left processes running,
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
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// guardName is the guard's argv[0], by which init recognises it, and
// probeName that of the process that finds which isolation the system
// allows (probeIsolation).
const (
	guardName = "tollgate-bash-guard"
	probeName = "tollgate-bash-guard-probe"
)

// killRound bounds how long the guard waits for a killed child's SIGCHLD
// before it looks for children again.
const killRound = 100 * time.Millisecond

func init() {
	switch {
	case len(os.Args) == 3 && os.Args[0] == guardName:
		// syscall.Exit rather than os.Exit: the guard has nothing to flush,
		// and a binary built with -race would sleep a second in os.Exit(0).
		syscall.Exit(runGuard(os.Args[1], os.Args[2]))
	case len(os.Args) == 2 && os.Args[0] == probeName:
		if err := mapSelf(os.Args[1]); err != nil || os.Getpid() != 1 {
			syscall.Exit(1)
		}
		syscall.Exit(0)
	}
}

// isolation is what holds a command's processes besides its guard.
type isolation int

const (
	// isolationNone: the guard is their subreaper, no more.
	isolationNone isolation = iota
	// isolationPID: the guard is the init of a PID namespace.
	isolationPID
	// isolationUserPID: the same, in a user namespace of its own that maps
	// the worker's user and group to themselves, for a worker without the
	// privilege to make a PID namespace alone.
	isolationUserPID
)

func (i isolation) String() string {
	switch i {
	case isolationPID:
		return "pid namespace"
	case isolationUserPID:
		return "user and pid namespaces"
	default:
		return "none"
	}
}

// guardIsolation is the isolation this process gives every command, found
// once.
var guardIsolation = sync.OnceValue(probeIsolation)

// BashIsolation says how Bash commands are held, for the worker's start:
// "pid namespace", "user and pid namespaces", or "none" where the system
// allows neither (a command that kills its guard then outlives its time
// limit).
func BashIsolation() string { return guardIsolation().String() }

// probeIsolation finds the first isolation the system allows, by starting
// this binary as probeName under it: the probe exits 0 when it is the init
// of its namespace (and could map its user, where it has to).
func probeIsolation() isolation {
	for _, iso := range []isolation{isolationPID, isolationUserPID} {
		cmd := exec.Command("/proc/self/exe", iso.mapping())
		cmd.Args[0] = probeName
		cmd.Env = []string{}
		cmd.SysProcAttr = iso.attr()
		if cmd.Run() == nil {
			return iso
		}
	}
	return isolationNone
}

// attr is how the guard is started under isolation i.
//
// In a user namespace, the guard maps its user and group itself (mapSelf)
// rather than have this process write its maps (SysProcAttr.UidMappings):
// the worker is not dumpable (HideWorker), and so may not open the files
// of a child that has not yet exec'd. For that the guard is given, in
// ambient capabilities, what writing its maps takes, in its namespace only.
func (i isolation) attr() *syscall.SysProcAttr {
	// A group of its own, so that a signal to the worker's group (^C in a
	// terminal) does not end the guard before it has killed the command.
	attr := &syscall.SysProcAttr{Setpgid: true}
	switch i {
	case isolationPID:
		attr.Cloneflags = syscall.CLONE_NEWPID
	case isolationUserPID:
		attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETUID, unix.CAP_SETGID}
	}
	return attr
}

// mapping is the guard's argument that says which user and group it maps
// to themselves in its user namespace ("uid:gid"), or "" for none.
func (i isolation) mapping() string {
	if i != isolationUserPID {
		return ""
	}
	return fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
}

// mapSelf maps, in the guard's new user namespace, the worker's user and
// group (mapping, "uid:gid") to themselves, so that a command sees its
// files as the worker's, and then gives up the capabilities that took,
// so that bash does not inherit them. An empty mapping maps nothing.
func mapSelf(mapping string) error {
	if mapping == "" {
		return nil
	}
	uid, gid, ok := strings.Cut(mapping, ":")
	if !ok {
		return fmt.Errorf("not a uid:gid mapping: %q", mapping)
	}
	for _, w := range []struct{ file, text string }{
		{"/proc/self/setgroups", "deny"}, // before gid_map, as an unprivileged map requires
		{"/proc/self/uid_map", uid + " " + uid + " 1"},
		{"/proc/self/gid_map", gid + " " + gid + " 1"},
	} {
		if err := os.WriteFile(w.file, []byte(w.text), 0); err != nil {
			return fmt.Errorf("map the worker's user in the command's namespace: %w", err)
		}
	}
	return unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
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
	return startGuardedAs(ctx, guardIsolation(), dir, command, env, out)
}

// startGuardedAs is startGuarded under isolation iso.
func startGuardedAs(ctx context.Context, iso isolation, dir, command string, env []string, out io.Writer) (*guardedCommand, error) {
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
	cmd := exec.CommandContext(ctx, "/proc/self/exe", iso.mapping(), command)
	cmd.Args[0] = guardName
	cmd.Dir = dir
	// Never nil, which would give the guard the worker's whole environment.
	cmd.Env = append([]string{}, env...)
	cmd.Stdin = stopR
	// The same writer for both streams: exec then uses one pipe, so the
	// output keeps its order and Write is never called concurrently.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{statusW}
	cmd.SysProcAttr = iso.attr()
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

// guardEnd is how a guarded command ended, as its guard reported it.
type guardEnd struct {
	// Status is bash's wait status, when Reported.
	Status syscall.WaitStatus
	// Reported is false when the guard itself failed or was killed.
	Reported bool
	// Left is true when bash ended by itself but left processes running,
	// which the guard then killed.
	Left bool
}

// wait waits for the guard to exit and gives what it reported, and the
// error of the guard's exec.Cmd.Wait. The guard exits 0 only if bash did.
func (g *guardedCommand) wait() (guardEnd, error) {
	err := g.cmd.Wait()
	_ = g.stop.Close()
	// The guard has exited, and no other process holds the status pipe
	// (the guard keeps it from bash), so this read ends.
	b, _ := io.ReadAll(g.status)
	_ = g.status.Close()
	var end guardEnd
	var status uint32
	var left int
	_, perr := fmt.Sscanf(string(b), "%d %d", &status, &left)
	end.Status, end.Reported, end.Left = syscall.WaitStatus(status), perr == nil, left != 0
	return end, err
}

// guard is the guard process's state.
type guard struct {
	init   bool // the init of a PID namespace
	bash   int
	ended  bool               // bash has been reaped
	status syscall.WaitStatus // bash's, once ended
}

// runGuard is the guard's main: it runs command, kills everything when told
// to or when bash ends, and gives its exit code.
func runGuard(mapping, command string) int {
	status := os.NewFile(3, "status")
	syscall.CloseOnExec(3) // the worker reads it once the guard exits: bash must not hold it
	if err := mapSelf(mapping); err != nil {
		fmt.Fprintf(os.Stderr, "cannot guard the command: %v\n", err)
		return 1
	}
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
	g := &guard{init: os.Getpid() == 1, bash: bash}
	left := false
wait:
	for !g.ended {
		select {
		case <-exited:
			if g.reap() && g.ended {
				// Bash ended by itself and left processes running: they
				// end with the call, as they would at its time limit.
				left = true
				g.killAll(exited)
			}
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
	leftFlag := 0
	if left {
		leftFlag = 1
	}
	fmt.Fprintf(status, "%d %d", uint32(g.status), leftFlag)
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
// As the init of a PID namespace, the guard signals them all at once with
// kill(-1), which reaches every process of the namespace but its init.
// Otherwise only children are signalled, and only this goroutine reaps, so
// a pid read from /proc cannot have been freed and reused by another
// process before the signal reaches it; a grandchild becomes a child when
// its parent dies, the guard being its subreaper, and is killed in the
// next round. There is no descendant left when there is no child left.
func (g *guard) killAll(exited <-chan os.Signal) {
	for g.reap() {
		if g.init {
			_ = syscall.Kill(-1, syscall.SIGKILL)
		} else {
			for _, pid := range children() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
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
