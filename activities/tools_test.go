package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/tollgate/tollgate/protocol"
)

type toolFunc func(context.Context, ToolInput) (ToolOutput, error)

// newWorkspace returns a workspace folder whose parent belongs to the test,
// so that a test can prove nothing was written next to it.
func newWorkspace(t *testing.T) (ws, parent string) {
	t.Helper()
	parent = t.TempDir()
	ws = filepath.Join(parent, "ws")
	require.NoError(t, os.Mkdir(ws, 0o755))
	return ws, parent
}

// callRaw calls a tool with arguments as the model wrote them. A tool never
// fails its activity for a bad call, so the error must be nil.
func callRaw(t *testing.T, tool toolFunc, arguments string) ToolOutput {
	t.Helper()
	out, err := tool(context.Background(), ToolInput{Call: protocol.ToolCall{ID: "call_1", Arguments: arguments}})
	require.NoError(t, err)
	return out
}

func call(t *testing.T, tool toolFunc, args map[string]any) ToolOutput {
	t.Helper()
	b, err := json.Marshal(args)
	require.NoError(t, err)
	return callRaw(t, tool, string(b))
}

func requireOK(t *testing.T, out ToolOutput) string {
	t.Helper()
	require.Equal(t, protocol.StatusOK, out.Status, "result: %s", out.Result)
	return out.Result
}

func requireToolError(t *testing.T, out ToolOutput, contains string) {
	t.Helper()
	require.Equal(t, protocol.StatusError, out.Status, "result: %s", out.Result)
	require.Contains(t, out.Result, contains)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func requireNotExist(t *testing.T, path string) {
	t.Helper()
	_, err := os.Lstat(path)
	require.ErrorIs(t, err, fs.ErrNotExist, "%s must not exist", path)
}

func TestToolsWriteThenReadRoundTrip(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}

	res := requireOK(t, call(t, tools.Write, map[string]any{"file_path": "notes/a.txt", "content": "one\ntwo\n"}))
	require.Equal(t, `Created "notes/a.txt" (8 bytes)`, res)
	require.Equal(t, "one\ntwo\n", readFile(t, filepath.Join(ws, "notes", "a.txt")))

	res = requireOK(t, call(t, tools.Read, map[string]any{"file_path": "notes/a.txt"}))
	require.Equal(t, "     1\tone\n     2\ttwo\n", res)

	res = requireOK(t, call(t, tools.Write, map[string]any{"file_path": "notes/a.txt", "content": "three"}))
	require.Equal(t, `Updated "notes/a.txt" (5 bytes)`, res)
	res = requireOK(t, call(t, tools.Read, map[string]any{"file_path": "notes/a.txt"}))
	require.Equal(t, "     1\tthree\n", res)
}

func TestToolsReadOffsetAndLimitSelectNumberedLines(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(ws, "f.txt"), "a\nb\nc\nd\ne\n")

	res := requireOK(t, call(t, tools.Read, map[string]any{"file_path": "f.txt", "offset": 2, "limit": 2}))
	require.Equal(t, "     2\tb\n     3\tc\n", res)

	res = requireOK(t, call(t, tools.Read, map[string]any{"file_path": "f.txt", "offset": 5}))
	require.Equal(t, "     5\te\n", res)

	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": "f.txt", "offset": 9}),
		`Read: offset 9 is past the end of "f.txt", which has 5 lines`)
	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": "f.txt", "limit": 0}),
		"Read: limit must be 1 or more, not 0")
}

func TestToolsReadOfEmptyFileSaysSo(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(ws, "empty.txt"), "")

	require.Equal(t, "(the file is empty)", requireOK(t, call(t, tools.Read, map[string]any{"file_path": "empty.txt"})))
}

