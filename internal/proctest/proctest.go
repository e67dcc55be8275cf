// Package proctest runs tollgate's binaries as processes of their own, for
// tests that cross a process boundary: build a package, start it with a
// clean environment, kill it as a crash would, show its log when the test
// failed.
package proctest

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// killWait bounds how long a killed process may take to be reaped, with
// everything it started.
const killWait = 10 * time.Second

// Process is a binary running as a process of its own, in its own process
// group, logging to a file.
type Process struct {
	Name string
	Cmd  *exec.Cmd
	// Exited is closed once the process has been reaped.
	Exited <-chan struct{}

	logPath string
}

// Start runs bin with env (and no other environment). The process has a
// group of its own, so that a kill reaches whatever it started (a Bash
// tool's shell), and dies with the test binary, so that nothing outlives a
// test that times out. Cleanup kills its group, waits for it, and shows its
// log when the test failed.
func Start(t testing.TB, name, bin string, env []string) *Process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		require.NoError(t, err, "start %s", name)
	}
	exited := make(chan struct{})
	p := &Process{Name: name, Cmd: cmd, Exited: exited, logPath: logPath}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		p.Kill(t)
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", name, p.Log())
		}
	})
	return p
}

// Log is what the process has written so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// Kill sends SIGKILL to the process group and waits until the process has
// been reaped and no process of its group is left. It may be called again.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	pgid := p.Cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.Exited:
	case <-time.After(killWait):
		t.Errorf("%s (pid %d) survived SIGKILL", p.Name, pgid)
		return
	}
	require.Eventually(t, func() bool {
		return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
	}, killWait, 10*time.Millisecond, "%s's process group is gone", p.Name)
}

// Stop asks the process to stop (SIGTERM), as a deployment does, waits for
// it to exit, and kills its group when it does not in time.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited:
	case <-time.After(killWait):
		t.Errorf("%s (pid %d) did not stop within %s of SIGTERM", p.Name, p.Cmd.Process.Pid, killWait)
	}
	p.Kill(t)
}

// Crash kills the process as a crash would (SIGKILL), requires that it died
// of it, and returns when.
func (p *Process) Crash(t testing.TB) time.Time {
	t.Helper()
	p.Kill(t)
	at := time.Now()
	status := p.Cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, status.Signaled() && status.Signal() == syscall.SIGKILL, "%s died of SIGKILL: %s", p.Name, p.Cmd.ProcessState)
	return at
}

// EnvironWithout is this process's environment less the variables whose
// names start with one of prefixes, so that a developer's settings do not
// leak into the process under test.
func EnvironWithout(prefixes ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

// GORACEQuickExit is the GORACE setting for a process that runs a test
// binary built with -race (this one, run again): such a binary sleeps a
// second as it exits, for goroutines still running to report their races
// (the race detector's atexit_sleep_ms), which a test that starts it time
// and again waits out every time. A race found before the exit still
// fails the process. The options GORACE already has are kept.
func GORACEQuickExit() string {
	return "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// MCPServer is the path of an MCP reference server from npm
// (mcp-server-filesystem, mcp-server-everything) that `make mcp-servers`
// installs into bin/mcp of the module root.
func MCPServer(t testing.TB, name string) string {
	t.Helper()
	bin := filepath.Join(ModuleDir(t), "bin", "mcp", "node_modules", ".bin", name)
	_, err := os.Stat(bin)
	require.NoError(t, err, "%s is missing: `make mcp-servers` installs it (it needs Node 20 and npm)", name)
	return bin
}

// ModuleDir is the folder of the module the test belongs to: the nearest
// one above the test's folder with a go.mod.
func ModuleDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test's folder")
		dir = parent
	}
}

// EnvBrowser names a Chrome or Chromium binary for the tests that drive a
// browser, when none is found under its usual names.
const EnvBrowser = "TOLLGATE_BROWSER"

// browserNames are where Chrome and Chromium are found: on PATH under the
// names Debian, Ubuntu, Fedora and Google's packages give them, and
// Google Chrome's and Chromium's app bundles on a Mac.
var browserNames = []string{
	"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless-shell",
	"/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
	"/Applications/Chromium.app/Contents/MacOS/Chromium",
}

// Browser is the path of a Chrome or Chromium for headless tests:
// $TOLLGATE_BROWSER, else the first of browserNames there is. Without one
// the test fails with a line that says how to get one.
func Browser(t testing.TB) string {
	t.Helper()
	if exe := os.Getenv(EnvBrowser); exe != "" {
		_, err := os.Stat(exe)
		require.NoError(t, err, "%s=%s", EnvBrowser, exe)
		return exe
	}
	for _, name := range browserNames {
		if exe, err := exec.LookPath(name); err == nil {
			return exe
		}
	}
	t.Fatalf("these tests drive a headless Chrome or Chromium, and none is installed: `apt-get install -y chromium` " +
		"(Debian; .ci/run does it), `brew install --cask chromium` (Mac), or set " + EnvBrowser + " to one")
	return ""
}
