package activities

// The Bash sandbox. A Bash command runs first over a copy-on-write view of
// the workspace, so that the person who decides sees what it really
// changed, and an approve applies exactly that (ApplySandbox). It runs
// under the guard (guard.go), as every Bash command does, so that it and
// everything it starts end with the call, and the guard starts this chain,
// each part from the system rather than written here:
//
//   - unshare (util-linux) makes a user and a mount namespace, where the
//     worker's user is root without being so outside: what mounting an
//     overlay takes, with no privilege. There, mount binds the workspace to
//     lower/ in a fresh folder and mounts an overlay (lower/ read-only, the
//     command's writes in upper/) on merged/. bubblewrap 0.8 has no overlay
//     option of its own.
//   - bwrap (bubblewrap) then makes the sandbox: a user namespace of its own
//     where the command has the worker's uid and no capability, and may make
//     no further user namespace (--disable-userns: one would give it
//     capabilities over mounts it could then undo); its own network
//     namespace, with only a loopback interface that no one else listens on;
//     its own PID, IPC and UTS namespaces, and a session of its own (no
//     terminal to type into); the whole file system read-only, with fresh
//     /dev and /proc (which shows only the sandbox's processes), a private
//     /tmp, the fresh folder hidden, and merged/ on the workspace's real path,
//     the one writable place; only the allow-listed environment; and a
//     seccomp filter that refuses sockets of the unix family, through which a
//     read-only file system still lets a process connect to the servers of
//     the host (a container engine's socket would be root on it).
//   - prlimit (util-linux) sets the command's resource limits, and runs bash
//     -c with it.
//
// The command's time limit is the guard's, as for Bash. Memory, processes
// and the size of a file are bounded by rlimits rather than a cgroup: a
// cgroup is what holds a whole tree to one budget, but the worker runs in a
// container where the cgroup tree is not writable (see guard.go), while an
// rlimit needs no privilege and is inherited by every process the command
// starts. RLIMIT_DATA rather than RLIMIT_AS: runtimes reserve far more
// address space than they use (V8, the JVM), and a reservation is not
// memory; a private writable mapping is. RLIMIT_NPROC counts the processes
// of the sandbox's own user namespace, fresh for each run, and so bounds the
// sandbox alone; the kernel does not apply it to root's processes, so a
// worker that runs as root has no process limit (its image does not).
//
// When the command has ended, the changes are read from upper/ (see
// sandbox_changes.go), and the fresh folder is removed. The workspace is
// never written.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgate/tollgate/protocol"
)

// The sandbox's activities.
const (
	// SandboxBashActivity is the name of the activity that runs a Bash call
	// in the sandbox and reports what it changed (Tools.SandboxBash).
	SandboxBashActivity = "SandboxBash"
	// ApplySandboxActivity is the name of the activity that applies a
	// sandboxed run's changes to the workspace (Tools.ApplySandbox).
	ApplySandboxActivity = "ApplySandbox"
)

// Limits of a sandboxed command, each process's (see above).
const (
	// sandboxMemory bounds a process's data (RLIMIT_DATA): a compiler or a
	// test binary runs well within it.
	sandboxMemory = 4 << 30
	// sandboxProcesses bounds the processes of the sandbox at once
	// (RLIMIT_NPROC), so that a fork bomb stops there.
	sandboxProcesses = 1024
	// sandboxFileSize bounds the size of a file the command writes
	// (RLIMIT_FSIZE): a runaway write stops there rather than fill the
	// worker's disk. Past maxSandboxBytes a run is too large to apply.
	sandboxFileSize = 1 << 30
	// sandboxTmpSize bounds the private /tmp, and sandboxShmSize
	// /dev/shm, which are kept in memory.
	sandboxTmpSize = 512 << 20
	sandboxShmSize = 64 << 20
)

// sandboxOverlayOptions are the overlay's options: its extended attributes
// in the user namespace (the only ones an unprivileged mount may write),
// and a copy of the whole file on every change, never only its metadata
// (metacopy), so that upper/ holds every changed file entire.
const sandboxOverlayOptions = "userxattr,metacopy=off"

// sandboxScript runs in the user and mount namespaces that unshare made,
// in the run's fresh folder, with the workspace as $1 and bwrap's command
// line after it. bwrap reports its status to status (fd 5) and reads its
// seccomp filter from seccomp (fd 6).
const sandboxScript = `set -e
mount --bind -- "$1" lower
mount -t overlay overlay -o lowerdir=lower,upperdir=upper,workdir=work,` + sandboxOverlayOptions + ` merged
shift
exec "$@" 5>status 6<seccomp`

