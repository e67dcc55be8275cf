package activities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

// requireSandbox skips a test where the sandbox cannot run, saying why.
func requireSandbox(t *testing.T) {
	t.Helper()
	if err := BashSandbox(); err != nil {
		t.Skipf("no Bash sandbox on this machine: %v", err)
	}
}

// sandboxed runs command with SandboxBash in tools's workspace.
func sandboxed(t *testing.T, tools *Tools, command string) protocol.SandboxRun {
	t.Helper()
	args, err := json.Marshal(map[string]any{"command": command})
	require.NoError(t, err)
	run, err := tools.SandboxBash(context.Background(), ToolInput{Call: protocol.ToolCall{ID: "call_1", Name: protocol.ToolBash, Arguments: string(args)}})
	require.NoError(t, err)
	require.Empty(t, run.Unavailable)
	return run
}

// apply applies run with ApplySandbox in tools's workspace.
func apply(t *testing.T, tools *Tools, run protocol.SandboxRun) ToolOutput {
	t.Helper()
	args, err := json.Marshal(map[string]any{"command": run.Command})
	require.NoError(t, err)
	out, err := tools.ApplySandbox(context.Background(), SandboxApplyInput{Call: protocol.ToolCall{ID: "call_1", Name: protocol.ToolBash, Arguments: string(args)}, Run: run})
	require.NoError(t, err)
	require.NotNil(t, out.Applied)
	return out
}

// treeState describes every entry under dir, without following a link or
// opening anything but a regular file: its kind, permissions, and content's
// hash or link's target. Times are left out: applying does not keep them.
func treeState(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		info, err := d.Info()
		require.NoError(t, err)
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %s", rel, info.Mode())
		switch {
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			sum := sha256.Sum256(data)
			fmt.Fprintf(&b, " %s", hex.EncodeToString(sum[:]))
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			require.NoError(t, err)
			fmt.Fprintf(&b, " -> %s", link)
		}
		b.WriteString("\n")
		return nil
	}))
	return b.String()
}