func TestToolsReadCapsOutputAtOutputCap(t *testing.T) {
	ws, _ := newWorkspace(t)
	const outputCap = 200
	tools := &Tools{Workspace: ws, OutputCap: outputCap}
	writeFile(t, filepath.Join(ws, "many.txt"), strings.Repeat("a line of text\n", 1000))
	writeFile(t, filepath.Join(ws, "wide.txt"), strings.Repeat("x", 1<<20))

	for _, name := range []string{"many.txt", "wide.txt"} {
		res := requireOK(t, call(t, tools.Read, map[string]any{"file_path": name}))
		body, note, found := strings.Cut(res, "\n... [output truncated at 200 bytes in line ")
		require.True(t, found, "result of %s: %s", name, res)
		require.Len(t, body, outputCap)
		require.Less(t, len(note), 100)
	}
}

func TestToolsReadOfDirectoryIsError(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	require.NoError(t, os.Mkdir(filepath.Join(ws, "sub"), 0o755))

	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": "sub"}), `Read: "sub" is a directory, not a file`)
	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": "."}), `Read: "." is a directory, not a file`)
}

func TestToolsReadOfMissingFileIsError(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}

	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": "nope.txt"}), `Read: "nope.txt" does not exist`)
	requireToolError(t, call(t, tools.Edit, map[string]any{"file_path": "nope.txt", "old_string": "a", "new_string": "b"}),
		`Edit: "nope.txt" does not exist`)
}

func TestToolsWriteOrEditOfADirectoryIsError(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	require.NoError(t, os.Mkdir(filepath.Join(ws, "sub"), 0o755))

	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "sub", "content": "x"}), `Write: "sub" is a directory, not a file`)
	requireToolError(t, call(t, tools.Edit, map[string]any{"file_path": "sub", "old_string": "a", "new_string": "b"}), `Edit: "sub" is a directory, not a file`)
}

func TestToolsAcceptRelativeAndAbsolutePathsInsideWorkspace(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	abs := filepath.Join(ws, "dir", "f.txt")

	requireOK(t, call(t, tools.Write, map[string]any{"file_path": abs, "content": "hello\n"}))
	require.Equal(t, "hello\n", readFile(t, abs))

	for _, p := range []string{"dir/f.txt", "./dir/f.txt", "dir/../dir/f.txt", abs} {
		require.Equal(t, "     1\thello\n", requireOK(t, call(t, tools.Read, map[string]any{"file_path": p})), p)
	}
	requireOK(t, call(t, tools.Edit, map[string]any{"file_path": abs, "old_string": "hello", "new_string": "bye"}))
	require.Equal(t, "bye\n", readFile(t, abs))
}

func TestToolsWorkspaceReachedThroughSymlinkAcceptsBothSpellings(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "ws")
	require.NoError(t, os.Symlink(real, link))
	tools := &Tools{Workspace: link}

	requireOK(t, call(t, tools.Write, map[string]any{"file_path": filepath.Join(link, "a.txt"), "content": "x"}))
	require.Equal(t, "x", readFile(t, filepath.Join(real, "a.txt")))
	require.Equal(t, "     1\tx\n", requireOK(t, call(t, tools.Read, map[string]any{"file_path": filepath.Join(real, "a.txt")})))
	require.Equal(t, "     1\tx\n", requireOK(t, call(t, tools.Read, map[string]any{"file_path": "a.txt"})))
}

func TestToolsRunOnlyPathsWhoseLinksThePolicySawResolved(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	require.NoError(t, os.Mkdir(filepath.Join(ws, "real"), 0o755))
	writeFile(t, filepath.Join(ws, "real", "f.txt"), "inside\n")
	require.NoError(t, os.Symlink("real", filepath.Join(ws, "alias")))
	require.NoError(t, os.Symlink(filepath.Join(ws, "real", "f.txt"), filepath.Join(ws, "abs-link.txt")))

	// The turn gives the tool the resolved path (ResolveArguments), which
	// runs; a path that still leads through a link was made a link after
	// the policy read the call, and is refused, naming the real file.
	require.Equal(t, "     1\tinside\n", requireOK(t, call(t, tools.Read, map[string]any{"file_path": "real/f.txt"})))
	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": "alias/f.txt"}),
		`Read: file_path "alias/f.txt" leads through a symbolic link to "real/f.txt", which is not the file this call was checked for: call again with "real/f.txt"`)
	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": "abs-link.txt"}), `leads through a symbolic link to "real/f.txt"`)
	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "alias/new.txt", "content": "n"}), `leads through a symbolic link to "real/new.txt"`)
	requireToolError(t, call(t, tools.Edit, map[string]any{"file_path": "abs-link.txt", "old_string": "inside", "new_string": "pwned"}), "symbolic link")
	requireNotExist(t, filepath.Join(ws, "real", "new.txt"))
	require.Equal(t, "inside\n", readFile(t, filepath.Join(ws, "real", "f.txt")))
	requireOK(t, call(t, tools.Write, map[string]any{"file_path": "real/new.txt", "content": "n"}))
	require.Equal(t, "n", readFile(t, filepath.Join(ws, "real", "new.txt")))
}