// sandboxPrograms are where the programs of the sandbox's chain are.
type sandboxPrograms struct {
	unshare, bwrap, prlimit, mount, sh, bash string
}

// sandboxProbe finds the sandbox's programs and proves, once, that a
// command runs in it.
var sandboxProbe = sync.OnceValues(probeSandbox)

// BashSandbox says whether Bash commands can run in the sandbox here: nil
// when they can, otherwise an error that names what is missing (a program,
// user namespaces, the overlay), for the worker's start. A machine without
// the sandbox runs no command in it: it asks about commands as they would
// run unconfined.
func BashSandbox() error {
	_, err := sandboxProbe()
	return err
}

// probeSandbox finds the sandbox's programs and runs a command in it that
// writes and deletes a file, and checks that the command saw and changed
// the workspace's view and not the workspace.
func probeSandbox() (sandboxPrograms, error) {
	var p sandboxPrograms
	var missing []string
	for _, prog := range []struct {
		name, pkg string
		path      *string
	}{
		{"bwrap", "bubblewrap", &p.bwrap},
		{"unshare", "util-linux", &p.unshare},
		{"prlimit", "util-linux", &p.prlimit},
		{"mount", "mount", &p.mount},
		{"sh", "dash", &p.sh},
		{"bash", "bash", &p.bash},
	} {
		path, err := exec.LookPath(prog.name)
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (package %s)", prog.name, prog.pkg))
			continue
		}
		*prog.path = path
	}
	if len(missing) > 0 {
		return p, fmt.Errorf("the Bash sandbox cannot run here: %s not found in PATH", strings.Join(missing, ", "))
	}
	if _, err := seccompFilter(); err != nil {
		return p, fmt.Errorf("the Bash sandbox cannot run here: %w", err)
	}
	if guardIsolation() == isolationNone {
		return p, errors.New("the Bash sandbox cannot run here: the system allows no PID or user namespace (a container's default seccomp profile refuses them)")
	}
	ws, err := os.MkdirTemp("", "tollgate-sandbox-probe-")
	if err != nil {
		return p, fmt.Errorf("the Bash sandbox cannot run here: %w", err)
	}
	defer removeAllForce(ws)
	if err := os.WriteFile(filepath.Join(ws, "old"), []byte("old\n"), 0o644); err != nil {
		return p, fmt.Errorf("the Bash sandbox cannot run here: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := runSandboxed(ctx, p, ws, "echo new > new && rm old && cat new", []string{"PATH=" + os.Getenv("PATH")}, 20*time.Second, DefaultOutputCap)
	switch {
	case err != nil:
		return p, fmt.Errorf("the Bash sandbox cannot run here: %w", err)
	case run.ExitCode != 0 || strings.TrimSpace(run.Output) != "new":
		return p, fmt.Errorf("the Bash sandbox cannot run here: a command in it failed (exit code %d): %s", run.ExitCode, strings.TrimSpace(run.Output))
	case len(run.Changes) != 2:
		return p, fmt.Errorf("the Bash sandbox cannot run here: a command that added a file and deleted another changed %d", len(run.Changes))
	}
	if _, err := os.Stat(filepath.Join(ws, "new")); !errors.Is(err, fs.ErrNotExist) {
		return p, errors.New("the Bash sandbox cannot run here: a command in it wrote to the workspace")
	}
	return p, nil
}

// SandboxBash runs a Bash call in the sandbox, over a copy-on-write view of
// the workspace, and reports how it ended, what it printed and every file it
// added, changed or deleted; the workspace is not touched. Its arguments
// are read as Bash reads them. A command that fails, or times out, is a
// run like any other; a call that Bash would refuse, or a machine where the
// sandbox cannot run, is a run that says so in Unavailable. Only the
// cancellation of the activity fails it.
func (t *Tools) SandboxBash(ctx context.Context, in ToolInput) (protocol.SandboxRun, error) {
	if err := ctx.Err(); err != nil {
		return protocol.SandboxRun{}, err
	}
	progs, err := sandboxProbe()
	if err != nil {
		return protocol.SandboxRun{Unavailable: err.Error()}, nil
	}
	run, err := func() (protocol.SandboxRun, error) {
		ws, in, err := t.open(protocol.ToolBash, in)
		if err != nil {
			return protocol.SandboxRun{}, err
		}
		defer ws.Close()
		command, timeout, err := t.bashArgs(in.Call.Arguments)
		if err != nil {
			return protocol.SandboxRun{}, err
		}
		return runSandboxed(ctx, progs, ws.real, command, sandboxEnv(allowedEnv(t.BashEnv)), timeout, t.outputCap())
	}()
	if err := ctx.Err(); err != nil {
		return protocol.SandboxRun{}, err
	}
	if err != nil {
		return protocol.SandboxRun{Unavailable: protocol.ToolBash + ": " + err.Error()}, nil
	}
	run.Preview = describeSandboxRun(run, t.outputCap())
	return run, nil
}

// sandboxCacheHome is where a sandboxed command's tools keep their caches
// (XDG_CACHE_HOME, which Go's build cache follows): in the sandbox's
// private /tmp, since HOME is read-only there. A cache starts empty each
// run and is gone with it.
const sandboxCacheHome = "/tmp/.cache"

// sandboxEnv is env with XDG_CACHE_HOME in the sandbox's /tmp, unless env
// sets it (TOLLGATE_BASH_ENV).
func sandboxEnv(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "XDG_CACHE_HOME=") {
			return env
		}
	}
	return append(env, "XDG_CACHE_HOME="+sandboxCacheHome)
}