// writeFiles writes files (path: content) under dir, making folders.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// change finds the change to p in run.
func change(t *testing.T, run protocol.SandboxRun, p string) protocol.FileChange {
	t.Helper()
	i := slices.IndexFunc(run.Changes, func(c protocol.FileChange) bool { return c.Path == p })
	require.GreaterOrEqual(t, i, 0, "a change to %s in %+v", p, run.Changes)
	return run.Changes[i]
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestSandboxBashRefusesTheNetworkAndTheHostsUnixSockets(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer tcp.Close()
	// A server's socket in the workspace itself, which the overlay shows.
	unixSock, err := net.Listen("unix", filepath.Join(ws, "server.sock"))
	require.NoError(t, err)
	defer unixSock.Close()
	accepted := make(chan string, 2)
	for _, l := range []net.Listener{tcp, unixSock} {
		go func() {
			if c, err := l.Accept(); err == nil {
				accepted <- l.Addr().String()
				c.Close()
			}
		}()
	}
	port := tcp.Addr().(*net.TCPAddr).Port

	run := sandboxed(t, tools, fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo tcp connected", port))
	require.NotEqual(t, 0, run.ExitCode, run.Output)
	require.Contains(t, run.Output, "Connection refused")
	require.NotContains(t, run.Output, "tcp connected")

	// Connecting to a unix socket needs only the file, even on a read-only
	// file system: the seccomp filter refuses the socket itself.
	if _, err := exec.LookPath("perl"); err == nil {
		run = sandboxed(t, tools, `perl -MSocket -e 'socket(S, PF_UNIX, SOCK_STREAM, 0) or die "socket: $!\n"; connect(S, pack_sockaddr_un("server.sock")) or die "connect: $!\n"; print "unix connected\n"'`)
		require.NotEqual(t, 0, run.ExitCode, run.Output)
		require.Contains(t, run.Output, "socket: Permission denied")
	}
	select {
	case addr := <-accepted:
		t.Fatalf("a sandboxed command connected to %s", addr)
	default:
	}
}

func TestSandboxBashWritesNothingOutsideTheWorkspacesView(t *testing.T) {
	requireSandbox(t)
	ws, parent := newWorkspace(t)
	outside := filepath.Join(parent, "outside.txt")
	require.NoError(t, os.WriteFile(outside, []byte("outside\n"), 0o644))
	// A link in the workspace to a file outside it, and a hard link.
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "out-link")))
	hardTarget := filepath.Join(parent, "hard.txt")
	require.NoError(t, os.WriteFile(hardTarget, []byte("hard\n"), 0o644))
	require.NoError(t, os.Link(hardTarget, filepath.Join(ws, "hard-link")))
	writeFiles(t, ws, map[string]string{"a.txt": "a\n"})
	before := treeState(t, parent)
	tools := &Tools{Workspace: ws}

	// Where the workspace lies in /tmp, as here, its folder in the sandbox
	// is in the sandbox's own /tmp, where these writes land and vanish.
	for _, command := range []string{
		"echo evil > ../outside.txt",
		"echo evil > " + outside,
		"echo evil > out-link",
		"echo evil > /proc/self/root" + outside,
		"echo evil > /proc/1/root" + outside,
	} {
		run := sandboxed(t, tools, command)
		require.Empty(t, run.Changes, command)
	}
	// Elsewhere, writes fail.
	for _, command := range []string{
		"echo evil > /etc/tollgate-sandbox-test",
		"echo evil > $HOME/tollgate-sandbox-test",
		"mount -o remount,rw /",
		"umount " + ws,
		"unshare -Urm true",
		// The sandbox's own folder, named in bwrap's command line.
		`dir=$(tr '\0' '\n' < /proc/1/cmdline | grep -m1 tollgate-sandbox-); test -n "$dir" && echo evil > "$dir"/upper/evil`,
		`dir=$(tr '\0' '\n' < /proc/1/cmdline | grep -m1 tollgate-sandbox-); test -n "$dir" && echo evil > "$dir"/work/evil`,
	} {
		run := sandboxed(t, tools, command)
		require.NotEqual(t, 0, run.ExitCode, "%s: %s", command, run.Output)
		require.Empty(t, run.Changes, command)
	}
	require.NoFileExists(t, "/etc/tollgate-sandbox-test")

	run := sandboxed(t, tools, "echo more >> hard-link && echo new > a.txt")
	require.Equal(t, 0, run.ExitCode, run.Output)
	require.Len(t, run.Changes, 2)
	require.Equal(t, before, treeState(t, parent), "nothing outside the sandbox changed, the workspace included")

	out := apply(t, tools, run)
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	requireFileContent(t, filepath.Join(ws, "hard-link"), "hard\nmore\n")
	requireFileContent(t, hardTarget, "hard\n")
	requireFileContent(t, outside, "outside\n")
}

func requireFileContent(t *testing.T, p, content string) {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, content, string(b))
}

func TestSandboxBashSeesNoneOfTheWorkersEnvironmentOrProcesses(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	t.Setenv("TOLLGATE_SANDBOX_TEST_SECRET", "secret-0123456789")
	t.Setenv("GOFLAGS", "-mod=mod")
	tools := &Tools{Workspace: ws, BashEnv: []string{"GOFLAGS"}}

	run := sandboxed(t, tools, `env; echo; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done; echo; ls /proc`)
	require.Equal(t, 0, run.ExitCode, run.Output)
	require.NotContains(t, run.Output, "secret-0123456789")
	require.NotContains(t, run.Output, "TOLLGATE_SANDBOX_TEST_SECRET")
	require.Contains(t, run.Output, "GOFLAGS=-mod=mod", "a variable BashEnv names is passed on")
	require.Contains(t, run.Output, "PATH="+os.Getenv("PATH"))
	var pids []int
	for _, f := range strings.Fields(run.Output[strings.LastIndex(run.Output, "\n\n"):]) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	require.NotEmpty(t, pids)
	require.NotContains(t, pids, os.Getpid())
	require.Less(t, len(pids), 10, "only the sandbox's few processes: %v", pids)
}

