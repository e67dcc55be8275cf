// Package devserver runs a real Temporal dev server (the Temporal CLI's
// `server start-dev`) for tests, tuned for one machine as `make dev`'s is,
// on free loopback ports, with its output kept out of the test's.
package devserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
)

// EnvBinary names the variable that points at a temporal binary, overriding
// the one in the module's bin folder.
const EnvBinary = "TOLLGATE_TEMPORAL_BIN"

const (
	// startTimeout bounds the wait for a started server to serve the
	// namespace. A cold start takes a few seconds; a loaded CI machine more.
	startTimeout = 60 * time.Second
	// stopTimeout is how long a server gets to exit after SIGTERM before it
	// is killed.
	stopTimeout = 10 * time.Second
	// startAttempts covers the small chance that a free port picked here is
	// taken by someone else before the server binds it.
	startAttempts = 3
	// tailBytes is how much of the server's output an error quotes.
	tailBytes = 4 << 10
)

// tunedFlags are the dev server flags that bring task dispatch from about
// 50 ms to about 12 ms on one machine: a poll-rate limit lifted, one
// partition per task queue, eager activities. They suit a single-machine
// dev server only. scripts/dev.sh gives
// `make dev`'s server the same (TestMakeDevTunesItsServerAlike).
var tunedFlags = []string{
	"--log-level", "warn",
	"--sqlite-pragma", "journal_mode=wal",
	"--sqlite-pragma", "synchronous=normal",
	// The write-ahead log is cut back to 16 MB after a checkpoint, rather
	// than keep the largest size a burst ever gave it.
	"--sqlite-pragma", "journal_size_limit=16777216",
	"--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000",
	"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
	"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
	"--dynamic-config-value", "system.enableActivityEagerExecution=true",
	// A worker's poll waits LongPoll for a task, not a minute (see there).
	"--dynamic-config-value", "matching.longPollExpirationInterval=" + strconv.Itoa(int(LongPoll.Seconds())),
}

// LongPoll is how long the dev server keeps a worker's poll
// waiting for a task before it answers empty (Temporal's default is a
// minute). It bounds a stall seen under load on the dev server: the SDK's
// two default workflow pollers poll only the worker's sticky queue while
// its last answer hinted at a backlog, and this server can hint 1 with no
// task behind it. The benchmark caught both pollers on the sticky queue,
// empty for 60 s, while 46 new turns' first tasks waited on the task queue
// (bench/RESULTS.md, notes of 2026-12-05). An empty answer clears the hint,
// so the stall lasts one such poll. An idle worker's four pollers then ask
// again every 5 s: some 0.8 requests a second.
const LongPoll = 5 * time.Second

// Options configure Run. The zero value is a headless server with its
// database in a new temporary folder.
type Options struct {
	// Dir holds the server's log (temporal.log) and, unless DBFile is set,
	// its database. Default: a new temporary folder that Stop removes.
	Dir string
	// DBFile is the SQLite database; it persists across Restart. Default:
	// temporal.db in Dir.
	DBFile string
	// Namespace is created at launch and waited for. Default "default".
	Namespace string
	// UI serves the Web UI on a free port (Server.UIPort); without it the
	// server is headless, which starts faster.
	UI bool
	// DynamicConfig are more dynamic config values, "key=value" each (a
	// lower history limit, say, for a test that goes past it).
	DynamicConfig []string
}

// Server is a running dev server.
type Server struct {
	// HostPort is the frontend's gRPC address, for client.Options.HostPort.
	HostPort string
	// UIPort is the Web UI's port on 127.0.0.1, or 0 when headless.
	UIPort int
	// Namespace is the namespace the server was started with.
	Namespace string
	// DBFile is the server's SQLite database.
	DBFile string
	// LogFile receives the server's output.
	LogFile string

	binary  string
	args    []string
	tempDir string // removed by Stop when Run created it
	// dynamicConfig are Options.DynamicConfig.
	dynamicConfig []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
	stopped bool
}