func TestToolsRejectDotDotTraversal(t *testing.T) {
	ws, parent := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(parent, "secret.txt"), "secret")

	for _, p := range []string{"../secret.txt", "sub/../../secret.txt", "../ws2/x.txt"} {
		want := fmt.Sprintf("file_path %q is outside the workspace", p)
		requireToolError(t, call(t, tools.Read, map[string]any{"file_path": p}), "Read: "+want)
		requireToolError(t, call(t, tools.Write, map[string]any{"file_path": p, "content": "pwned"}), "Write: "+want)
		requireToolError(t, call(t, tools.Edit, map[string]any{"file_path": p, "old_string": "secret", "new_string": "pwned"}), "Edit: "+want)
	}
	require.Equal(t, "secret", readFile(t, filepath.Join(parent, "secret.txt")))
	requireNotExist(t, filepath.Join(parent, "ws2"))
	requireNotExist(t, filepath.Join(ws, "sub"))
}

func TestToolsRejectAbsolutePathOutsideWorkspace(t *testing.T) {
	ws, _ := newWorkspace(t)
	outside := t.TempDir()
	tools := &Tools{Workspace: ws}
	secret := filepath.Join(outside, "secret.txt")
	writeFile(t, secret, "secret")
	fresh := filepath.Join(outside, "new", "x.txt")

	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": secret}), fmt.Sprintf("Read: file_path %q is outside the workspace", secret))
	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": fresh, "content": "pwned"}), fmt.Sprintf("Write: file_path %q is outside the workspace", fresh))
	requireToolError(t, call(t, tools.Edit, map[string]any{"file_path": secret, "old_string": "secret", "new_string": "pwned"}), "outside the workspace")

	require.Equal(t, "secret", readFile(t, secret))
	requireNotExist(t, filepath.Join(outside, "new"))
}

func TestToolsRejectSymlinkedFileToOutside(t *testing.T) {
	ws, _ := newWorkspace(t)
	outside := t.TempDir()
	tools := &Tools{Workspace: ws}
	secret := filepath.Join(outside, "secret.txt")
	writeFile(t, secret, "secret")
	require.NoError(t, os.Symlink(secret, filepath.Join(ws, "link.txt")))
	require.NoError(t, os.Symlink("../"+filepath.Base(outside)+"/secret.txt", filepath.Join(ws, "rel-link.txt")))

	for _, p := range []string{"link.txt", "rel-link.txt"} {
		want := fmt.Sprintf("file_path %q is outside the workspace: a symbolic link leads to", p)
		requireToolError(t, call(t, tools.Read, map[string]any{"file_path": p}), "Read: "+want)
		requireToolError(t, call(t, tools.Write, map[string]any{"file_path": p, "content": "pwned"}), "Write: "+want)
		requireToolError(t, call(t, tools.Edit, map[string]any{"file_path": p, "old_string": "secret", "new_string": "pwned"}), "Edit: "+want)
	}
	require.Equal(t, "secret", readFile(t, secret))
}