func TestSandboxBashLimitsItsProcesses(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	run := sandboxed(t, &Tools{Workspace: ws}, "ulimit -d; ulimit -u; ulimit -f; ulimit -c")
	require.Equal(t, 0, run.ExitCode, run.Output)
	require.Equal(t, []string{
		strconv.Itoa(sandboxMemory >> 10), strconv.Itoa(sandboxProcesses), strconv.Itoa(sandboxFileSize >> 10), "0",
	}, strings.Fields(run.Output))
}

// markedProcesses lists the processes of the host whose command line holds
// marker.
func markedProcesses(marker string) []int {
	var pids []int
	eachProcess(func(pid int, dir string) {
		if b, err := os.ReadFile(dir + "/cmdline"); err == nil && bytes.Contains(b, []byte(marker)) && !processGone(pid) {
			pids = append(pids, pid)
		}
	})
	return pids
}

// markedSleeps is a command whose sleeps carry marker in a command line,
// and that tries to escape its tree: a job in the background, one that
// leaves its session, and a kill of its parent and of all it may signal.
func markedSleeps(marker string) string {
	return fmt.Sprintf(`bash -c 'sleep 1000; : %[1]s' &
setsid bash -c 'sleep 1000; : %[1]s' &
(bash -c 'sleep 1000; : %[1]s' &)
kill -9 $PPID
sleep 1000`, marker)
}

func TestSandboxBashKillsItsWholeTreeAtItsTimeLimit(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	marker := fmt.Sprintf("tollgate-marker-%d-%d", os.Getpid(), time.Now().UnixNano())
	tools := &Tools{Workspace: ws, BashTimeout: time.Second}

	run := sandboxed(t, tools, markedSleeps(marker)+"; : "+marker)
	require.True(t, run.TimedOut)
	require.Equal(t, -1, run.ExitCode)
	require.Empty(t, markedProcesses(marker), "no process of the command is left once the run returns")

	// A command that kills all it may signal is killed all the same.
	run = sandboxed(t, tools, "kill -9 -1; sleep 1000 &"+markedSleeps(marker))
	require.True(t, run.TimedOut)
	require.Empty(t, markedProcesses(marker))
}

func TestSandboxBashCancelKillsItsWholeTree(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	marker := fmt.Sprintf("tollgate-marker-%d-%d", os.Getpid(), time.Now().UnixNano())
	tools := &Tools{Workspace: ws}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args, err := json.Marshal(map[string]any{"command": markedSleeps(marker)})
	require.NoError(t, err)

	errs := make(chan error, 1)
	go func() {
		_, err := tools.SandboxBash(ctx, ToolInput{Call: protocol.ToolCall{Arguments: string(args)}})
		errs <- err
	}()
	// The guard, the chain, and three sleeping shells.
	require.Eventually(t, func() bool { return len(markedProcesses(marker)) >= 5 }, killWait, 10*time.Millisecond, "the command started")
	cancel()
	select {
	case err := <-errs:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(killWait):
		t.Fatal("the cancelled SandboxBash call did not return")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, markedProcesses(marker)) }, killWait, 10*time.Millisecond,
		"no process of the command is left")
}

// sandboxWorkspace is a workspace for the tests of changes: text, binary, a
// link, folders.
var sandboxWorkspace = map[string]string{
	"changed.txt":      "one\ntwo\nthree\n",
	"deleted.txt":      "gone\n",
	"moved.txt":        "moved, not changed\n",
	"mode.sh":          "echo hi\n",
	"dir/a.txt":        "a\n",
	"dir/sub/b.txt":    "b\n",
	"opaque/kept.txt":  "kept\n",
	"opaque/gone.txt":  "gone too\n",
	"file-to-dir":      "a file\n",
	"dir-to-file/x":    "x\n",
	"keep/unchanged.c": "int main;\n",
	"touched.txt":      "touched only\n",
}

