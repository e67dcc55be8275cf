package activities

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

func TestASandboxedRunIsDescribedChangeByChangeWithItsDiffsAndOutput(t *testing.T) {
	run := protocol.SandboxRun{
		ExitCode: 1, Output: "FAIL x_test.go\n",
		Changes: []protocol.FileChange{
			{Path: "README.md", Op: protocol.ChangeChanged, Kind: "file", Size: 10, Diff: "- # demo\n+ # changed"},
			{Path: "b.txt", From: "a.txt", Op: protocol.ChangeRenamed, Kind: "file", Size: 3},
			{Path: "gone.txt", Op: protocol.ChangeDeleted, Kind: "file"},
			{Path: "logo.png", Op: protocol.ChangeAdded, Kind: "file", Binary: true, Size: 2048},
			{Path: "latest", Op: protocol.ChangeAdded, Kind: "symlink", Link: "b.txt"},
			{Path: "build", Op: protocol.ChangeAdded, Kind: "dir"},
		},
	}
	got := describeSandboxRun(run, DefaultOutputCap)
	require.Equal(t, `ran in the sandbox (no network; it wrote only to a copy of the workspace): exit 1, 6 files changed
  changed README.md (10 bytes)
  renamed a.txt → b.txt (3 bytes)
  deleted gone.txt
  added logo.png (binary, 2048 bytes)
  added latest (symbolic link to b.txt)
  added build/ (folder)
--- README.md
- # demo
+ # changed
output:
FAIL x_test.go
`, got)

	run = protocol.SandboxRun{TimedOut: true, ExitCode: -1, TooLarge: "3,001 files, past the 2,000 a run may hold"}
	got = describeSandboxRun(run, DefaultOutputCap)
	require.True(t, strings.HasPrefix(got, "ran in the sandbox (no network; it wrote only to a copy of the workspace): timed out, killed with all it started, 0 files changed\nan approve applies nothing: 3,001 files"), got)
	require.True(t, strings.HasSuffix(got, "output: none\n"), got)

	run = protocol.SandboxRun{Output: strings.Repeat("x", 100_000)}
	got = describeSandboxRun(run, 1000)
	require.LessOrEqual(t, len(got), 1000)
	require.True(t, strings.HasSuffix(got, "(cut: the changes hold the rest)"), got[len(got)-60:])
}

func TestAFileNameThatWouldFakeALineOfTheChangeListIsQuoted(t *testing.T) {
	run := protocol.SandboxRun{Changes: []protocol.FileChange{
		{Path: "notes.txt\n  deleted nothing", Op: protocol.ChangeAdded, Kind: "file", Size: 1},
		{Path: "docs/café.md", Op: protocol.ChangeAdded, Kind: "file", Size: 1},
	}}
	got := describeSandboxRun(run, DefaultOutputCap)
	require.Contains(t, got, "\n  added \"notes.txt\\n  deleted nothing\" (1 bytes)\n")
	require.Contains(t, got, "\n  added docs/café.md (1 bytes)\n", "printable names stay as they are")
}

func TestAChangeListTooLongForThePreviewSaysHowManyChangesItLeavesOut(t *testing.T) {
	var run protocol.SandboxRun
	for i := range 2000 {
		run.Changes = append(run.Changes, protocol.FileChange{Path: fmt.Sprintf("docs/decoy-%04d.md", i), Op: protocol.ChangeAdded, Kind: "file", Size: 1})
	}
	run.Changes = append(run.Changes, protocol.FileChange{Path: "src/main.go", Op: protocol.ChangeChanged, Kind: "file", Size: 1})
	got := describeSandboxRun(run, DefaultOutputCap)
	require.LessOrEqual(t, len(got), DefaultOutputCap)
	require.NotContains(t, got, "src/main.go")
	require.Regexp(t, `  … and \d+ more changes, not listed here \(the console lists every one, and an approve applies every one\)\n`, got)
	require.Contains(t, got, ": exit 0, 2001 files changed\n")
}
