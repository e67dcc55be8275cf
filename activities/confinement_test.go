package activities

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