// everyChange changes sandboxWorkspace in every way there is.
const everyChange = `set -e
echo four >> changed.txt
rm deleted.txt
mv moved.txt renamed.txt
chmod 755 mode.sh
rm -r dir
rm -r opaque && mkdir opaque && echo kept > opaque/kept.txt && echo new > opaque/new.txt
rm file-to-dir && mkdir file-to-dir && echo inside > file-to-dir/f
rm -r dir-to-file && echo now a file > dir-to-file
printf 'bin\0ary' > binary.bin
ln -s changed.txt link
rm link-gone
mkdir -p empty new/deep && echo deep > new/deep/f.txt
touch touched.txt
echo done`

func newSandboxWorkspace(t *testing.T) string {
	t.Helper()
	ws, _ := newWorkspace(t)
	writeFiles(t, ws, sandboxWorkspace)
	require.NoError(t, os.Symlink("dir/a.txt", filepath.Join(ws, "link-gone")))
	settle(t)
	return ws
}

// settle returns once what was written so far is older than a run that
// starts now, less the slack a file's ctime is given (clockSlack): a run
// takes a file changed within it for one changed while it ran.
func settle(t *testing.T) {
	t.Helper()
	written := time.Now()
	require.Eventually(t, func() bool { return time.Since(written) > clockSlack }, time.Second, time.Millisecond)
}

func TestSandboxBashReportsWhatTheCommandChangedAndLeavesTheWorkspace(t *testing.T) {
	requireSandbox(t)
	ws := newSandboxWorkspace(t)
	before := treeState(t, ws)
	tools := &Tools{Workspace: ws}

	run := sandboxed(t, tools, everyChange)
	require.Equal(t, 0, run.ExitCode, run.Output)
	require.Equal(t, "done\n", run.Output)
	require.Empty(t, run.TooLarge)
	require.Equal(t, before, treeState(t, ws), "the workspace is untouched")

	got := map[string]string{}
	for _, c := range run.Changes {
		got[c.Path] = c.Op + " " + c.Kind
	}
	require.Equal(t, map[string]string{
		"changed.txt":      "changed file",
		"deleted.txt":      "deleted file",
		"renamed.txt":      "renamed file",
		"mode.sh":          "changed file",
		"dir/a.txt":        "deleted file",
		"dir/sub/b.txt":    "deleted file",
		"dir/sub":          "deleted dir",
		"dir":              "deleted dir",
		"opaque/gone.txt":  "deleted file",
		"opaque/new.txt":   "added file",
		"file-to-dir":      "deleted file",
		"file-to-dir/f":    "added file",
		"dir-to-file/x":    "deleted file",
		"dir-to-file":      "added file",
		"binary.bin":       "added file",
		"link":             "added symlink",
		"link-gone":        "deleted symlink",
		"empty":            "added dir",
		"new/deep/f.txt":   "added file",
		"touched.txt":      "", // copied up, not changed
		"opaque/kept.txt":  "", // made again as it was
		"keep/unchanged.c": "",
	}, mergeEmpty(got, "touched.txt", "opaque/kept.txt", "keep/unchanged.c"))
	// dir-to-file is a deleted folder and an added file.
	require.Len(t, slices.DeleteFunc(slices.Clone(run.Changes), func(c protocol.FileChange) bool { return c.Path != "dir-to-file" }), 2)

	c := change(t, run, "changed.txt")
	require.Equal(t, sha("one\ntwo\nthree\n"), c.Before)
	require.Equal(t, "one\ntwo\nthree\nfour\n", string(c.Content))
	require.Equal(t, "@@ line 3 @@\n  three\n+ four", c.Diff)
	require.False(t, c.Binary)

	c = change(t, run, "renamed.txt")
	require.Equal(t, "moved.txt", c.From)
	require.Equal(t, sha("moved, not changed\n"), c.Before)

	c = change(t, run, "mode.sh")
	require.Equal(t, uint32(0o755), c.Mode)
	require.Equal(t, "mode 0644 → 0755\n", c.Diff)

	c = change(t, run, "binary.bin")
	require.True(t, c.Binary)
	require.Empty(t, c.Diff)
	require.Equal(t, "bin\x00ary", string(c.Content))

	c = change(t, run, "link")
	require.Equal(t, "changed.txt", c.Link)
	c = change(t, run, "link-gone")
	require.Equal(t, linkIdentity("dir/a.txt"), c.Before)
	require.Equal(t, sha("a\n"), change(t, run, "dir/a.txt").Before)
}

