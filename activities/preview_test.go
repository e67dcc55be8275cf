package activities

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/tollgate/tollgate/protocol"
)

func preview(t *testing.T, tools *Tools, name string, args map[string]any) string {
	t.Helper()
	b, err := json.Marshal(args)
	require.NoError(t, err)
	out, err := tools.Preview(context.Background(), ToolInput{Call: protocol.ToolCall{ID: "c1", Name: name, Arguments: string(b)}})
	require.NoError(t, err)
	return out
}

func TestAPreviewOfAnOverwriteCountsTheLinesItRemoves(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(ws, "main.go"), "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n")

	got := preview(t, tools, protocol.ToolWrite, map[string]any{"file_path": "main.go", "content": "package main\n// gone\n"})
	require.True(t, strings.HasPrefix(got, "overwrite main.go (5 lines, 45 bytes) with 2 lines (21 bytes): −4 +1\n"), got)
	require.Contains(t, got, "- func main() {")
	require.Contains(t, got, "+ // gone")
	require.Equal(t, "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n", readFile(t, filepath.Join(ws, "main.go")), "a preview writes nothing")

	got = preview(t, tools, protocol.ToolWrite, map[string]any{"file_path": "docs/new.md", "content": "# New\nline\n"})
	require.True(t, strings.HasPrefix(got, "new file docs/new.md: +2 lines (11 bytes)\n"), got)
	require.NoDirExists(t, filepath.Join(ws, "docs"))
}

func TestAPreviewOfAnEditShowsItsLinesOrWhyItWouldFail(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(ws, "a.txt"), "one\ntwo\nthree\ntwo\n")
	got := preview(t, tools, protocol.ToolEdit, map[string]any{"file_path": "a.txt", "old_string": "three", "new_string": "3"})
	require.Contains(t, got, "edit a.txt (1 place): −1 +1")
	require.Contains(t, got, "- three\n+ 3")
	require.Contains(t, preview(t, tools, protocol.ToolEdit, map[string]any{"file_path": "a.txt", "old_string": "two", "new_string": "2"}),
		"would fail: old_string occurs 2 times in \"a.txt\"; include more surrounding text to make it unique, or set replace_all")
	require.Contains(t, preview(t, tools, protocol.ToolEdit, map[string]any{"file_path": "a.txt", "old_string": "four", "new_string": "4"}), "would fail: old_string was not found in \"a.txt\"")
	require.Contains(t, preview(t, tools, protocol.ToolEdit, map[string]any{"file_path": "../x", "old_string": "a", "new_string": "b"}), "(no preview: Edit: file_path \"../x\" is outside the workspace")
}

func TestAPreviewOfBashShowsEveryLineWhole(t *testing.T) {
	tools := &Tools{Workspace: t.TempDir()}
	got := preview(t, tools, protocol.ToolBash, map[string]any{"command": "ls -la\nrm -rf ~/   # harmless cleanup"})
	require.Equal(t, "runs in the workspace with bash -c (2 lines, 37 bytes):\n$ ls -la⏎\n$ rm -rf ~/   # harmless cleanup⏎\n", got)
	padded := "echo hello" + strings.Repeat(" ", 180) + "; rm -rf /"
	require.Contains(t, preview(t, tools, protocol.ToolBash, map[string]any{"command": padded}), "; rm -rf /⏎", "nothing is cut")
	require.Empty(t, preview(t, tools, protocol.ToolRead, map[string]any{"file_path": "a"}), "nothing to preview for a read")
}

func TestAPreviewIsNoLargerThanAToolsOutput(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws, OutputCap: 4 << 10}
	writeFile(t, filepath.Join(ws, "one-line.txt"), strings.Repeat("é", 50<<10))
	got := preview(t, tools, protocol.ToolWrite, map[string]any{"file_path": "one-line.txt", "content": strings.Repeat("ü", 50<<10)})
	require.LessOrEqual(t, len(got), 4<<10+len("…"))
	require.True(t, strings.HasPrefix(got, "overwrite one-line.txt (1 lines, 102400 bytes) with 1 lines (102400 bytes)"), "%.200s", got)
	require.True(t, strings.HasSuffix(got, "…"), "the cut is marked")

	got = preview(t, tools, protocol.ToolEdit, map[string]any{"file_path": "one-line.txt", "old_string": "é", "new_string": "é"})
	require.Contains(t, got, "would fail: old_string and new_string are the same", "the preview says what Edit will say")
}