func TestToolsRejectSymlinkedDirToOutside(t *testing.T) {
	ws, _ := newWorkspace(t)
	outside := t.TempDir()
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(outside, "secret.txt"), "secret")
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "out")))

	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": "out/secret.txt"}),
		`Read: file_path "out/secret.txt" is outside the workspace: a symbolic link leads to`)
	requireToolError(t, call(t, tools.Read, map[string]any{"file_path": filepath.Join(ws, "out", "secret.txt")}), "outside the workspace")
	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "out/new.txt", "content": "pwned"}),
		`Write: file_path "out/new.txt" is outside the workspace: a symbolic link leads to`)
	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "out/deep/new.txt", "content": "pwned"}), "outside the workspace")

	requireNotExist(t, filepath.Join(outside, "new.txt"))
	requireNotExist(t, filepath.Join(outside, "deep"))
	require.Equal(t, "secret", readFile(t, filepath.Join(outside, "secret.txt")))
}

func TestToolsRejectDanglingSymlinkToOutside(t *testing.T) {
	ws, _ := newWorkspace(t)
	outside := t.TempDir()
	tools := &Tools{Workspace: ws}
	target := filepath.Join(outside, "not-yet.txt")
	require.NoError(t, os.Symlink(target, filepath.Join(ws, "dangling.txt")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "no-dir"), filepath.Join(ws, "dangling-dir")))

	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "dangling.txt", "content": "pwned"}), "outside the workspace")
	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "dangling-dir/x.txt", "content": "pwned"}), "outside the workspace")
	requireNotExist(t, target)
	requireNotExist(t, filepath.Join(outside, "no-dir"))
}

func TestToolsMalformedArgumentsAreErrorResults(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}

	activities := tools.Activities()
	for _, spec := range tools.Specs() {
		name := spec.Name
		fn := activities[name].(func(context.Context, ToolInput) (ToolOutput, error))
		requireToolError(t, callRaw(t, fn, `{"file_path": "a.txt", "command": `), name+": arguments are not valid JSON")
		requireToolError(t, callRaw(t, fn, `["a.txt"]`), name+": arguments must be a JSON object, not an array")
	}
}

func TestToolsMissingRequiredArgumentIsErrorResult(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}

	requireToolError(t, callRaw(t, tools.Read, `{}`), "Read: file_path is required")
	requireToolError(t, callRaw(t, tools.Read, ``), "Read: file_path is required")
	requireToolError(t, callRaw(t, tools.Write, `{"file_path": "a.txt"}`), "Write: content is required")
	requireToolError(t, callRaw(t, tools.Edit, `{"file_path": "a.txt", "old_string": "x"}`), "Edit: new_string is required")
	requireToolError(t, callRaw(t, tools.Bash, `{"timeout": 100}`), "Bash: command is required")
	requireNotExist(t, filepath.Join(ws, "a.txt"))
}

func TestToolsWrongArgumentTypeIsErrorResult(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}

	requireToolError(t, callRaw(t, tools.Read, `{"file_path": "a.txt", "offset": "2"}`), "Read: offset must be an integer, not a string")
	requireToolError(t, callRaw(t, tools.Write, `{"file_path": 7, "content": "x"}`), "Write: file_path must be a string, not a number")
	requireToolError(t, callRaw(t, tools.Edit, `{"file_path": "a", "old_string": "x", "new_string": "y", "replace_all": "yes"}`),
		"Edit: replace_all must be a boolean, not a string")
	requireToolError(t, callRaw(t, tools.Bash, `{"command": "true", "timeout": "5s"}`), "Bash: timeout must be an integer, not a string")
}

func TestToolsWithoutUsableWorkspaceAnswerError(t *testing.T) {
	requireToolError(t, call(t, (&Tools{}).Read, map[string]any{"file_path": "a"}), "Read: no workspace is configured")
	missingDir := filepath.Join(t.TempDir(), "missing")
	requireToolError(t, call(t, (&Tools{Workspace: missingDir}).Bash, map[string]any{"command": "true"}),
		fmt.Sprintf("Bash: workspace %q is not usable", missingDir))
}