// mergeEmpty is got with each of paths that it lacks as "".
func mergeEmpty(got map[string]string, paths ...string) map[string]string {
	for _, p := range paths {
		if _, ok := got[p]; !ok {
			got[p] = ""
		}
	}
	return got
}

func TestApplySandboxMakesTheWorkspaceWhatTheCommandWouldHaveMade(t *testing.T) {
	requireSandbox(t)
	ws := newSandboxWorkspace(t)
	real := newSandboxWorkspace(t)
	tools := &Tools{Workspace: ws}

	run := sandboxed(t, tools, everyChange)
	out := apply(t, tools, run)
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	require.Empty(t, out.Applied.Conflicts)
	require.True(t, strings.HasPrefix(out.Result, "done\n\n\nApplied to the workspace: "), out.Result)

	cmd := exec.Command("bash", "-c", everyChange)
	cmd.Dir = real
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	require.Equal(t, treeState(t, real), treeState(t, ws))
}

func TestApplySandboxRefusesWhatChangedSinceTheRunAndAppliesTheRest(t *testing.T) {
	requireSandbox(t)
	ws, parent := newWorkspace(t)
	writeFiles(t, ws, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "gone.txt": "gone\n"})
	settle(t)
	tools := &Tools{Workspace: ws}

	run := sandboxed(t, tools, "echo A > a.txt; echo B > b.txt; echo C > c.txt; rm gone.txt; mkdir sub; echo s > sub/s.txt")
	require.Equal(t, 0, run.ExitCode, run.Output)
	// Meanwhile, in the workspace: a.txt is edited, c.txt made, gone.txt
	// edited, and sub made a link to a folder outside.
	writeFiles(t, ws, map[string]string{"a.txt": "edited\n", "c.txt": "mine\n", "gone.txt": "edited\n"})
	require.NoError(t, os.Mkdir(filepath.Join(parent, "outside"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(parent, "outside"), filepath.Join(ws, "sub")))

	out := apply(t, tools, run)
	require.Equal(t, protocol.StatusError, out.Status)
	require.Equal(t, []string{"b.txt"}, out.Applied.Applied)
	require.Len(t, out.Applied.Conflicts, 4)
	for _, want := range []string{"a.txt (it changed in the workspace after the command ran)", "c.txt (it now exists in the workspace)",
		"gone.txt (it changed in the workspace after the command ran)", "sub/s.txt (sub is no longer a folder)"} {
		require.Contains(t, out.Applied.Conflicts, want)
		require.Contains(t, out.Result, want)
	}
	requireFileContent(t, filepath.Join(ws, "a.txt"), "edited\n")
	requireFileContent(t, filepath.Join(ws, "b.txt"), "B\n")
	requireFileContent(t, filepath.Join(ws, "c.txt"), "mine\n")
	requireFileContent(t, filepath.Join(ws, "gone.txt"), "edited\n")
	requireNotExist(t, filepath.Join(parent, "outside", "s.txt"))
}

