package activities

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func preview(t *testing.T, tools *Tools, name string, args map[string]any) string {
	t.Helper()
	b, err := json.Marshal(args)
	require.NoError(t, err)
	out, err := tools.Preview(context.Background(), ToolInput{Call: ToolCall{ID: "c1", Name: name, Arguments: string(b)}})
	require.NoError(t, err)
	return out
}

func TestAPreviewOfAnOverwriteCountsTheLinesItRemoves(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(ws, "main.go"), "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n")

	got := preview(t, tools, ToolWrite, map[string]any{"file_path": "main.go", "content": "package main\n// gone\n"})
	require.True(t, strings.HasPrefix(got, "overwrite main.go (5 lines, 45 bytes) with 2 lines (21 bytes): −4 +1\n"), got)
	require.Contains(t, got, "- func main() {")
	require.Contains(t, got, "+ // gone")
	require.Equal(t, "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n", readFile(t, filepath.Join(ws, "main.go")), "a preview writes nothing")

	got = preview(t, tools, ToolWrite, map[string]any{"file_path": "docs/new.md", "content": "# New\nline\n"})
	require.True(t, strings.HasPrefix(got, "new file docs/new.md: +2 lines (11 bytes)\n"), got)
	require.NoDirExists(t, filepath.Join(ws, "docs"))
}

func TestAPreviewOfAnEditShowsItsLinesOrWhyItWouldFail(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(ws, "a.txt"), "one\ntwo\nthree\ntwo\n")
	got := preview(t, tools, ToolEdit, map[string]any{"file_path": "a.txt", "old_string": "three", "new_string": "3"})
	require.Contains(t, got, "edit a.txt (1 place): −1 +1")
	require.Contains(t, got, "- three\n+ 3")
	require.Contains(t, preview(t, tools, ToolEdit, map[string]any{"file_path": "a.txt", "old_string": "two", "new_string": "2"}),
		"would fail: old_string occurs 2 times in \"a.txt\"; include more surrounding text to make it unique, or set replace_all")
	require.Contains(t, preview(t, tools, ToolEdit, map[string]any{"file_path": "a.txt", "old_string": "four", "new_string": "4"}), "would fail: old_string was not found in \"a.txt\"")
	require.Contains(t, preview(t, tools, ToolEdit, map[string]any{"file_path": "../x", "old_string": "a", "new_string": "b"}), "(no preview: Edit: file_path \"../x\" is outside the workspace")
}

func TestAPreviewOfBashShowsEveryLineWhole(t *testing.T) {
	tools := &Tools{Workspace: t.TempDir()}
	got := preview(t, tools, ToolBash, map[string]any{"command": "ls -la\nrm -rf ~/   # harmless cleanup"})
	require.Equal(t, "runs in the workspace with bash -c (2 lines, 37 bytes):\n$ ls -la⏎\n$ rm -rf ~/   # harmless cleanup⏎\n", got)
	padded := "echo hello" + strings.Repeat(" ", 180) + "; rm -rf /"
	require.Contains(t, preview(t, tools, ToolBash, map[string]any{"command": padded}), "; rm -rf /⏎", "nothing is cut")
	require.Empty(t, preview(t, tools, ToolRead, map[string]any{"file_path": "a"}), "nothing to preview for a read")
}

func TestAPreviewIsNoLargerThanAToolsOutput(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws, OutputCap: 4 << 10}
	writeFile(t, filepath.Join(ws, "one-line.txt"), strings.Repeat("é", 50<<10))
	got := preview(t, tools, ToolWrite, map[string]any{"file_path": "one-line.txt", "content": strings.Repeat("ü", 50<<10)})
	require.LessOrEqual(t, len(got), 4<<10+len("…"))
	require.True(t, strings.HasPrefix(got, "overwrite one-line.txt (1 lines, 102400 bytes) with 1 lines (102400 bytes)"), "%.200s", got)
	require.True(t, strings.HasSuffix(got, "…"), "the cut is marked")

	got = preview(t, tools, ToolEdit, map[string]any{"file_path": "one-line.txt", "old_string": "é", "new_string": "é"})
	require.Contains(t, got, "would fail: old_string and new_string are the same", "the preview says what Edit will say")
}