// specialFiles makes, in a new workspace, a FIFO that nothing writes or
// reads (fifo), a sparse file of 1 GiB (sparse.bin: a few blocks on disk,
// a gibibyte to whoever reads it) and, as root, a device node that reads
// zeros for ever (zero, as /dev/zero).
func specialFiles(t *testing.T) (ws string, tools *Tools) {
	t.Helper()
	ws, _ = newWorkspace(t)
	require.NoError(t, syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	f, err := os.Create(filepath.Join(ws, "sparse.bin"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(1<<30))
	require.NoError(t, f.Close())
	if os.Getuid() == 0 {
		require.NoError(t, unix.Mknod(filepath.Join(ws, "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))))
	}
	return ws, &Tools{Workspace: ws}
}

// allocated is how many bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestAPreviewNeverWaitsOnASpecialFileNorReadsAHugeOneWhole(t *testing.T) {
	ws, tools := specialFiles(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	previewIn := func(name string, args map[string]any) string {
		b, _ := json.Marshal(args)
		out, err := tools.Preview(ctx, ToolInput{Call: protocol.ToolCall{ID: "c1", Name: name, Arguments: string(b)}})
		require.NoError(t, err, "a preview never fails, nor outlives its context")
		return out
	}

	var got string
	bytes := allocated(func() {
		got = previewIn(protocol.ToolWrite, map[string]any{"file_path": "sparse.bin", "content": "small\n"})
	})
	require.Equal(t, "overwrite sparse.bin (1073741824 bytes, too large to compare) with 1 lines (6 bytes)", got)
	require.Less(t, bytes, uint64(1<<20), "the preview of a Write over 1 GiB allocates %d bytes", bytes)
	t.Logf("the preview of a Write over 1 GiB allocated %d bytes", bytes)
	bytes = allocated(func() {
		got = previewIn(protocol.ToolEdit, map[string]any{"file_path": "sparse.bin", "old_string": "a", "new_string": "b"})
	})
	require.Equal(t, `(no preview: Edit: "sparse.bin" has 1073741824 bytes, more than the 16 MiB a tool reads whole; use Bash for it)`, got)
	require.Less(t, bytes, uint64(1<<20), "the preview of an Edit of 1 GiB allocates %d bytes", bytes)

	for name, args := range map[string]map[string]any{
		protocol.ToolWrite: {"file_path": "fifo", "content": "x"},
		protocol.ToolEdit:  {"file_path": "fifo", "old_string": "a", "new_string": "b"},
	} {
		got = previewIn(name, args)
		require.Contains(t, got, `"fifo" is a named pipe (FIFO), not a regular file: file tools read and write regular files only`, name)
	}
	if os.Getuid() == 0 {
		got = previewIn(protocol.ToolWrite, map[string]any{"file_path": "zero", "content": "x"})
		require.Contains(t, got, `"zero" is a character device, not a regular file`)
	}
	require.NoError(t, ctx.Err(), "no preview waited")
	require.Equal(t, int64(1<<30), fileSize(t, filepath.Join(ws, "sparse.bin")), "a preview changes nothing")
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	return info.Size()
}

func TestFileToolsNeverWaitOnASpecialFileNorReadAHugeOneWhole(t *testing.T) {
	ws, tools := specialFiles(t)
	const outputCap = 1000
	tools.OutputCap = outputCap
	start := time.Now()

	for _, tc := range []struct {
		tool toolFunc
		args map[string]any
		want string
	}{
		{tools.Read, map[string]any{"file_path": "fifo"}, `Read: "fifo" is a named pipe (FIFO), not a regular file`},
		{tools.Write, map[string]any{"file_path": "fifo", "content": "x"}, `Write: "fifo" is a named pipe (FIFO), not a regular file`},
		{tools.Edit, map[string]any{"file_path": "fifo", "old_string": "a", "new_string": "b"}, `Edit: "fifo" is a named pipe (FIFO), not a regular file`},
		{tools.Edit, map[string]any{"file_path": "sparse.bin", "old_string": "a", "new_string": "b"}, `Edit: "sparse.bin" has 1073741824 bytes, more than the 16 MiB a tool reads whole`},
	} {
		var out ToolOutput
		bytes := allocated(func() { out = call(t, tc.tool, tc.args) })
		requireToolError(t, out, tc.want)
		require.Less(t, bytes, uint64(1<<20), "%s allocates %d bytes", tc.want, bytes)
	}
	if os.Getuid() == 0 {
		requireToolError(t, call(t, tools.Read, map[string]any{"file_path": "zero"}), `Read: "zero" is a character device, not a regular file`)
		requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "zero", "content": "x"}), `Write: "zero" is a character device`)
	}
	// Read streams the sparse file, and keeps no more than its cap.
	var out ToolOutput
	bytes := allocated(func() { out = call(t, tools.Read, map[string]any{"file_path": "sparse.bin"}) })
	require.Contains(t, requireOK(t, out), "[output truncated at 1000 bytes in line 1")
	require.Less(t, bytes, uint64(1<<20), "Read of 1 GiB allocates %d bytes", bytes)
	require.Less(t, time.Since(start), 10*time.Second, "nothing waited")

	// A FIFO that a reader holds open would take a Write: it is refused
	// all the same, and the reader gets nothing.
	r, err := os.OpenFile(filepath.Join(ws, "fifo"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	require.NoError(t, err)
	defer r.Close()
	requireToolError(t, call(t, tools.Write, map[string]any{"file_path": "fifo", "content": "x"}), "named pipe")
	n, _ := r.Read(make([]byte, 1))
	require.Zero(t, n)
	require.Equal(t, int64(1<<30), fileSize(t, filepath.Join(ws, "sparse.bin")))
}

func TestAReadThatTheActivityCancelsStopsReading(t *testing.T) {
	ws, _ := newWorkspace(t)
	f, err := os.Create(filepath.Join(ws, "huge.bin"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(1<<40)) // a tebibyte of zeros, one line
	require.NoError(t, f.Close())
	tools := &Tools{Workspace: ws}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()

	start := time.Now()
	_, err = tools.Read(ctx, ToolInput{Call: protocol.ToolCall{Arguments: `{"file_path":"huge.bin","offset":2}`}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second, "the read stopped with its context, not at the file's end")
}

func TestPreviewsOfABatchAreEachCallsPreviewInItsPlace(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(ws, "a.txt"), "one\ntwo\n")
	require.NoError(t, unix.Mkfifo(filepath.Join(ws, "pipe"), 0o644))
	call := func(id, name string, args map[string]any) ToolInput {
		b, err := json.Marshal(args)
		require.NoError(t, err)
		return ToolInput{Call: protocol.ToolCall{ID: id, Name: name, Arguments: string(b)}}
	}
	ins := []ToolInput{
		call("w", protocol.ToolWrite, map[string]any{"file_path": "new.md", "content": "# New\n"}),
		call("e", protocol.ToolEdit, map[string]any{"file_path": "a.txt", "old_string": "four", "new_string": "4"}),
		call("p", protocol.ToolWrite, map[string]any{"file_path": "pipe", "content": "x"}),
		call("o", protocol.ToolEdit, map[string]any{"file_path": "../x", "old_string": "a", "new_string": "b"}),
		call("b", protocol.ToolBash, map[string]any{"command": "make"}),
	}
	got, err := tools.Previews(context.Background(), ins)
	require.NoError(t, err)
	require.Len(t, got, len(ins))
	for i, in := range ins {
		one, err := tools.Preview(context.Background(), in)
		require.NoError(t, err)
		require.Equal(t, one, got[i], "call %s: its own preview, in its place", in.Call.ID)
	}
	require.True(t, strings.HasPrefix(got[0], "new file new.md"), got[0])
	require.Contains(t, got[1], "would fail")
	require.Contains(t, got[3], "(no preview: Edit: file_path \"../x\" is outside the workspace")
	require.Contains(t, got[4], "$ make")
}