func TestApplySandboxAnswersTheModelAsBashWould(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws, BashTimeout: time.Second}

	out := apply(t, tools, sandboxed(t, tools, "echo oops; echo x > x.txt; exit 3"))
	require.Equal(t, protocol.StatusError, out.Status)
	require.Equal(t, "Bash: command failed with exit code 3\n\noops\n\n\nApplied to the workspace: x.txt.", out.Result)

	out = apply(t, tools, sandboxed(t, tools, "echo y > y.txt; sleep 10"))
	require.Equal(t, protocol.StatusError, out.Status)
	require.Equal(t, "Bash: command timed out after 1s\n\n(no output)\n\nApplied to the workspace: y.txt.", out.Result)

	out = apply(t, tools, sandboxed(t, tools, "true"))
	require.Equal(t, protocol.StatusOK, out.Status)
	require.Equal(t, "(no output)\n\nThe command changed no file in the workspace.", out.Result)
}

func TestSandboxBashNeitherHangsOnAPipeNorReadsAHugeFileWhole(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	require.NoError(t, syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	big := filepath.Join(ws, "big")
	require.NoError(t, os.WriteFile(big, nil, 0o644))
	require.NoError(t, os.Truncate(big, 64<<20))
	tools := &Tools{Workspace: ws}

	start := time.Now()
	run := sandboxed(t, tools, "ls -l > listing.txt")
	require.Equal(t, 0, run.ExitCode, run.Output)
	require.Len(t, run.Changes, 1)
	require.Empty(t, run.TooLarge)

	// Past the cap, the run lists the change and cannot be applied.
	run = sandboxed(t, tools, "echo more >> big; rm fifo")
	require.Equal(t, 0, run.ExitCode, run.Output)
	require.Contains(t, run.TooLarge, "more than 16 MiB")
	require.Equal(t, []string{"fifo (deleted, a named pipe)"}, run.Omitted)
	c := change(t, run, "big")
	require.Nil(t, c.Content)
	require.Equal(t, int64(64<<20+5), c.Size)
	out := apply(t, tools, run)
	require.Equal(t, protocol.StatusError, out.Status)
	require.Contains(t, out.Result, "Nothing was applied to the workspace: the command's changes are too large")
	info, err := os.Stat(big)
	require.NoError(t, err)
	require.Equal(t, int64(64<<20), info.Size())
	require.Less(t, time.Since(start), 20*time.Second)
}

func TestSandboxBashWithTooManyChangesIsTooLarge(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	run := sandboxed(t, &Tools{Workspace: ws}, fmt.Sprintf("mkdir many && cd many && seq %d | xargs touch", maxSandboxFiles+1))
	require.Equal(t, 0, run.ExitCode, run.Output)
	require.Equal(t, fmt.Sprintf("it changed more than %d files", maxSandboxFiles), run.TooLarge)
	require.LessOrEqual(t, len(run.Changes), maxSandboxFiles)
}

func TestSandboxBashWithFoldersNestedTooDeepIsTooLargeAndQuick(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	start := time.Now()
	run := sandboxed(t, &Tools{Workspace: ws}, fmt.Sprintf("mkdir -p $(printf 'a/%%.0s' $(seq %d))", 3*maxSandboxDepth))
	require.Equal(t, 0, run.ExitCode, run.Output)
	require.Equal(t, fmt.Sprintf("it changed folders nested more than %d deep", maxSandboxDepth), run.TooLarge)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestSandboxBashHasNoWritableMemoryButItsBoundedOnes(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	run := sandboxed(t, &Tools{Workspace: ws}, "echo x > /dev/null && echo x > /dev/shm/x && echo x > /tmp/x && echo ok && echo x > /dev/x")
	require.NotEqual(t, 0, run.ExitCode)
	require.Contains(t, run.Output, "ok\n")
	require.Contains(t, run.Output, "/dev/x: Read-only file system")
	require.Empty(t, run.Changes)
}

func TestApplySandboxRefusesAPathOutsideTheWorkspace(t *testing.T) {
	ws, parent := newWorkspace(t)
	root, err := os.OpenRoot(ws)
	require.NoError(t, err)
	defer root.Close()
	file := func(p string) protocol.FileChange {
		return protocol.FileChange{Path: p, Op: protocol.ChangeAdded, Kind: "file", Mode: 0o644, Content: []byte("evil")}
	}
	renamed := file("ok.txt")
	renamed.Op, renamed.From, renamed.Before = protocol.ChangeRenamed, "../victim.txt", sha("victim\n")
	writeFiles(t, parent, map[string]string{"victim.txt": "victim\n"})

	done := applyChanges(root, []protocol.FileChange{file("../evil.txt"), file("/tmp/evil.txt"), file("a/../../evil.txt"), file("."), renamed, file("fine.txt")})
	require.Equal(t, []string{"fine.txt"}, done.Applied)
	require.Len(t, done.Conflicts, 5)
	requireNotExist(t, filepath.Join(parent, "evil.txt"))
	requireFileContent(t, filepath.Join(parent, "victim.txt"), "victim\n")
}

func TestSandboxBashReadsFilesTheCommandMadeUnreadable(t *testing.T) {
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	run := sandboxed(t, tools, "mkdir -p locked && echo secret > locked/f && chmod 000 locked/f locked")
	require.Equal(t, 0, run.ExitCode, run.Output)
	require.Equal(t, "secret\n", string(change(t, run, "locked/f").Content))
	require.Equal(t, uint32(0), change(t, run, "locked/f").Mode)
}

func TestSandboxBashWhereTheSandboxCannotRunSaysWhy(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	run, err := tools.SandboxBash(context.Background(), ToolInput{Call: protocol.ToolCall{Arguments: `{}`}})
	require.NoError(t, err)
	if BashSandbox() != nil {
		require.Equal(t, BashSandbox().Error(), run.Unavailable)
		return
	}
	require.Equal(t, "Bash: command is required", run.Unavailable)
}

// sandboxUnprivilegedTests must hold, and not be skipped, for a worker that
// runs as an unprivileged user.
var sandboxUnprivilegedTests = []string{
	"TestSandboxBashRefusesTheNetworkAndTheHostsUnixSockets",
	"TestSandboxBashWritesNothingOutsideTheWorkspacesView",
	"TestSandboxBashSeesNoneOfTheWorkersEnvironmentOrProcesses",
	"TestSandboxBashKillsItsWholeTreeAtItsTimeLimit",
	"TestSandboxBashReportsWhatTheCommandChangedAndLeavesTheWorkspace",
	"TestApplySandboxMakesTheWorkspaceWhatTheCommandWouldHaveMade",
	"TestApplySandboxRefusesWhatChangedSinceTheRunAndAppliesTheRest",
	"TestSandboxBashReadsFilesTheCommandMadeUnreadable",
	"TestSandboxBashForkBombStopsAtItsProcessLimit",
}

func TestSandboxBashForkBombStopsAtItsProcessLimit(t *testing.T) {
	requireSandbox(t)
	if os.Getuid() == 0 {
		t.Skip("the kernel applies no process limit to root: TestSandboxAsAnUnprivilegedUser runs this as nobody")
	}
	ws, _ := newWorkspace(t)
	run := sandboxed(t, &Tools{Workspace: ws, BashTimeout: 10 * time.Second},
		fmt.Sprintf("for i in $(seq %d); do sleep 5 & done 2>&1 | grep -m1 -o 'Resource temporarily unavailable'; kill -9 -1", sandboxProcesses+10))
	require.Contains(t, run.Output, "Resource temporarily unavailable")
}

// TestSandboxAsAnUnprivilegedUser runs sandboxUnprivilegedTests as the user
// nobody, as TestToolsAsAnUnprivilegedUser does.
func TestSandboxAsAnUnprivilegedUser(t *testing.T) {
	requireSandbox(t)
	if os.Getuid() != 0 {
		t.Skip("already unprivileged: the tests ran as this user")
	}
	runAsNobody(t, sandboxUnprivilegedTests)
}

// BenchmarkSandbox measures what the sandbox adds to a command: `true`
// under the guard as Bash runs it, and in the sandbox, with its changes
// read (none). Each reports its median too (p50-ms).
func BenchmarkSandbox(b *testing.B) {
	if err := BashSandbox(); err != nil {
		b.Skipf("no Bash sandbox on this machine: %v", err)
	}
	ws := b.TempDir()
	env := allowedEnv(nil)
	progs, _ := sandboxProbe()
	for name, run := range map[string]func() error{
		"plain": func() error {
			_, err := runBash(context.Background(), ws, "true", env, time.Minute, DefaultOutputCap)
			return err
		},
		"sandboxed": func() error {
			_, err := runSandboxed(context.Background(), progs, ws, "true", env, time.Minute, DefaultOutputCap)
			return err
		},
	} {
		b.Run(name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := run(); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "p50-ms")
		})
	}
}

