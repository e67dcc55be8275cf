package activities

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// Limits of the MCP servers' lives.
const (
	// mcpStartTimeout bounds starting a server and listing its tools.
	mcpStartTimeout = 30 * time.Second
	// mcpWaitForRestart is how long a call waits for a server that died to
	// be running again before it answers the model that it is not.
	mcpWaitForRestart = 15 * time.Second
	// mcpRestartBackoff is the first wait before a server that died is
	// started again; it doubles up to mcpMaxRestartBackoff while starting
	// fails, and starts over once the server has run a minute.
	mcpRestartBackoff    = 250 * time.Millisecond
	mcpMaxRestartBackoff = 30 * time.Second
	// mcpStopGrace is how long a stdio server has to exit once its input
	// is closed before it is signalled, and then killed.
	mcpStopGrace = 2 * time.Second
)

// MCP runs the MCP servers of a configuration for the worker: it starts
// each once, offers their tools, restarts a server that dies, and stops
// them all with Close. Every tool is an activity of its own name
// (mcp__<server>__<tool>), which the gate treats as any other tool.
type MCP struct {
	// OutputCap is how many bytes of a tool's result go back to the model.
	OutputCap int

	servers []*mcpServer
	specs   []protocol.ToolSpec
	// workspace is the folder the tools' workspace paths are confined to.
	workspace string
	// Ledger, when set, takes the audit ledger's rows that a turn hands a
	// tool's activity (ToolInput.Ledger) while the tool runs.
	Ledger audit.Writer
}

// StartMCP starts every server of cfg and lists its tools. A server that
// cannot start, or cannot list its tools, is an error naming it and why
// (with the last lines it wrote to stderr), and the servers already started
// are stopped.
func StartMCP(ctx context.Context, cfg MCPConfig, log *slog.Logger) (*MCP, error) {
	m := &MCP{workspace: cfg.Workspace}
	// offered is, by the name a tool is offered as, which server's which
	// tool has it.
	offered := map[string]protocol.MCPTool{}
	for _, sc := range cfg.Servers {
		s := &mcpServer{cfg: sc, dir: cfg.Dir, log: log.With("mcpServer", sc.Name), restarted: make(chan struct{})}
		s.client = mcp.NewClient(&mcp.Implementation{Name: "tollgate", Version: "1"}, nil)
		startCtx, cancel := context.WithTimeout(ctx, mcpStartTimeout)
		err := s.start(startCtx)
		var tools []*mcp.Tool
		if err == nil {
			if tools, err = s.listTools(startCtx); err != nil {
				err = redacted(sc, err)
			}
		}
		cancel()
		if err != nil {
			s.close()
			m.Close()
			return nil, fmt.Errorf("MCP server %q: %w", sc.Name, err)
		}
		m.servers = append(m.servers, s)
		s.done = make(chan struct{})
		go s.supervise()
		if err := checkWorkspacePaths(sc, cfg.Workspace, tools); err != nil {
			m.Close()
			return nil, fmt.Errorf("MCP server %q: %w", sc.Name, err)
		}
		var names []string
		for _, t := range tools {
			spec, err := mcpSpec(sc.Name, t)
			if err != nil {
				log.Warn("MCP tool not offered", "mcpServer", sc.Name, "tool", t.Name, "error", err)
				continue
			}
			spec.WorkspacePaths = sc.WorkspacePaths[t.Name]
			// Two tools under one name would leave the policy, the
			// grants and the ledger unable to tell which of them a call
			// is: server a's tool _x and server a_'s tool x are both
			// mcp__a___x, as are one server's "a.b" and "a_b".
			if other, dup := offered[spec.Name]; dup {
				m.Close()
				return nil, fmt.Errorf("MCP server %q's tool %q and MCP server %q's tool %q would both be offered as %s: rename a server in the configuration so that every tool has a name of its own",
					other.Server, other.Tool, sc.Name, t.Name, spec.Name)
			}
			offered[spec.Name] = *spec.MCP
			m.specs = append(m.specs, spec)
			names = append(names, spec.Name)
		}
		log.Info("MCP server started", "mcpServer", sc.Name, "type", sc.Type, "tools", names)
	}
	return m, nil
}

