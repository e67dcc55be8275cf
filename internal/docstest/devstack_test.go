package docstest

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
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

// devScript is what `make dev` runs.
const devScript = "scripts/dev.sh"

// devRun is scripts/dev.sh running in its own process group, its output
// read line by line.
type devRun struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the script has exited
	err  error         // its exit, once done

	mu    sync.Mutex
	lines []string
	news  chan struct{} // closed and replaced at every line
}

// startDev runs the script at root/scripts/dev.sh with env added to the
// test's environment, less the variables that would point it elsewhere.
// The test's end interrupts it, if the test has not.
func startDev(t *testing.T, root string, env ...string) *devRun {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(root, devScript))
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "TOLLGATE_NOTIFY_URL", "TOLLGATE_MCP_CONFIG",
			"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "HTTP_ADDR", "TEMPORAL_CLI", "TOLLGATE_STATE_DIR", "TOLLGATE_WORKSPACE",
			"TOLLGATE_DEV_PROBE_EVERY", "TOLLGATE_DEV_PROBE_TIMEOUT", "TOLLGATE_DEV_PROBE_FAILURES", "TOLLGATE_DEV_BUILD_HEARTBEAT",
			"TOLLGATE_DEV_EXAMPLE_ADDR":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	d := &devRun{cmd: cmd, done: make(chan struct{}), news: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, sc.Text())
			close(d.news)
			d.news = make(chan struct{})
			d.mu.Unlock()
		}
		d.err = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			d.interrupt(t)
		}
	})
	return d
}

// output is everything the script printed so far.
func (d *devRun) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.lines, "\n")
}

// portAttempts is how many times startDevStack starts the script when a
// port it picked is taken before the script binds it.
const portAttempts = 3

// portInUse says whether the script exited because a port it was given
// is in use (scripts/dev.sh says "is in use").
func (d *devRun) portInUse() bool {
	return strings.Contains(d.output(), "is in use")
}

// waitLine waits up to within for a line that contains want, and returns
// it; the test fails with the output so far otherwise.
func (d *devRun) waitLine(t *testing.T, want string, within time.Duration) string {
	t.Helper()
	line, exited := d.nextLine(want, within)
	return d.saw(t, want, within, line, exited)
}

// saw returns line, what nextLine found of want within a wait of within,
// or fails the test with the output so far when it found none.
func (d *devRun) saw(t *testing.T, want string, within time.Duration, line string, exited bool) string {
	t.Helper()
	switch {
	case line != "":
		return line
	case exited:
		t.Fatalf("%s exited (%v) before printing %q:\n%s", devScript, d.err, want, d.output())
	default:
		t.Fatalf("%s did not print %q within %s:\n%s", devScript, want, within, d.output())
	}
	return ""
}

// nextLine waits up to within for a line that contains want and returns
// it, or "" with exited true when the script exited first, false when
// within passed.
func (d *devRun) nextLine(want string, within time.Duration) (line string, exited bool) {
	deadline := time.After(within)
	for seen := 0; ; {
		d.mu.Lock()
		lines, news := d.lines, d.news
		d.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if strings.Contains(lines[seen], want) {
				return lines[seen], false
			}
		}
		select {
		case <-news:
		case <-d.done:
			if seen == len(d.lines) {
				return "", true
			}
		case <-deadline:
			return "", false
		}
	}
}

// interrupt sends Ctrl-C's SIGINT to the script's process group, as a
// terminal does, and returns its exit code once it has exited.
func (d *devRun) interrupt(t *testing.T) int {
	t.Helper()
	require.NoError(t, syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT))
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("%s did not stop within 30s of Ctrl-C:\n%s", devScript, d.output())
	}
	var exit *exec.ExitError
	if errors.As(d.err, &exit) {
		return exit.ExitCode()
	}
	require.NoError(t, d.err)
	return 0
}