func TestToolsEdit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		content  string
		args     map[string]any
		result   string // the tool's answer, or its error with err
		err      bool
		contents string // the file afterwards
	}{
		{"replaces the one occurrence", "func a() {}\nfunc b() {}\n",
			map[string]any{"old_string": "func b()", "new_string": "func c()"},
			`Edited "f.txt": replaced 1 occurrence`, false, "func a() {}\nfunc c() {}\n"},
		{"old_string not found", "alpha\n",
			map[string]any{"old_string": "beta", "new_string": "gamma"},
			`Edit: old_string was not found in "f.txt"`, true, "alpha\n"},
		{"several occurrences, named", "x = 1\nx = 1\nx = 1\n",
			map[string]any{"old_string": "x = 1", "new_string": "x = 2"},
			`Edit: old_string occurs 3 times in "f.txt"`, true, "x = 1\nx = 1\nx = 1\n"},
		{"replace_all replaces every one", "x = 1\nx = 1\nx = 1\n",
			map[string]any{"old_string": "x = 1", "new_string": "x = 2", "replace_all": true},
			`Edited "f.txt": replaced 3 occurrences`, false, "x = 2\nx = 2\nx = 2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, _ := newWorkspace(t)
			tools := &Tools{Workspace: ws}
			path := filepath.Join(ws, "f.txt")
			writeFile(t, path, tc.content)
			tc.args["file_path"] = "f.txt"

			out := call(t, tools.Edit, tc.args)
			if tc.err {
				requireToolError(t, out, tc.result)
			} else {
				require.Equal(t, tc.result, requireOK(t, out))
			}
			require.Equal(t, tc.contents, readFile(t, path))
		})
	}
}

func TestToolsEditKeepsFileMode(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	path := filepath.Join(ws, "run.sh")
	writeFile(t, path, "echo a\n")
	require.NoError(t, os.Chmod(path, 0o755))

	requireOK(t, call(t, tools.Edit, map[string]any{"file_path": "run.sh", "old_string": "a", "new_string": "b"}))
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), info.Mode().Perm())
}

func TestToolsBashReturnsCombinedOutput(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}

	res := requireOK(t, call(t, tools.Bash, map[string]any{"command": "echo out; echo err >&2; echo done"}))
	require.Equal(t, "out\nerr\ndone\n", res)
	require.Equal(t, "(no output)", requireOK(t, call(t, tools.Bash, map[string]any{"command": "true"})))
}

func TestToolsBashRunsInWorkspace(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	real, err := filepath.EvalSymlinks(ws)
	require.NoError(t, err)

	require.Equal(t, real+"\n", requireOK(t, call(t, tools.Bash, map[string]any{"command": "pwd"})))
	requireOK(t, call(t, tools.Bash, map[string]any{"command": "echo made > made.txt"}))
	require.Equal(t, "made\n", readFile(t, filepath.Join(ws, "made.txt")))
}

func TestToolsBashNonZeroExitIsErrorWithExitCode(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}

	out := call(t, tools.Bash, map[string]any{"command": "echo oops; exit 3"})
	requireToolError(t, out, "Bash: command failed with exit code 3")
	require.Contains(t, out.Result, "oops")
}

func TestToolsBashTimesOutAndKillsProcessGroup(t *testing.T) {
	ws, _ := newWorkspace(t)
	// Long enough for the guard (this test binary, race-built) and bash to
	// start and echo on a loaded machine: at 200 ms a CI run once timed out
	// before "started" was written.
	const timeout = time.Second
	tools := &Tools{Workspace: ws, BashTimeout: timeout}

	start := time.Now()
	out := call(t, tools.Bash, map[string]any{"command": "echo started; (read -r pid _ < /proc/self/stat; echo $pid > bg.pid; exec sleep 10) & sleep 10"})
	elapsed := time.Since(start)

	requireToolError(t, out, "Bash: command timed out after 1s")
	require.Contains(t, out.Result, "started")
	require.GreaterOrEqual(t, elapsed, timeout)
	require.Less(t, elapsed, timeout+3*time.Second, "a timed-out command must not run on")

	// The background sleep was in the command's process group: it is killed
	// too, not left holding the output pipe.
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(ws, "bg.pid"))))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 10*time.Millisecond)
}