// Specs describes the servers' tools to the model, in the configuration's
// server order and each server's tool order.
func (m *MCP) Specs() []protocol.ToolSpec {
	if m == nil {
		return nil
	}
	return slices.Clone(m.specs)
}

// Activities returns the tool activities by their names, for registration
// with a worker, as Tools.Activities does.
func (m *MCP) Activities() map[string]any {
	out := map[string]any{}
	if m == nil {
		return out
	}
	for _, spec := range m.specs {
		i := slices.IndexFunc(m.servers, func(s *mcpServer) bool { return s.cfg.Name == spec.MCP.Server })
		out[spec.Name] = Carried(m.Ledger, func(ctx context.Context, in ToolInput) (ToolOutput, error) {
			return m.call(ctx, m.servers[i], spec, in)
		})
	}
	return out
}

// Close stops every server and waits for it: a stdio server and every
// process it started are gone when Close returns.
func (m *MCP) Close() {
	if m == nil {
		return
	}
	var wg sync.WaitGroup
	for _, s := range m.servers {
		wg.Go(s.close)
	}
	wg.Wait()
}

// call runs one call of spec's tool on server s. What the tool answers,
// error or not, is the model's to read; only the activity's cancellation
// fails the activity. A call is never sent twice: a server that dies during
// a call answers the model that the call may have run.
func (m *MCP) call(ctx context.Context, s *mcpServer, spec protocol.ToolSpec, in ToolInput) (ToolOutput, error) {
	if err := ctx.Err(); err != nil {
		return ToolOutput{}, err
	}
	fail := func(format string, args ...any) (ToolOutput, error) {
		if err := ctx.Err(); err != nil {
			return ToolOutput{}, err
		}
		return ToolOutput{Status: protocol.StatusError, Result: spec.Name + ": " + s.cfg.Redact(fmt.Sprintf(format, args...))}, nil
	}
	// The server gets the call the policy saw.
	args, err := m.serverArguments(spec, in.Call.Arguments)
	if err != nil {
		return fail("%v", err)
	}
	session, err := s.session(ctx)
	if err != nil {
		return fail("%v", err)
	}
	stop := heartbeat(ctx)
	defer stop()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: spec.MCP.Tool, Arguments: json.RawMessage(args)})
	if err != nil {
		if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) {
			return fail("MCP server %q stopped during the call, which may have run partly: %v", s.cfg.Name, err)
		}
		return fail("%v", err)
	}
	out := ToolOutput{Status: protocol.StatusOK, Result: mcpResultText(res)}
	if res.IsError {
		out.Status = protocol.StatusError
	}
	out.Result = text.Truncate(out.Result, m.outputCap())
	return out, nil
}

// serverArguments are the arguments the server gets: normalized, and
// where the configuration names workspace paths, checked as the built-in
// tools check theirs when they run (runArguments: inside the workspace, no
// symbolic link on the way, which the turn resolved before the policy read
// the call) and then made absolute, since a server knows the workspace by
// its absolute folder (server-filesystem's allowed directories) and runs
// in another one (the configuration's). It is the file the policy and the
// person saw, spelled for the server.
func (m *MCP) serverArguments(spec protocol.ToolSpec, arguments string) (string, error) {
	if len(spec.WorkspacePaths) == 0 {
		return NormalizeArguments(spec, nil, arguments)
	}
	// Only where it is: the server, not this process, opens the files.
	ws, err := findWorkspace(m.workspace)
	if err != nil {
		return "", err
	}
	args, err := runArguments(spec, ws, arguments)
	if err != nil {
		return "", err
	}
	// The paths are now inside the workspace, relative, with no link on
	// the way: each is spelled from the workspace's real folder.
	return normalize(spec, ws.roots(), args, func(_, rel string) (string, error) {
		return filepath.Join(ws.real, rel), nil
	})
}