// Run starts a dev server and returns once it serves the namespace. The
// caller must Stop it.
func Run(opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{binary: bin, Namespace: opts.Namespace, DBFile: opts.DBFile, dynamicConfig: opts.DynamicConfig}
	if s.Namespace == "" {
		s.Namespace = "default"
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "tollgate-temporal-"); err != nil {
			return nil, fmt.Errorf("devserver: %w", err)
		}
		s.tempDir = dir
	}
	if s.DBFile == "" {
		s.DBFile = filepath.Join(dir, "temporal.db")
	}
	s.LogFile = filepath.Join(dir, "temporal.log")

	for attempt := 1; ; attempt++ {
		if err = s.pickPorts(opts.UI); err == nil {
			if err = s.start(); err == nil {
				return s, nil
			}
		}
		// A server that exited at once most likely lost a port race; one
		// that never answered will not do better on another port.
		if attempt == startAttempts || !errors.Is(err, errExited) {
			s.removeTempDir()
			return nil, err
		}
	}
}

// ForTest runs a server for the duration of tb and kills it in cleanup (a
// graceful stop takes over a second and the data is thrown away). Its files
// live in tb's temporary folder. It fails tb when the server does not start;
// it never skips.
func ForTest(tb testing.TB) *Server {
	tb.Helper()
	return ForTestWith(tb, Options{})
}

// ForTestWith is ForTest with opts (their Dir is tb's temporary folder).
func ForTestWith(tb testing.TB, opts Options) *Server {
	tb.Helper()
	opts.Dir = tb.TempDir()
	s, err := Run(opts)
	if err != nil {
		tb.Fatalf("start Temporal dev server: %v", err)
	}
	tb.Cleanup(func() {
		if err := errors.Join(s.Crash(), s.Stop()); err != nil {
			tb.Errorf("stop Temporal dev server: %v", err)
		}
	})
	return s
}

// ClientOptions are the options to reach the server; add your own Logger,
// DataConverter or interceptors before dialing.
func (s *Server) ClientOptions() client.Options {
	return client.Options{
		HostPort:  s.HostPort,
		Namespace: s.Namespace,
		Logger:    quietLogger(),
	}
}

// Dial connects a client to the server's namespace.
func (s *Server) Dial() (client.Client, error) {
	c, err := client.Dial(s.ClientOptions())
	if err != nil {
		return nil, fmt.Errorf("devserver: dial %s: %w", s.HostPort, err)
	}
	return c, nil
}

// Stop ends the server: SIGTERM to its process group, then SIGKILL if it has
// not exited within a deadline. It removes the temporary folder Run created.
// Stop is final and safe to call twice.
func (s *Server) Stop() error {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	err := s.halt(true)
	s.removeTempDir()
	return err
}

// Crash kills the server with SIGKILL, as a crash would, and leaves it down
// until Restart. Nothing acknowledged is lost: the server commits before it
// answers, and a killed process keeps SQLite's write-ahead log.
func (s *Server) Crash() error {
	return s.halt(false)
}

// Pause stops the server's processes with SIGSTOP, as a machine that has
// stopped scheduling them would: connections stay open and nothing is
// answered until Resume. It returns once every thread of the server has
// stopped (a busy machine may run one a while after the signal), so a call
// made after it is never answered before Resume.
func (s *Server) Pause() error {
	if err := s.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	s.mu.Lock()
	pid := s.cmd.Process.Pid
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for !allStopped(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("devserver: %s: threads still running 10s after SIGSTOP", s.HostPort)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

// allStopped reports whether every thread of process pid is stopped (state
// T or t in /proc/PID/task/TID/stat), or the process is gone.
func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return true
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false
		}
		if st := b[i+2]; st != 'T' && st != 't' {
			return false
		}
	}
	return true
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// signal sends sig to the running server's process group.
func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("devserver: not running")
	}
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("devserver: %s to %s: %w", sig, s.HostPort, err)
	}
	return nil
}

// Restart stops the server gracefully, if it runs, and starts it again on
// the same ports with the same database. Workflows survive it.
func (s *Server) Restart() error {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return errors.New("devserver: restart after Stop")
	}
	if err := s.halt(true); err != nil {
		return err
	}
	return s.start()
}