// processGone reports whether pid has exited (a zombie waiting for its
// reaper has exited too).
func processGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	_, after, ok := strings.Cut(string(stat), ") ")
	return ok && strings.HasPrefix(after, "Z")
}

func TestToolsBashTimeoutArgumentIsCappedAtBashTimeout(t *testing.T) {
	ws, _ := newWorkspace(t)
	const timeout = 200 * time.Millisecond
	tools := &Tools{Workspace: ws, BashTimeout: timeout}

	start := time.Now()
	out := call(t, tools.Bash, map[string]any{"command": "sleep 10", "timeout": 60000})
	requireToolError(t, out, "Bash: command timed out after 200ms")
	require.Less(t, time.Since(start), timeout+3*time.Second)
}

func TestToolsBashTimeoutArgumentShortensTimeout(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws} // the default, two minutes

	start := time.Now()
	out := call(t, tools.Bash, map[string]any{"command": "sleep 10", "timeout": 200})
	requireToolError(t, out, "Bash: command timed out after 200ms")
	require.Less(t, time.Since(start), 3*time.Second)
	requireToolError(t, call(t, tools.Bash, map[string]any{"command": "true", "timeout": 0}), "Bash: timeout must be a positive number of milliseconds")
}

func TestToolsBashOutputFloodIsCappedWithoutBuffering(t *testing.T) {
	ws, _ := newWorkspace(t)
	const outputCap = 1000
	tools := &Tools{Workspace: ws, OutputCap: outputCap}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := requireOK(t, call(t, tools.Bash, map[string]any{"command": "yes | head -c 50000000"}))
	runtime.ReadMemStats(&after)

	require.Equal(t, strings.Repeat("y\n", outputCap/2)+"\n... [output truncated: 49999000 more bytes]", res)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(10<<20), "50 MB of output must not be held in memory")
}

func TestToolsBashEndlessOutputIsCappedAndTimesOut(t *testing.T) {
	ws, _ := newWorkspace(t)
	// 3 s, not less: on a loaded machine the shell may not have written
	// its first line before a shorter limit kills it.
	tools := &Tools{Workspace: ws, OutputCap: 1000, BashTimeout: 3 * time.Second}

	out := call(t, tools.Bash, map[string]any{"command": "yes"})
	requireToolError(t, out, "Bash: command timed out after 3s")
	require.Contains(t, out.Result, "[output truncated: ")
	require.Less(t, len(out.Result), 1200)
}

func TestToolsBashCancelledActivityFailsWithContextError(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	const deadline = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	start := time.Now()
	_, err := tools.Bash(ctx, ToolInput{Call: protocol.ToolCall{Arguments: `{"command": "sleep 10"}`}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), deadline+3*time.Second)
}

func TestToolsActivitiesRunUnderToolNamesInActivityEnvironment(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	acts := tools.Activities()
	require.ElementsMatch(t, []string{protocol.ToolRead, protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash, SandboxBashActivity, ApplySandboxActivity},
		slices.Collect(maps.Keys(acts)))
	for name, fn := range acts {
		env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}

	run := func(name, arguments string) ToolOutput {
		t.Helper()
		val, err := env.ExecuteActivity(name, ToolInput{Call: protocol.ToolCall{ID: "c", Name: name, Arguments: arguments}})
		require.NoError(t, err)
		var out ToolOutput
		require.NoError(t, val.Get(&out))
		return out
	}
	requireOK(t, run(protocol.ToolWrite, `{"file_path": "a.txt", "content": "hi\n"}`))
	requireOK(t, run(protocol.ToolEdit, `{"file_path": "a.txt", "old_string": "hi", "new_string": "ho"}`))
	require.Equal(t, "     1\tho\n", requireOK(t, run(protocol.ToolRead, `{"file_path": "a.txt"}`)))
	require.Equal(t, "ho\n", requireOK(t, run(protocol.ToolBash, `{"command": "cat a.txt"}`)))
	requireToolError(t, run(protocol.ToolRead, `{"file_path": "../x"}`), "outside the workspace")
}