// checkWorkspacePaths says what is wrong with a server's workspacePaths:
// a tool the server does not offer, or an argument its schema does not
// declare as a string (a path this cannot read as one would go unchecked),
// or no workspace to confine them to.
func checkWorkspacePaths(sc MCPServerConfig, workspace string, tools []*mcp.Tool) error {
	if len(sc.WorkspacePaths) == 0 {
		return nil
	}
	if workspace == "" {
		return errors.New("workspacePaths needs the worker's workspace, and none is configured")
	}
	var errs []error
	for _, tool := range slices.Sorted(maps.Keys(sc.WorkspacePaths)) {
		i := slices.IndexFunc(tools, func(t *mcp.Tool) bool { return t.Name == tool })
		if i < 0 {
			errs = append(errs, fmt.Errorf("workspacePaths names tool %q, which the server does not offer", tool))
			continue
		}
		params, err := json.Marshal(tools[i].InputSchema)
		if err != nil {
			return fmt.Errorf("tool %q's input schema: %w", tool, err)
		}
		schema, err := parseSchema(params)
		if err != nil {
			return fmt.Errorf("tool %q's input schema cannot be read: %w", tool, err)
		}
		for _, arg := range sc.WorkspacePaths[tool] {
			prop, ok := schema.Properties[arg]
			if !ok || typeName(prop.Type) != "string" {
				errs = append(errs, fmt.Errorf("workspacePaths names argument %q of tool %q, which its schema does not declare as a string", arg, tool))
			}
		}
	}
	return errors.Join(errs...)
}

func (m *MCP) outputCap() int {
	if m.OutputCap > 0 {
		return m.OutputCap
	}
	return DefaultOutputCap
}

// mcpSpec describes tool t of server to the model.
func mcpSpec(server string, t *mcp.Tool) (protocol.ToolSpec, error) {
	name := MCPToolName(server, t.Name)
	if len(name) > maxToolName {
		return protocol.ToolSpec{}, fmt.Errorf("its name %s is longer than the %d characters models take", name, maxToolName)
	}
	params, err := json.Marshal(t.InputSchema)
	if err != nil {
		return protocol.ToolSpec{}, fmt.Errorf("its input schema: %w", err)
	}
	if _, err := parseSchema(params); err != nil {
		return protocol.ToolSpec{}, fmt.Errorf("its input schema cannot be read: %w", err)
	}
	hints := protocol.ToolAnnotations{Destructive: true, OpenWorld: true}
	if a := t.Annotations; a != nil {
		hints = protocol.ToolAnnotations{ReadOnly: a.ReadOnlyHint, Destructive: a.DestructiveHint == nil || *a.DestructiveHint,
			Idempotent: a.IdempotentHint, OpenWorld: a.OpenWorldHint == nil || *a.OpenWorldHint, Title: a.Title}
	}
	if hints.Title == "" {
		hints.Title = t.Title
	}
	// MCP gives destructiveHint a meaning only for a tool that is not
	// read-only; a read-only tool destroys nothing.
	if hints.ReadOnly {
		hints.Destructive = false
	}
	return protocol.ToolSpec{
		Name:        name,
		Description: t.Description,
		Parameters:  params,
		Annotations: &hints,
		MCP:         &protocol.MCPTool{Server: server, Tool: t.Name},
	}, nil
}

// mcpResultText is what the model reads of a tool's result: its text, and
// a line for each piece that is not text (an image, a resource). A result
// with only structured content gives its JSON.
func mcpResultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s: %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			switch r := c.Resource; {
			case r == nil:
			case r.Text != "":
				parts = append(parts, r.Text)
			default:
				parts = append(parts, fmt.Sprintf("[resource %s, %s, %d bytes: %s]", r.URI, r.MIMEType, len(r.Blob),
					base64.StdEncoding.EncodeToString(r.Blob[:min(len(r.Blob), 48)])))
			}
		default:
			b, _ := json.Marshal(c)
			parts = append(parts, string(b))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		parts = append(parts, string(b))
	}
	if len(parts) == 0 {
		return "(no output)"
	}
	return strings.Join(parts, "\n")
}