// Binary finds the temporal CLI: $TOLLGATE_TEMPORAL_BIN, else bin/temporal
// in the module root, else temporal on PATH.
func Binary() (string, error) {
	if bin := os.Getenv(EnvBinary); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("devserver: %s=%q: %w", EnvBinary, bin, err)
		}
		return bin, nil
	}
	if root, err := moduleRoot(); err == nil {
		bin := filepath.Join(root, "bin", "temporal")
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
	}
	if bin, err := exec.LookPath("temporal"); err == nil {
		return bin, nil
	}
	return "", errors.New("devserver: no temporal CLI in bin/ or on PATH: run `make temporal` " +
		"(or set " + EnvBinary + " to a temporal binary)")
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// pickPorts chooses free loopback ports and the arguments that use them.
func (s *Server) pickPorts(ui bool) error {
	n := 1
	if ui {
		n = 2
	}
	ports, err := freePorts(n)
	if err != nil {
		return fmt.Errorf("devserver: pick free ports: %w", err)
	}
	s.HostPort = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	args := []string{"server", "start-dev",
		"--ip", "127.0.0.1",
		"--port", strconv.Itoa(ports[0]),
		"--db-filename", s.DBFile,
	}
	if ui {
		s.UIPort = ports[1]
		args = append(args, "--ui-port", strconv.Itoa(s.UIPort))
	} else {
		s.UIPort = 0
		args = append(args, "--headless")
	}
	if s.Namespace != "default" {
		args = append(args, "--namespace", s.Namespace)
	}
	s.args = append(args, tunedFlags...)
	for _, kv := range s.dynamicConfig {
		s.args = append(s.args, "--dynamic-config-value", kv)
	}
	return nil
}

// freePorts returns n distinct ports that were free a moment ago. Holding
// all listeners open until every port is chosen keeps them distinct.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// errExited marks a server that exited before it was ready.
var errExited = errors.New("server exited")

// start launches the process with s.args and waits until it is ready.
func (s *Server) start() error {
	logFile, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	fmt.Fprintf(logFile, "--- %s %s %q\n", time.Now().Format(time.RFC3339Nano), s.binary, s.args)
	cmd := exec.Command(s.binary, s.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group, so Stop reaches everything it started; and
	// killed with the test binary, so a test that times out leaves no server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("devserver: start %s: %w", s.binary, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.waitReady(ctx, exited); err != nil {
		_ = s.halt(false)
		return fmt.Errorf("devserver: %s on %s: %w\n--- last output (%s) ---\n%s",
			s.binary, s.HostPort, err, s.LogFile, tail(s.LogFile, tailBytes))
	}
	return nil
}

// waitReady returns once the frontend accepts connections, reports itself
// healthy and knows the namespace.
func (s *Server) waitReady(ctx context.Context, exited <-chan struct{}) error {
	const poll = 25 * time.Millisecond
	var last error
	wait := func() error {
		select {
		case <-exited:
			return fmt.Errorf("%w before it was ready (%s)", errExited, s.exitStatus())
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %w", startTimeout, last)
		case <-time.After(poll):
			return nil
		}
	}

	// A plain TCP probe first: gRPC's reconnect backoff would otherwise add
	// up to a second to every start.
	for {
		conn, err := net.DialTimeout("tcp", s.HostPort, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		last = err
		if err := wait(); err != nil {
			return err
		}
	}

	c, err := client.NewLazyClient(s.ClientOptions())
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		last = s.probe(ctx, c)
		if last == nil {
			return nil
		}
		if err := wait(); err != nil {
			return err
		}
	}
}

func (s *Server) probe(ctx context.Context, c client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	resp, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.Namespace})
	if err != nil {
		return fmt.Errorf("describe namespace %q: %w", s.Namespace, err)
	}
	if st := resp.GetNamespaceInfo().GetState(); st != enumspb.NAMESPACE_STATE_REGISTERED {
		return fmt.Errorf("namespace %q is %s", s.Namespace, st)
	}
	return nil
}

// halt stops the running process, if any: gracefully with SIGTERM to the
// group and SIGKILL after stopTimeout, or at once with SIGKILL.
func (s *Server) halt(graceful bool) error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pgid := cmd.Process.Pid
	var err error
	if graceful {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(stopTimeout):
		}
		err = fmt.Errorf("devserver: %s did not exit within %s of SIGTERM; killed", s.HostPort, stopTimeout)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-exited:
		return err
	case <-time.After(stopTimeout):
		return fmt.Errorf("devserver: %s (pid %d) survived SIGKILL", s.HostPort, pgid)
	}
}

func (s *Server) exitStatus() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.ProcessState == nil {
		return "unknown status"
	}
	return s.cmd.ProcessState.String()
}

func (s *Server) removeTempDir() {
	if s.tempDir != "" {
		_ = os.RemoveAll(s.tempDir)
		s.tempDir = ""
	}
}

// tail returns the last n bytes of a file, or a note why it cannot.
func tail(name string, n int64) string {
	f, err := os.Open(name)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err.Error()
	}
	return string(bytes.TrimSpace(b))
}

// quietLogger keeps the SDK's info messages out of test output; warnings
// and errors still reach stderr.
func quietLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}
