package activities

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/proctest"
)

// Cases of workspace confinement and output caps that tools_test.go does
// not cover: paths a hostile model (or a file it read) might try.

func TestToolsRejectEditThroughSymlinkedDirToOutside(t *testing.T) {
	ws, _ := newWorkspace(t)
	outside := t.TempDir()
	tools := &Tools{Workspace: ws}
	secret := filepath.Join(outside, "secret.txt")
	writeFile(t, secret, "password=hunter2\n")
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "out")))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "sub"), 0o755))
	require.NoError(t, os.Symlink("../out", filepath.Join(ws, "sub", "chain"))) // a link to a link

	// An absolute path inside the workspace is named as the policy saw it:
	// relative to the workspace.
	for p, named := range map[string]string{"out/secret.txt": "out/secret.txt", "sub/chain/secret.txt": "sub/chain/secret.txt", filepath.Join(ws, "out", "secret.txt"): "out/secret.txt"} {
		requireToolError(t, call(t, tools.Edit, map[string]any{"file_path": p, "old_string": "hunter2", "new_string": "pwned"}),
			fmt.Sprintf("Edit: file_path %q is outside the workspace", named))
	}
	require.Equal(t, "password=hunter2\n", readFile(t, secret))
}

func TestToolsRejectSystemFilesByAbsolutePath(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	for _, p := range []string{"/proc/self/environ", "/proc/self/cmdline", "/etc/passwd", "/proc/self/root" + ws + "/x.txt", "/proc/self/cwd/x.txt"} {
		out := call(t, tools.Read, map[string]any{"file_path": p})
		requireToolError(t, out, fmt.Sprintf("Read: file_path %q is outside the workspace", p))
		require.NotContains(t, out.Result, "PATH=", "nothing of the file is returned")
	}
	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "/proc/self/environ", "content": "x"}), "outside the workspace")
}

func TestToolsRejectSymlinkToProcFiles(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	require.NoError(t, os.Symlink("/proc/self/environ", filepath.Join(ws, "env.txt")))
	require.NoError(t, os.Symlink("/proc/self", filepath.Join(ws, "me")))

	for _, p := range []string{"env.txt", "me/environ", "me/root/etc/passwd"} {
		out := call(t, tools.Read, map[string]any{"file_path": p})
		requireToolError(t, out, "outside the workspace")
		require.NotContains(t, out.Result, "PATH=")
	}
}

func TestToolsRejectAbsolutePathThatClimbsOutOfTheWorkspace(t *testing.T) {
	ws, parent := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(parent, "secret.txt"), "secret")
	for _, p := range []string{ws + "/../secret.txt", ws + "/./sub/../../secret.txt", ws + "/../ws-other/x.txt"} {
		requireToolError(t, call(t, tools.Read, map[string]any{"file_path": p}), "outside the workspace")
		requireToolError(t, call(t, tools.Write, map[string]any{"file_path": p, "content": "pwned"}), "outside the workspace")
	}
	require.Equal(t, "secret", readFile(t, filepath.Join(parent, "secret.txt")))
	requireNotExist(t, filepath.Join(parent, "ws-other"))
}

func TestToolsAnswerASymlinkLoopAndANulByteWithAnError(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	require.NoError(t, os.Symlink("b", filepath.Join(ws, "a")))
	require.NoError(t, os.Symlink("a", filepath.Join(ws, "b")))

	start := time.Now()
	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": "a"}), `Read: file_path "a"`)
	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "a/x.txt", "content": "x"}), `Write: file_path "a/x.txt"`)
	require.Less(t, time.Since(start), 2*time.Second, "a loop ends in an error, not a hang")

	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "x\x00/../../etc/passwd", "content": "x"}), "Write: ")
	entries, err := os.ReadDir(ws)
	require.NoError(t, err)
	require.Len(t, entries, 2, "nothing but the two links")
}

func TestToolsBashStderrFloodIsCappedToo(t *testing.T) {
	ws, _ := newWorkspace(t)
	const outputCap = 1000
	tools := &Tools{Workspace: ws, OutputCap: outputCap}

	res := requireOK(t, call(t, tools.Bash, map[string]any{"command": "head -c 20000000 /dev/zero | tr '\\0' e >&2"}))

	require.True(t, strings.HasPrefix(res, strings.Repeat("e", outputCap)), "the first bytes are kept")
	require.Contains(t, res, "[output truncated: 19999000 more bytes]")
	require.Less(t, len(res), outputCap+100)
}