// mcpServer is one configured server and its current session.
type mcpServer struct {
	cfg    MCPServerConfig
	dir    string
	log    *slog.Logger
	client *mcp.Client

	mu        sync.Mutex
	live      *mcp.ClientSession // nil while the server is not running
	cmd       *exec.Cmd          // the stdio server's process
	stderr    *tailWriter        // its last lines of stderr
	lastErr   error              // why it last failed to start
	restarted chan struct{}      // closed, and replaced, each time live is set or a start fails
	closed    bool
	done      chan struct{} // closed when supervise returns; nil before it runs
}

// start connects to the server: for stdio, it starts the process.
func (s *mcpServer) start(ctx context.Context) error {
	var transport mcp.Transport
	var cmd *exec.Cmd
	var stderr *tailWriter
	switch s.cfg.Type {
	case MCPStdio:
		cmd = exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Dir = s.dir
		cmd.Env = mcpEnv(s.cfg.Env)
		stderr = &tailWriter{log: s.log, redact: s.cfg.Redact}
		cmd.Stderr = stderr
		// A group of its own, killed whole on stop (a server run with npx
		// is a child of npm); the kernel kills the server when the worker
		// dies without stopping it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		// Children that keep stderr open must not hold up Wait.
		cmd.WaitDelay = mcpStopGrace
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: mcpStopGrace}
	case MCPHTTP:
		transport = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: headerClient(s.cfg.Headers)}
	default:
		transport = &mcp.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: headerClient(s.cfg.Headers)}
	}
	session, err := s.client.Connect(ctx, transport, nil)
	if err != nil {
		if cmd != nil {
			killGroup(cmd)
			if tail := stderr.String(); tail != "" {
				err = fmt.Errorf("%w; it wrote: %s", err, tail)
			}
		}
		return startError(s.cfg, err)
	}
	s.mu.Lock()
	s.live, s.cmd, s.stderr, s.lastErr = session, cmd, stderr, nil
	close(s.restarted)
	s.restarted = make(chan struct{})
	s.mu.Unlock()
	return nil
}

// startError says what could not be started, without the values the
// configuration took from the environment.
func startError(cfg MCPServerConfig, err error) error {
	if cfg.Type == MCPStdio {
		return redacted(cfg, fmt.Errorf("cannot start %s: %w", strings.Join(append([]string{cfg.Command}, cfg.Args...), " "), err))
	}
	return redacted(cfg, fmt.Errorf("cannot connect to %s: %w", cfg.URL, err))
}

// redactedError is an error about a server whose message hides the
// values its configuration took from the environment (MCPServerConfig.Redact).
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redacted is err with cfg's expanded values hidden from its message.
func redacted(cfg MCPServerConfig, err error) error {
	return &redactedError{msg: cfg.Redact(err.Error()), err: err}
}

func (s *mcpServer) listTools(ctx context.Context) ([]*mcp.Tool, error) {
	s.mu.Lock()
	session := s.live
	s.mu.Unlock()
	var tools []*mcp.Tool
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list its tools: %w", err)
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// supervise restarts the server each time its session ends, until close.
// The tools stay those listed at the first start: every turn has recorded
// them, and a tool that is gone after a restart answers its calls with the
// server's error.
func (s *mcpServer) supervise() {
	defer close(s.done)
	backoff := mcpRestartBackoff
	for {
		s.mu.Lock()
		session, cmd, started := s.live, s.cmd, time.Now()
		s.mu.Unlock()
		if session != nil {
			err := session.Wait()
			if cmd != nil {
				killGroup(cmd)
			}
			s.mu.Lock()
			closed, tail := s.closed, s.stderr.String()
			s.live = nil
			s.mu.Unlock()
			if closed {
				return
			}
			s.log.Warn("MCP server stopped; starting it again", "error", s.cfg.Redact(fmt.Sprint(err)), "stderr", s.cfg.Redact(tail))
			if time.Since(started) > time.Minute {
				backoff = mcpRestartBackoff
			}
		}
		select {
		case <-time.After(backoff):
		case <-s.closing():
			return
		}
		backoff = min(2*backoff, mcpMaxRestartBackoff)
		ctx, cancel := context.WithTimeout(context.Background(), mcpStartTimeout)
		err := s.start(ctx)
		cancel()
		if err != nil {
			s.log.Error("MCP server cannot start again", "error", err, "retryIn", backoff)
			s.mu.Lock()
			s.lastErr = err
			close(s.restarted)
			s.restarted = make(chan struct{})
			s.mu.Unlock()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			s.stop()
			return
		}
		s.mu.Unlock()
		s.log.Info("MCP server started again")
	}
}

// closedChan is closed; closing returns it once the server is closed.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (s *mcpServer) closing() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return closedChan
	}
	return s.restarted
}