// runSandboxed runs command in the sandbox over the workspace ws (its real
// path), with the environment env, for at most timeout, and reads what it
// changed. Its error says why the sandbox could not run the command; a
// command that fails is not one.
func runSandboxed(ctx context.Context, progs sandboxPrograms, ws, command string, env []string, timeout time.Duration, capBytes int) (protocol.SandboxRun, error) {
	dir, err := os.MkdirTemp("", "tollgate-sandbox-")
	if err != nil {
		return protocol.SandboxRun{}, fmt.Errorf("cannot make the sandbox's folder: %w", err)
	}
	defer removeAllForce(dir)
	if within(ws, dir) {
		return protocol.SandboxRun{}, fmt.Errorf("the temporary folder %s is inside the workspace: set TMPDIR to a folder outside it", filepath.Dir(dir))
	}
	for _, sub := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return protocol.SandboxRun{}, fmt.Errorf("cannot make the sandbox's folder: %w", err)
		}
	}
	filter, err := seccompFilter()
	if err != nil {
		return protocol.SandboxRun{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "seccomp"), filter, 0o600); err != nil {
		return protocol.SandboxRun{}, fmt.Errorf("cannot make the sandbox's folder: %w", err)
	}

	// Files of the workspace changed from here on may have been read by
	// the command as they were before (see changedDuringRun).
	started := time.Now().Add(-clockSlack)
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := &endsWriter{max: capBytes}
	// The chain's own environment is PATH alone; the command's is set by
	// bwrap, from nothing.
	g, err := startGuarded(runCtx, dir, sandboxCommand(progs, dir, ws, command, env), []string{"PATH=" + os.Getenv("PATH")}, out)
	if err != nil {
		return protocol.SandboxRun{}, err
	}
	end, waitErr := g.waitHeartbeating(ctx)
	if err := ctx.Err(); err != nil {
		return protocol.SandboxRun{}, err
	}
	status := readSandboxStatus(filepath.Join(dir, "status"))
	run := protocol.SandboxRun{Command: command, Output: out.String(), ExitCode: status.code}
	switch {
	case runCtx.Err() != nil:
		run.TimedOut, run.ExitCode, run.Signal = true, -1, syscall.SIGKILL.String()
	case !status.started:
		// bwrap did not start the command: the mounts or bwrap failed, and
		// said why.
		why := strings.TrimSpace(out.String())
		if waitErr != nil && why == "" {
			why = waitErr.Error()
		}
		return protocol.SandboxRun{}, fmt.Errorf("the sandbox did not start: %s", why)
	case !status.exited && end.Reported && end.Status.Signaled():
		run.ExitCode, run.Signal = -1, end.Status.Signal().String()
	case !status.exited:
		return protocol.SandboxRun{}, fmt.Errorf("the sandbox ended without the command's status (%v): %s", waitErr, strings.TrimSpace(out.String()))
	}
	if run.Output == "" {
		run.Output = "(no output)"
	}
	changes, err := readChanges(filepath.Join(dir, "upper"), ws, started)
	if err != nil {
		return protocol.SandboxRun{}, fmt.Errorf("cannot read what the command changed: %w", err)
	}
	run.Changes, run.Omitted, run.TooLarge = changes.changes, changes.omitted, changes.tooLarge
	return run, nil
}