func TestToolsBashGetsNoSecretOfTheWorkersEnvironment(t *testing.T) {
	ws, _ := newWorkspace(t)
	for name, value := range map[string]string{
		"OPENAI_API_KEY":                 "sk-model-key-0123456789",
		"TOLLGATE_LINK_SECRET":           "link-secret-0123456789",
		"TOLLGATE_PAYLOAD_S3_SECRET_KEY": "s3-secret-0123456789",
		"TOLLGATE_AUDIT_DB":              "postgres://u:db-password-0123456789@db/audit",
		"GOFLAGS":                        "-mod=mod",
		"LANG":                           "C.UTF-8",
	} {
		t.Setenv(name, value)
	}
	tools := &Tools{Workspace: ws, BashEnv: []string{"GOFLAGS"}}

	env := requireOK(t, call(t, tools.Bash, map[string]any{"command": "env; cat /proc/self/environ | tr '\\0' '\\n'"}))

	for _, secret := range []string{"sk-model-key", "link-secret", "s3-secret", "db-password", "OPENAI_API_KEY", "TOLLGATE_"} {
		require.NotContains(t, env, secret)
	}
	require.Contains(t, env, "GOFLAGS=-mod=mod", "a variable TOLLGATE_BASH_ENV names is passed on")
	require.Contains(t, env, "LANG=C.UTF-8", "and the base few")
	require.Contains(t, env, "PATH="+os.Getenv("PATH"))
}

// envWorkerSecret is a variable of the worker's environment that a command
// must not read, in the tests that run as an unprivileged user.
const envWorkerSecret = "TOLLGATE_TEST_WORKER_SECRET"

func TestNoProcessOfTheWorkersUserReadsItsEnvironment(t *testing.T) {
	secret := os.Getenv(envWorkerSecret)
	if os.Getuid() == 0 || secret == "" {
		t.Skip("root reads every process's environment: TestToolsAsAnUnprivilegedUser runs this as nobody")
	}
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	environ := fmt.Sprintf("/proc/%d/environ", os.Getpid())

	// A Bash command, and a plain child as a stdio MCP server is.
	out := call(t, tools.Bash, map[string]any{"command": "cat " + environ})
	require.NotContains(t, out.Result, secret)
	require.Contains(t, out.Result, "Permission denied")
	child, err := exec.Command("cat", environ).CombinedOutput()
	require.Error(t, err)
	require.NotContains(t, string(child), secret)
	require.Contains(t, string(child), "Permission denied")
}

// unprivilegedTests are tests that must hold, and not be skipped, for a
// worker that runs as an unprivileged user (as the image's does).
var unprivilegedTests = []string{
	"TestNoProcessOfTheWorkersUserReadsItsEnvironment",
	"TestToolsBashCommandThatKillsItsGuardStillEndsAtItsTimeLimit",
	"TestToolsBashGetsNoSecretOfTheWorkersEnvironment",
	"TestGuardIsTheInitOfAPIDNamespaceWhereTheSystemAllowsOne",
	"TestGuardEndsWhatACommandLeftRunningWhenItEnds",
	"TestToolsBashTimeoutKillsProcessesThatLeftItsGroupAndSession",
	"TestToolsBashWorkerKilledTakesProcessesThatLeftItsGroupAndSession",
}

// TestToolsAsAnUnprivilegedUser runs unprivilegedTests as the user nobody
// in a hidden test binary (HideWorker, as the worker's main does), with a
// secret in its environment: run as root (as CI does), the tests above
// would prove nothing of what a worker without privilege may do.
func TestToolsAsAnUnprivilegedUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("already unprivileged: the tests ran as this user")
	}
	runAsNobody(t, unprivilegedTests, envWorkerSecret+"=worker-secret-0123456789")
}

// runAsNobody runs each of tests as the user nobody, all at once, in a
// hidden test binary (HideWorker, as the worker's main does) with env
// added to its environment, and requires that each ran and passed.
func runAsNobody(t *testing.T, tests []string, env ...string) {
	t.Helper()
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	// The test binary, where nobody may run it.
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	bin := filepath.Join(dir, "activities.test")
	exe, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, exe, 0o755))

	// A process a test, all at once: most of their time is a Bash time
	// limit waited out, and each works in a workspace of its own.
	outs := make([][]byte, len(tests))
	errs := make([]error, len(tests))
	var wg sync.WaitGroup
	for i, name := range tests {
		wg.Go(func() {
			cmd := exec.Command(bin, "-test.count=1", "-test.v", "-test.run", "^"+name+"$")
			cmd.Dir = dir
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=/", envHidden + "=1", proctest.GORACEQuickExit()}, env...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
			outs[i], errs[i] = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	for i, name := range tests {
		require.NoError(t, errs[i], "%s as nobody:\n%s", name, outs[i])
		require.Contains(t, string(outs[i]), "--- PASS: "+name+" ", "%s ran and passed as nobody:\n%s", name, outs[i])
	}
}