// session is the running session, waiting up to mcpWaitForRestart (and
// no longer than ctx) for a server that is being started again.
func (s *mcpServer) session(ctx context.Context) (*mcp.ClientSession, error) {
	deadline := time.NewTimer(mcpWaitForRestart)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		live, lastErr, restarted, closed := s.live, s.lastErr, s.restarted, s.closed
		s.mu.Unlock()
		switch {
		case closed:
			return nil, fmt.Errorf("MCP server %q is stopped: the worker is stopping", s.cfg.Name)
		case live != nil:
			return live, nil
		}
		select {
		case <-restarted:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			if lastErr != nil {
				return nil, fmt.Errorf("MCP server %q is not running (starting it again failed: %v); the call was not sent", s.cfg.Name, lastErr)
			}
			return nil, fmt.Errorf("MCP server %q is not running; the call was not sent", s.cfg.Name)
		}
	}
}

// close stops the server for good and waits for its supervisor.
func (s *mcpServer) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.restarted)
	s.restarted = make(chan struct{})
	done := s.done
	s.mu.Unlock()
	s.stop()
	if done != nil {
		<-done
	}
}

// stop ends the current session: stdin closed, then SIGTERM, then SIGKILL
// (the SDK's order), and then the whole process group killed.
func (s *mcpServer) stop() {
	s.mu.Lock()
	session, cmd := s.live, s.cmd
	s.mu.Unlock()
	if session != nil {
		_ = session.Close()
	}
	if cmd != nil {
		killGroup(cmd)
	}
}

// killGroup kills what is left of the process group cmd leads.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// mcpEnv is a stdio server's environment: BaseEnv from the worker's, then
// the server's own.
func mcpEnv(own map[string]string) []string {
	env := allowedEnv(nil)
	for _, k := range slices.Sorted(maps.Keys(own)) {
		env = append(env, k+"="+own[k])
	}
	return env
}

// headerClient is an HTTP client that sends headers with every request.
func headerClient(headers map[string]string) *http.Client {
	if len(headers) == 0 {
		return http.DefaultClient
	}
	return &http.Client{Transport: headerTransport{headers: headers, next: http.DefaultTransport}}
}

type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	return t.next.RoundTrip(r)
}

// tailWriter logs what a server writes to stderr, line by line, and keeps
// the last lines for an error message.
type tailWriter struct {
	log *slog.Logger
	// redact hides the server's expanded values from each line.
	redact func(string) string
	mu     sync.Mutex
	buf    []byte
	tail   []string
}

const tailLines = 5

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := w.redact(strings.TrimSpace(string(w.buf[:i])))
		w.buf = w.buf[i+1:]
		if line == "" {
			continue
		}
		w.log.Debug("MCP server stderr", "line", line)
		w.tail = append(w.tail, text.Truncate(line, 500))
		if len(w.tail) > tailLines {
			w.tail = w.tail[1:]
		}
	}
	if len(w.buf) > 4096 {
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

// String is the last lines written, joined with " | ".
func (w *tailWriter) String() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tail := w.tail
	if rest := strings.TrimSpace(string(w.buf)); rest != "" {
		tail = append(slices.Clone(tail), text.Truncate(w.redact(rest), 500))
	}
	return strings.Join(tail, " | ")
}

// dirOf is the absolute folder of path.
func dirOf(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Dir(path)
	}
	return filepath.Dir(abs)
}