// freePort returns a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestMakeDevSaysWhatItBuildsAndHowLongBeforeBuildingTheTemporalCLI runs
// scripts/dev.sh as a fresh clone runs it: no bin/temporal and a Temporal
// CLI of another version on PATH. The build itself is a stand-in that
// never ends (the Makefile's temporal target, in a copy of the script's
// folder), so the test sees the words before it, the heartbeat while it
// runs (every 2 s here, not every 15 s) and Ctrl-C stopping it.
func TestMakeDevSaysWhatItBuildsAndHowLongBeforeBuildingTheTemporalCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for make dev's first heartbeat")
	}
	tree, path := t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(tree, "scripts"), 0o755))
	script, err := os.ReadFile(filepath.Join(root, devScript))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(tree, devScript), script, 0o755))
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	var versions []string
	for _, l := range strings.Split(string(makefile), "\n") {
		if strings.HasPrefix(l, "TEMPORAL_CLI_VERSION :=") || strings.HasPrefix(l, "TEMPORAL_SERVER_VERSION :=") {
			versions = append(versions, l)
		}
	}
	require.Len(t, versions, 2, "the Makefile names the CLI's version and its server's")
	require.NoError(t, os.WriteFile(filepath.Join(tree, "Makefile"), []byte(strings.Join(versions, "\n")+
		"\ntemporal:\n\t@echo github.com/temporalio/cli/cmd/temporal\n\t@sleep 600\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(path, "temporal"),
		[]byte("#!/bin/sh\necho 'temporal version 1.9.1 (Server 1.30.0, UI 2.40.0)'\n"), 0o755))

	dev := startDev(t, tree, "PATH="+path+":"+os.Getenv("PATH"), "TOLLGATE_STATE_DIR="+filepath.Join(tree, ".tollgate"),
		"TOLLGATE_DEV_BUILD_HEARTBEAT=2")
	dev.waitLine(t, "temporal on your PATH says 'temporal version 1.9.1 (Server 1.30.0, UI 2.40.0)', not v1.5.1", time.Minute)
	dev.waitLine(t, "building the Temporal CLI v1.5.1 into bin/temporal", time.Second)
	dev.waitLine(t, "about six minutes on two cores", time.Second)
	dev.waitLine(t, "TEMPORAL_CLI=/path/to/temporal make dev", time.Second)
	beat := dev.waitLine(t, "still building the Temporal CLI", time.Minute)
	require.Regexp(t, `still building the Temporal CLI: 0m0[2-9]s so far, 1 of about 1,300 packages compiled$`, beat)
	require.Equal(t, 130, dev.interrupt(t), "Ctrl-C during the build stops it:\n%s", dev.output())
	require.Eventually(t, func() bool { return syscall.Kill(-dev.cmd.Process.Pid, 0) != nil }, 5*time.Second, 50*time.Millisecond,
		"nothing of the build, nor its heartbeat, is left running")
	require.NotContains(t, dev.output(), "tollgate is running")
}

// devStack is make dev's stack, started by scripts/dev.sh on free ports
// with its state, workspace and binaries in temporary folders.
type devStack struct {
	dev *devRun
	// api is the API's URL; temporalAddr the dev server's frontend.
	api, temporalAddr string
	// bin, state and workspace are the folders dev.sh used for bin/,
	// .tollgate/ and workspace/.
	bin, state, workspace string
}

// devBinaries are the packages make dev builds into its bin folder.
var devBinaries = []string{"worker", "api", "cmd/scripted-model", "cmd/tollgate", "examples/ai-sdk-chat"}

// startDevStack runs make dev's script with the Temporal CLI the tests
// use (TEMPORAL_CLI) and env added, and waits for its banner. With built,
// its bin folder holds the binaries already, as after a first make dev,
// linked from proctest's builds, so that the script's go build finds them
// up to date rather than link them again for each test; without, the
// script builds them as in a fresh clone.
func startDevStack(t *testing.T, temporalCLI string, built bool, env ...string) *devStack {
	t.Helper()
	s := &devStack{bin: t.TempDir(), state: t.TempDir(), workspace: t.TempDir()}
	if built {
		var waits []func() string
		for _, pkg := range devBinaries {
			waits = append(waits, proctest.BuildTo(t, "github.com/tollgate/tollgate/"+pkg, filepath.Join(s.bin, filepath.Base(pkg))))
		}
		for _, wait := range waits {
			wait()
		}
	}
	// Another test's process may bind a port between freePort's pick and
	// the script's check of it (the script then exits, naming the port):
	// the stack starts again on other ports.
	for attempt := 1; ; attempt++ {
		apiAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		temporalPort := freePort(t)
		s.api, s.temporalAddr = "http://"+apiAddr, "127.0.0.1:"+strconv.Itoa(temporalPort)
		s.dev = startDev(t, root, append([]string{
			"TEMPORAL_CLI=" + temporalCLI,
			"TOLLGATE_DEV_BIN=" + s.bin,
			"TOLLGATE_STATE_DIR=" + s.state,
			"TOLLGATE_WORKSPACE=" + s.workspace,
			"TOLLGATE_MCP_CONFIG=off",
			"HTTP_ADDR=" + apiAddr,
			"TOLLGATE_DEV_TEMPORAL_PORT=" + strconv.Itoa(temporalPort),
			"TOLLGATE_DEV_UI_PORT=" + strconv.Itoa(freePort(t)),
			"TOLLGATE_DEV_MODEL_ADDR=127.0.0.1:" + strconv.Itoa(freePort(t)),
			"TOLLGATE_DEV_EXAMPLE_ADDR=127.0.0.1:" + strconv.Itoa(freePort(t)),
		}, env...)...)
		const running, within = "tollgate is running.", 5 * time.Minute
		line, exited := s.dev.nextLine(running, within)
		if line == "" && exited && s.dev.portInUse() && attempt < portAttempts {
			t.Logf("%s found a port it was given in use; starting it again on others:\n%s", devScript, s.dev.output())
			s.state = t.TempDir()
			continue
		}
		s.dev.saw(t, running, within, line, exited)
		break
	}
	s.dev.waitLine(t, "Ctrl-C stops everything.", 5*time.Second)
	return s
}