// sandboxCommand is the command line the guard's bash runs: unshare, which
// runs sandboxScript, which runs bwrap, which runs prlimit, which runs bash
// -c command in ws with the environment env.
func sandboxCommand(p sandboxPrograms, dir, ws, command string, env []string) string {
	bwrap := []string{p.bwrap,
		"--unshare-user", "--disable-userns", "--cap-drop", "ALL",
		"--uid", strconv.Itoa(os.Getuid()), "--gid", strconv.Itoa(os.Getgid()),
		"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session",
		"--ro-bind", "/", "/",
		// /dev read-only but for /dev/shm, both in memory: bounded.
		"--dev", "/dev",
		"--size", strconv.Itoa(sandboxShmSize), "--tmpfs", "/dev/shm",
		"--remount-ro", "/dev",
		"--proc", "/proc",
		"--size", strconv.Itoa(sandboxTmpSize), "--tmpfs", "/tmp",
		"--bind", filepath.Join(dir, "merged"), ws,
		// The fresh folder, where the temporary folder is not /tmp.
		"--tmpfs", dir,
		"--chdir", ws,
		"--clearenv",
	}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		bwrap = append(bwrap, "--setenv", name, value)
	}
	bwrap = append(bwrap, "--json-status-fd", "5", "--seccomp", "6", "--",
		p.prlimit,
		"--data="+strconv.Itoa(sandboxMemory),
		"--nproc="+strconv.Itoa(sandboxProcesses),
		"--fsize="+strconv.Itoa(sandboxFileSize),
		"--core=0",
		"--", p.bash, "-c", command)
	args := append([]string{"exec", p.unshare, "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child", "--", p.sh, "-c", sandboxScript, "sh", ws}, bwrap...)
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " ")
}

// shellQuote quotes s as one word for sh and bash.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=/.,:+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sandboxStatus is what bwrap reported of the command (--json-status-fd).
type sandboxStatus struct {
	started bool // bwrap started the command
	exited  bool // and saw it end, with code
	code    int  // its exit code, 128+n when signal n ended it
}

// readSandboxStatus reads bwrap's status file: a JSON object with
// "child-pid" once the command started, then one with "exit-code".
func readSandboxStatus(path string) sandboxStatus {
	var s sandboxStatus
	f, err := os.Open(path)
	if err != nil {
		return s
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	for {
		var v struct {
			ChildPID *int `json:"child-pid"`
			ExitCode *int `json:"exit-code"`
		}
		if dec.Decode(&v) != nil {
			return s
		}
		if v.ChildPID != nil {
			s.started = true
		}
		if v.ExitCode != nil {
			s.exited, s.code = true, *v.ExitCode
		}
	}
}

// seccompFilter is the sandbox's seccomp filter, a classic BPF program as
// bwrap --seccomp reads it: socket(2) of the unix family fails with
// EACCES, every other call is allowed; so is a call of another
// architecture than this one (an i386 socketcall, an x32 call), which the
// filter cannot read the same way, refused with ENOSYS. The network
// namespace already holds the other families, and abstract unix sockets.
func seccompFilter() ([]byte, error) {
	var arch uint32
	switch runtime.GOARCH {
	case "amd64":
		arch = unix.AUDIT_ARCH_X86_64
	case "arm64":
		arch = unix.AUDIT_ARCH_AARCH64
	default:
		return nil, fmt.Errorf("no seccomp filter is written for %s", runtime.GOARCH)
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
		// Offsets in struct seccomp_data.
		offNR   = 0
		offArch = 4
		offArg0 = 16
		// x32 calls on amd64 are numbered from here.
		x32 = 0x40000000
	)
	prog := []unix.SockFilter{
		{Code: ld, K: offArch},
		{Code: jeq, Jt: 1, K: arch},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{Code: ld, K: offNR},
		{Code: jge, Jt: 4, K: x32},
		{Code: jeq, Jf: 2, K: unix.SYS_SOCKET},
		{Code: ld, K: offArg0}, // the low half of the domain, on little-endian machines
		{Code: jeq, Jt: 2, K: unix.AF_UNIX},
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)},
	}
	b := make([]byte, 0, 8*len(prog))
	for _, ins := range prog {
		b = binary.NativeEndian.AppendUint16(b, ins.Code)
		b = append(b, ins.Jt, ins.Jf)
		b = binary.NativeEndian.AppendUint32(b, ins.K)
	}
	return b, nil
}

// removeAllForce removes dir and all in it, also the folders a command
// made that the worker may not read or write (chmod 000): they are its
// own, and it makes them writable first.
func removeAllForce(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}