func TestToolsSpecsDescribeFourToolsWithRequiredArguments(t *testing.T) {
	tools := &Tools{Workspace: t.TempDir(), BashTimeout: 90 * time.Second}
	want := map[string][]string{
		protocol.ToolRead:  {"file_path"},
		protocol.ToolWrite: {"file_path", "content"},
		protocol.ToolEdit:  {"file_path", "old_string", "new_string"},
		protocol.ToolBash:  {"command"},
	}

	specs := tools.Specs()
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
		require.NotEmpty(t, s.Description)
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		require.NoError(t, json.Unmarshal(s.Parameters, &schema), s.Name)
		require.Equal(t, "object", schema.Type)
		require.Equal(t, want[s.Name], schema.Required, s.Name)
		for _, r := range schema.Required {
			require.Contains(t, schema.Properties, r)
		}
		_, isActivity := tools.Activities()[s.Name]
		require.True(t, isActivity, "spec %s has an activity of the same name", s.Name)
	}
	require.Equal(t, []string{protocol.ToolRead, protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash}, names)
	require.Contains(t, string(specs[3].Parameters), "90000")
}

func TestToolsBashBackgroundProcessDoesNotHoldCallOpenAndEndsWithIt(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}

	start := time.Now()
	res := requireOK(t, call(t, tools.Bash, map[string]any{"command": "(read -r pid _ < /proc/self/stat; echo $pid > bg.pid; exec sleep 10) & until [ -s bg.pid ]; do sleep 0.01; done; echo started"}))
	require.Contains(t, res, "started\n")
	require.Contains(t, res, "(the command left processes running in the background; they were stopped when it ended)")
	require.Less(t, time.Since(start), pipeGrace+3*time.Second)
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(ws, "bg.pid"))))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return processGone(pid) }, killWait, 10*time.Millisecond, "the background sleep ended with the call")
}

func TestToolsWorkspaceRootRefusesSymlinkEscapeEvenUnchecked(t *testing.T) {
	// The second layer of confinement: even a path that skipped resolve's
	// check (a link swapped in after it) cannot leave the workspace.
	dir, _ := newWorkspace(t)
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "out")))
	ws, err := openWorkspace(dir)
	require.NoError(t, err)
	defer ws.Close()

	require.Error(t, ws.root.WriteFile("out/new.txt", []byte("pwned"), 0o644))
	require.Error(t, ws.root.MkdirAll("out/deep", 0o755))
	requireNotExist(t, filepath.Join(outside, "new.txt"))
	requireNotExist(t, filepath.Join(outside, "deep"))
}

func TestToolsWriteNoFileThatHasOtherNames(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(ws, "README.md"), "# readme\n")
	require.NoError(t, os.Mkdir(filepath.Join(ws, "docs"), 0o755))
	require.NoError(t, os.Link(filepath.Join(ws, "README.md"), filepath.Join(ws, "docs", "readme.md")))

	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "docs/readme.md", "content": "pwned"}),
		`Write: "docs/readme.md" has 2 hard links: writing it would change the same file under its other names`)
	requireToolError(t, call(t, tools.Edit, map[string]any{"file_path": "docs/readme.md", "old_string": "readme", "new_string": "pwned"}), "hard links")
	require.Equal(t, "# readme\n", readFile(t, filepath.Join(ws, "README.md")))
	require.Equal(t, "     1\t# readme\n", requireOK(t, call(t, tools.Read, map[string]any{"file_path": "docs/readme.md"})), "reading it changes nothing")
	require.Equal(t, `write docs/readme.md would fail: "docs/readme.md" has 2 hard links: writing it would change the same file under its other names, which this call does not show; use Bash for it`,
		preview(t, tools, protocol.ToolWrite, map[string]any{"file_path": "docs/readme.md", "content": "pwned"}), "the person is told before deciding")
	require.Contains(t, preview(t, tools, protocol.ToolEdit, map[string]any{"file_path": "docs/readme.md", "old_string": "readme", "new_string": "pwned"}), "edit docs/readme.md would fail: ")
}