func TestApplySandboxRefusesAFileThatChangedInTheWorkspaceWhileTheCommandRan(t *testing.T) {
	// The command copies a.txt and b.txt as they were, then someone edits
	// them in the workspace before it ends: what it wrote is based on
	// what they were, and would undo the edits if applied.
	requireSandbox(t)
	ws, _ := newWorkspace(t)
	writeFiles(t, ws, map[string]string{"a.txt": "old\n", "b.txt": "old\n", "c.txt": "old\n"})
	settle(t)
	tools := &Tools{Workspace: ws, BashTimeout: 30 * time.Second}
	// The command waits, in sleeps named by marker, which the test sees
	// from outside the sandbox, for a file the test makes where the
	// sandbox sees it as it changes: outside both the workspace (an
	// overlay does not follow changes under it) and /tmp (its own).
	signals, err := os.MkdirTemp("/var/tmp", "tollgate-sandbox-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(signals) })
	require.NoError(t, os.Chmod(signals, 0o755))
	goFile := filepath.Join(signals, "go")
	marker := fmt.Sprintf("tollgate-sandbox-waits-%d-%d", os.Getpid(), time.Now().UnixNano())
	command := `printf 'sandbox\n' >> a.txt; rm b.txt; printf 'sandbox\n' >> c.txt; while [ ! -e ` + goFile + ` ]; do (exec -a ` + marker + ` sleep 0.01); done`
	runs := make(chan protocol.SandboxRun, 1)
	go func() { runs <- sandboxed(t, tools, command) }()
	require.Eventually(t, func() bool {
		found := false
		eachProcess(func(_ int, proc string) {
			cmdline, _ := os.ReadFile(proc + "/cmdline")
			found = found || strings.HasPrefix(string(cmdline), marker+"\x00")
		})
		return found
	}, killWait, 5*time.Millisecond, "the command copied the files and waits")
	writeFiles(t, ws, map[string]string{"a.txt": "edited\n", "b.txt": "edited\n"})
	require.NoError(t, os.WriteFile(goFile, nil, 0o644))
	run := <-runs
	require.Equal(t, 0, run.ExitCode, run.Output)

	out := apply(t, tools, run)
	require.Equal(t, "edited\n", readText(t, filepath.Join(ws, "a.txt")), "the edit made while the command ran is kept: %s", out.Result)
	require.Equal(t, "edited\n", readText(t, filepath.Join(ws, "b.txt")), "and not deleted: %s", out.Result)
	require.Equal(t, "old\nsandbox\n", readText(t, filepath.Join(ws, "c.txt")), "a file no one touched is applied")
	require.Len(t, out.Applied.Conflicts, 2, "%s", out.Result)
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
