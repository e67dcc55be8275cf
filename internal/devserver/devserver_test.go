package devserver

import (
	"context"
	"debug/buildinfo"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// waitForRestart is a workflow that blocks on a signal, so that it is still
// open while the server restarts.
func waitForRestart(ctx workflow.Context) (string, error) {
	var msg string
	workflow.GetSignalChannel(ctx, "go").Receive(ctx, &msg)
	return msg, nil
}

func TestWorkflowSurvivesServerRestartOnTheSameAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		down func(*Server) error
	}{
		{"graceful", func(*Server) error { return nil }}, // Restart stops it
		{"crash", (*Server).Crash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ForTest(t)
			addr := s.HostPort
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			c, err := s.Dial()
			require.NoError(t, err)
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "restart", TaskQueue: "devserver-test"}, waitForRestart)
			require.NoError(t, err)
			c.Close()

			start := time.Now()
			require.NoError(t, tc.down(s))
			require.NoError(t, s.Restart())
			t.Logf("down and up again in %s", time.Since(start))
			require.Equal(t, addr, s.HostPort, "a restart keeps the address")

			c, err = s.Dial()
			require.NoError(t, err)
			defer c.Close()
			w := worker.New(c, "devserver-test", worker.Options{})
			w.RegisterWorkflow(waitForRestart)
			require.NoError(t, w.Start())
			defer w.Stop()

			require.NoError(t, c.SignalWorkflow(ctx, "restart", run.GetRunID(), "go", "after restart"))
			var got string
			require.NoError(t, c.GetWorkflow(ctx, "restart", run.GetRunID()).Get(ctx, &got))
			require.Equal(t, "after restart", got)
		})
	}
}

func TestCrashedServerAnswersNothingUntilRestart(t *testing.T) {
	s := ForTest(t)
	require.NoError(t, s.Crash())
	_, err := s.Dial()
	require.Error(t, err)
	require.NoError(t, s.Restart())
	c, err := s.Dial()
	require.NoError(t, err)
	c.Close()
}

func TestStopRemovesTheTemporaryFolderAndEndsTheServer(t *testing.T) {
	start := time.Now()
	s, err := Run(Options{Namespace: "other", UI: true})
	require.NoError(t, err)
	t.Logf("start took %s", time.Since(start))
	require.NotZero(t, s.UIPort)
	dir := s.tempDir

	c, err := s.Dial()
	require.NoError(t, err)
	c.Close()

	start = time.Now()
	require.NoError(t, s.Stop())
	t.Logf("stop took %s", time.Since(start))
	require.NoDirExists(t, dir)
	require.NoError(t, s.Stop(), "a second Stop is harmless")
	require.Error(t, s.Restart(), "Stop is final")

	_, err = s.Dial()
	require.Error(t, err, "nothing answers after Stop")
}

func TestBinaryNamesMakeTemporalWhenMissing(t *testing.T) {
	t.Setenv(EnvBinary, "/nonexistent/temporal")
	_, err := Binary()
	require.ErrorContains(t, err, EnvBinary)

	t.Setenv(EnvBinary, "")
	t.Chdir(t.TempDir()) // no go.mod above
	t.Setenv("PATH", "")
	_, err = Binary()
	require.ErrorContains(t, err, "make temporal")
}

func TestServerOutputGoesToTheLogFile(t *testing.T) {
	s := ForTest(t)
	require.NoError(t, s.Stop())
	data, err := os.ReadFile(s.LogFile)
	require.NoError(t, err)
	header, rest, _ := strings.Cut(string(data), "\n")
	require.Contains(t, header, "start-dev", "the log starts with the command line")
	require.NotEmpty(t, strings.TrimSpace(rest), "then comes what the server printed")
}

func TestMakeDevTunesItsServerAlike(t *testing.T) {
	script, err := os.ReadFile("../../scripts/dev.sh")
	require.NoError(t, err)
	for i := 0; i < len(tunedFlags); i += 2 {
		require.Contains(t, string(script), tunedFlags[i]+" "+tunedFlags[i+1], "scripts/dev.sh starts its dev server with it")
	}
}

// TestTheCLIIsBuiltWithTheSQLiteDriverThatDoesNotWedge requires the dev
// server the tests run to be make temporal's build: the release the
// Makefile names, linked with the SQLite driver third_party/temporal-cli
// requires. The release's own driver (modernc.org/sqlite v1.34.1) leaves
// the server interrupting every statement after a query cancelled just
// after its first row; a bin/temporal left from a `go install` of the
// release would bring that back unseen.
func TestTheCLIIsBuiltWithTheSQLiteDriverThatDoesNotWedge(t *testing.T) {
	if os.Getenv(EnvBinary) != "" {
		t.Skipf("%s names the CLI to test with", EnvBinary)
	}
	bin, err := Binary()
	require.NoError(t, err)
	root, err := moduleRoot()
	require.NoError(t, err)
	goMod, err := os.ReadFile(filepath.Join(root, "third_party", "temporal-cli", "go.mod"))
	require.NoError(t, err)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	cliVersion := regexp.MustCompile(`(?m)^TEMPORAL_CLI_VERSION := (\S+)$`).FindSubmatch(makefile)
	require.NotNil(t, cliVersion, "the Makefile names TEMPORAL_CLI_VERSION")
	required := map[string]string{"github.com/temporalio/cli": string(cliVersion[1])}
	sqlite := regexp.MustCompile(`(?m)^\s+modernc\.org/sqlite (\S+)`).FindSubmatch(goMod)
	require.NotNil(t, sqlite, "third_party/temporal-cli/go.mod requires modernc.org/sqlite")
	required["modernc.org/sqlite"] = string(sqlite[1])
	require.NotEqual(t, "v1.34.1", required["modernc.org/sqlite"], "the release's own driver is the one that wedges")
	for path, version := range required {
		require.Contains(t, string(goMod), "\t"+path+" "+version, "third_party/temporal-cli/go.mod requires %s %s", path, version)
	}

	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err, "%s is a Go binary with its build information", bin)
	// The module of the CLI's main package is Main, its driver's a Dep.
	linked := map[string]string{info.Main.Path: info.Main.Version}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		linked[d.Path] = d.Version
	}
	for path, version := range required {
		require.Equal(t, version, linked[path], "%s links %s %s; run `make temporal` to build it from third_party/temporal-cli", bin, path, version)
	}
}
