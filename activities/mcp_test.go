package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/protocol"
)

// startMCP starts the servers of cfg (a .mcp.json text) and stops them when
// the test ends.
func startMCP(t *testing.T, cfg string) *MCP {
	t.Helper()
	parsed, err := ParseMCPConfig([]byte(cfg), os.Getenv)
	require.NoError(t, err)
	parsed.Dir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := StartMCP(ctx, parsed, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// stdioConfig is a .mcp.json of one stdio server.
func stdioConfig(name, command string, args ...string) string {
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{name: map[string]any{"command": command, "args": args}}})
	return string(b)
}

func mcpSpecNamed(t *testing.T, m *MCP, name string) protocol.ToolSpec {
	t.Helper()
	specs := m.Specs()
	i := slices.IndexFunc(specs, func(s protocol.ToolSpec) bool { return s.Name == name })
	require.GreaterOrEqual(t, i, 0, "no tool %s among %v", name, specNames(specs))
	return specs[i]
}

func specNames(specs []protocol.ToolSpec) []string {
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	return names
}

func callMCP(t *testing.T, m *MCP, tool, args string) ToolOutput {
	t.Helper()
	fn, ok := m.Activities()[tool].(func(context.Context, ToolInput) (ToolOutput, error))
	require.True(t, ok, "no activity %s", tool)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := fn(ctx, ToolInput{Call: protocol.ToolCall{ID: "c1", Name: tool, Arguments: args}})
	require.NoError(t, err)
	return out
}

func TestMCPFilesystemServerToolsCarryTheirSchemasAndHintsAndRunOnTheServer(t *testing.T) {
	dir := t.TempDir()
	m := startMCP(t, stdioConfig("fs", proctest.MCPServer(t, "mcp-server-filesystem"), dir))

	write := mcpSpecNamed(t, m, "mcp__fs__write_file")
	require.Equal(t, &protocol.MCPTool{Server: "fs", Tool: "write_file"}, write.MCP)
	require.False(t, write.Hints().ReadOnly)
	require.True(t, write.Hints().Destructive)
	var schema struct {
		Properties map[string]any `json:"properties"`
		Required   []string       `json:"required"`
	}
	require.NoError(t, json.Unmarshal(write.Parameters, &schema))
	require.Contains(t, schema.Properties, "path")
	require.Contains(t, schema.Properties, "content")
	require.ElementsMatch(t, []string{"path", "content"}, schema.Required)

	read := mcpSpecNamed(t, m, "mcp__fs__read_text_file")
	require.True(t, read.Hints().ReadOnly)
	require.False(t, read.Hints().OpenWorld)
	require.Equal(t, len(m.Specs()), len(m.Activities()), "every tool is an activity")

	file := filepath.Join(dir, "note.txt")
	out := callMCP(t, m, "mcp__fs__write_file", fmt.Sprintf(`{"path":%q,"content":"written over MCP\n"}`, file))
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, "written over MCP\n", string(got))

	out = callMCP(t, m, "mcp__fs__read_text_file", fmt.Sprintf(`{"path":%q}`, file))
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	require.Contains(t, out.Result, "written over MCP")

	// The server's own refusal is the model's to read, as an error.
	out = callMCP(t, m, "mcp__fs__read_text_file", `{"path":"/etc/passwd"}`)
	require.Equal(t, protocol.StatusError, out.Status)
	require.Contains(t, out.Result, "outside allowed directories")

	// Arguments its schema refuses never reach the server.
	out = callMCP(t, m, "mcp__fs__read_text_file", `{"path":"a","Path":"b"}`)
	require.Equal(t, protocol.StatusError, out.Status)
	require.Contains(t, out.Result, "differ only in case")
}

func TestMCPEverythingServerOverStdio(t *testing.T) {
	m := startMCP(t, stdioConfig("everything", proctest.MCPServer(t, "mcp-server-everything"), "stdio"))
	echo := mcpSpecNamed(t, m, "mcp__everything__echo")
	require.True(t, echo.Hints().ReadOnly)
	out := callMCP(t, m, "mcp__everything__echo", `{"message":"hello over stdio"}`)
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	require.Contains(t, out.Result, "hello over stdio")

	// A tool whose annotations say nothing is taken at MCP's defaults:
	// it may destroy, so the default policy asks.
	i := slices.IndexFunc(m.Specs(), func(s protocol.ToolSpec) bool { return s.Name == "mcp__everything__get-sum" })
	require.GreaterOrEqual(t, i, 0, "no get-sum tool among %v", specNames(m.Specs()))
	out = callMCP(t, m, "mcp__everything__get-sum", `{"a":2,"b":40}`)
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	require.Contains(t, out.Result, "42")
}

func TestMCPStdioServerGetsItsOwnEnvironmentNotTheWorkersSecrets(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-worker-secret")
	cfg := fmt.Sprintf(`{"mcpServers":{"everything":{"command":%q,"args":["stdio"],"env":{"GREETING":"configured"}}}}`,
		proctest.MCPServer(t, "mcp-server-everything"))
	m := startMCP(t, cfg)
	out := callMCP(t, m, "mcp__everything__get-env", `{}`)
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	require.Contains(t, out.Result, `"GREETING": "configured"`)
	require.Contains(t, out.Result, `"PATH"`)
	require.NotContains(t, out.Result, "sk-worker-secret")
}

// mcpPid is the process id of the server's current process.
func mcpPid(m *MCP, server string) int {
	for _, s := range m.servers {
		if s.cfg.Name == server {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.cmd == nil || s.live == nil {
				return 0
			}
			return s.cmd.Process.Pid
		}
	}
	return 0
}

func alive(pid int) bool {
	// Signal 0 asks whether the process exists; a zombie (dead, not yet
	// reaped) counts as gone.
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func TestMCPServerThatDiesIsStartedAgain(t *testing.T) {
	m := startMCP(t, stdioConfig("everything", proctest.MCPServer(t, "mcp-server-everything"), "stdio"))
	first := mcpPid(m, "everything")
	require.NotZero(t, first)
	require.NoError(t, syscall.Kill(first, syscall.SIGKILL))

	// The worker starts it again on its own, and the next call runs.
	require.Eventually(t, func() bool {
		pid := mcpPid(m, "everything")
		return pid != 0 && pid != first
	}, 30*time.Second, 20*time.Millisecond, "the server runs again")
	out := callMCP(t, m, "mcp__everything__echo", `{"message":"after the crash"}`)
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	require.Contains(t, out.Result, "after the crash")
	second := mcpPid(m, "everything")
	require.NotZero(t, second)
	require.NotEqual(t, first, second)
}

func TestMCPCloseStopsTheServerAndEveryProcessItStarted(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	// A server started the way npx starts one: a process that starts
	// others. The background sleep stands for a child that outlives it.
	script := fmt.Sprintf("sleep 600 & echo $! > %s; exec %s stdio", pidFile, proctest.MCPServer(t, "mcp-server-everything"))
	cfg, err := ParseMCPConfig([]byte(stdioConfig("everything", "sh", "-c", script)), os.Getenv)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := StartMCP(ctx, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	server := mcpPid(m, "everything")
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.True(t, alive(server) && alive(child))

	m.Close()
	require.False(t, alive(server), "the server is gone when Close returns")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		// The sleep is reaped by init once killed; until then it may show
		// as a zombie, which alive counts as gone.
		assert.False(c, alive(child), "the server's child is gone")
	}, 5*time.Second, 20*time.Millisecond)

	// A call after Close is answered, not hung.
	out := callMCP(t, m, "mcp__everything__echo", `{"message":"late"}`)
	require.Equal(t, protocol.StatusError, out.Status)
	require.Contains(t, out.Result, "stopped")
}

func TestMCPServerThatCannotStartIsAnErrorNamingItAndWhy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"no such command", stdioConfig("ghost", "/no/such/mcp-server"), []string{`MCP server "ghost"`, "/no/such/mcp-server"}},
		{"exits at once", stdioConfig("broken", "sh", "-c", "echo missing API key >&2; exit 3"), []string{`MCP server "broken"`, "missing API key"}},
		{"nothing listens", `{"mcpServers":{"remote":{"type":"http","url":"http://127.0.0.1:1/mcp"}}}`, []string{`MCP server "remote"`, "127.0.0.1:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseMCPConfig([]byte(tc.config), os.Getenv)
			require.NoError(t, err)
			_, err = StartMCP(ctx, cfg, slog.New(slog.DiscardHandler))
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// startEverythingHTTP runs server-everything over streamable HTTP and
// gives its /mcp URL.
func startEverythingHTTP(t *testing.T, addr string) (endpoint string, stop func()) {
	t.Helper()
	_, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(proctest.MCPServer(t, "mcp-server-everything"), "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+port)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	stop = func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	t.Cleanup(stop)
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/mcp")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "server-everything listens on %s", addr)
	return "http://" + addr + "/mcp", stop
}

func TestMCPEverythingServerOverStreamableHTTPWithHeaders(t *testing.T) {
	addr := proctest.FreeAddr(t)
	endpoint, stop := startEverythingHTTP(t, addr)
	// A gateway in front of it that wants the configured header, as a
	// hosted MCP server wants its token.
	target, _ := url.Parse(strings.TrimSuffix(endpoint, "/mcp"))
	proxy := httputil.NewSingleHostReverseProxy(target)
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(gateway.Close)
	t.Setenv("TEST_MCP_TOKEN", "s3cret")

	cfg := fmt.Sprintf(`{"mcpServers":{"remote":{"type":"http","url":%q,"headers":{"Authorization":"Bearer ${TEST_MCP_TOKEN}"}}}}`, gateway.URL+"/mcp")
	m := startMCP(t, cfg)
	out := callMCP(t, m, "mcp__remote__echo", `{"message":"hello over http"}`)
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	require.Contains(t, out.Result, "hello over http")

	// Without the token the gateway refuses, and starting says so.
	noToken := fmt.Sprintf(`{"mcpServers":{"remote":{"type":"http","url":%q}}}`, gateway.URL+"/mcp")
	parsed, err := ParseMCPConfig([]byte(noToken), os.Getenv)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = StartMCP(ctx, parsed, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, `MCP server "remote"`)

	// A server that went away is a tool error, soon, never a hung call.
	stop()
	start := time.Now()
	out = callMCP(t, m, "mcp__remote__echo", `{"message":"anyone?"}`)
	require.Equal(t, protocol.StatusError, out.Status)
	require.Less(t, time.Since(start), mcpWaitForRestart+mcpStartTimeout+5*time.Second)

	// Back at its address, it serves calls again.
	startEverythingHTTP(t, addr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out := callMCP(t, m, "mcp__remote__echo", `{"message":"back"}`)
		assert.Equal(c, protocol.StatusOK, out.Status, out.Result)
	}, mcpMaxRestartBackoff+mcpStartTimeout, 100*time.Millisecond)
}

func TestParseMCPConfig(t *testing.T) {
	env := map[string]string{"TOKEN": "t0k", "ROOT": "/srv"}
	getenv := func(k string) string { return env[k] }

	cfg, err := ParseMCPConfig([]byte(`{"mcpServers":{
		"fs": {"command":"npx","args":["-y","@modelcontextprotocol/server-filesystem","${ROOT}/data","${MISSING:-./ws}"],"env":{"DEBUG":"${DEBUG:-0}"}},
		"remote": {"type":"http","url":"https://mcp.example.com/mcp","headers":{"Authorization":"Bearer ${TOKEN}"}},
		"implicit": {"url":"https://other.example.com/mcp"}
	}}`), getenv)
	require.NoError(t, err)
	require.Equal(t, []MCPServerConfig{
		{Name: "fs", Type: MCPStdio, Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/srv/data", "./ws"}, Env: map[string]string{"DEBUG": "0"},
			expanded: []expansion{{name: "ROOT", value: "/srv"}}},
		{Name: "implicit", Type: MCPHTTP, URL: "https://other.example.com/mcp"},
		{Name: "remote", Type: MCPHTTP, URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer t0k"}},
	}, cfg.Servers)

	for _, tc := range []struct{ config, want string }{
		{`{"mcpServers":{"a":{"comand":"x"}}}`, `server "a": json: unknown field "comand"`},
		{`{"mcpServers":{"a":{}}}`, `server "a": command is required`},
		{`{"mcpServers":{"a":{"type":"http"}}}`, `server "a": url is required`},
		{`{"mcpServers":{"a":{"type":"ws","url":"x"}}}`, `type "ws" is not one of stdio, http, sse`},
		{`{"mcpServers":{"a":{"command":"x","url":"http://y"}}}`, `url and headers are for http servers`},
		{`{"mcpServers":{"a":{"command":"x","args":["${NOPE}"]}}}`, `args[0] names ${NOPE}, which is not set`},
		{`{"mcpServers":{"a b":{"command":"x"}}}`, `server "a b": a server's name may hold only`},
		{`{"mcpServers":{"a__b":{"command":"x"}}}`, `server "a__b": a server's name may hold only`},
		{`[1]`, `cannot unmarshal array`},
	} {
		_, err := ParseMCPConfig([]byte(tc.config), getenv)
		require.ErrorContains(t, err, tc.want, tc.config)
	}
}

func TestMCPToolNameKeepsWhatModelsAccept(t *testing.T) {
	require.Equal(t, "mcp__fs__read_text_file", MCPToolName("fs", "read_text_file"))
	require.Equal(t, "mcp__web__search_v2_beta", MCPToolName("web", "search.v2 beta"))
	_, err := mcpSpec("server", &mcp.Tool{Name: strings.Repeat("x", 60), InputSchema: map[string]any{"type": "object"}})
	require.ErrorContains(t, err, "longer than the 64 characters")
}

func TestMCPValuesFromTheEnvironmentAreInNoErrorLogOrResult(t *testing.T) {
	const secret = "tok-3f9a/b?c=d&e"
	t.Setenv("TEST_MCP_SECRET", secret)
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	requireRedacted := func(t *testing.T, text string) {
		t.Helper()
		for _, form := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret)} {
			require.NotContains(t, text, form)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct{ name, config, want string }{
		{"in args, echoed to stderr", `{"mcpServers":{"echoes":{"command":"sh","args":["-c","echo starting with $0 >&2; exit 1","${TEST_MCP_SECRET}"]}}}`,
			"starting with ${TEST_MCP_SECRET}"},
		{"in a url", `{"mcpServers":{"remote":{"type":"http","url":"http://127.0.0.1:1/mcp?key=${TEST_MCP_SECRET}"}}}`,
			"cannot connect to http://127.0.0.1:1/mcp?key=${TEST_MCP_SECRET}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseMCPConfig([]byte(tc.config), os.Getenv)
			require.NoError(t, err)
			_, err = StartMCP(ctx, cfg, log)
			require.ErrorContains(t, err, tc.want)
			requireRedacted(t, err.Error())
		})
	}

	// A server that ran and went away: the calls' results and the
	// supervisor's log hide the value in its url too.
	endpoint, stop := startEverythingHTTP(t, proctest.FreeAddr(t))
	cfg, err := ParseMCPConfig([]byte(fmt.Sprintf(`{"mcpServers":{"remote":{"type":"http","url":%q}}}`, endpoint+"?key=${TEST_MCP_SECRET}")), os.Getenv)
	require.NoError(t, err)
	m, err := StartMCP(ctx, cfg, log)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	out := callMCP(t, m, "mcp__remote__echo", `{"message":"hello"}`)
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	stop()
	out = callMCP(t, m, "mcp__remote__echo", `{"message":"anyone?"}`)
	require.Equal(t, protocol.StatusError, out.Status)
	requireRedacted(t, out.Result)
	require.Contains(t, out.Result, "key=${TEST_MCP_SECRET}", "the result says where it could not connect")
	m.Close()
	requireRedacted(t, logs.String())
	require.Contains(t, logs.String(), "${TEST_MCP_SECRET}")
}

func TestMCPServerConfigRedactHidesEachExpandedValueLongestFirst(t *testing.T) {
	env := map[string]string{"TOKEN": "abcdef", "PART": "abcd", "FLAG": "1", "URLISH": "a b/c"}
	cfg, err := ParseMCPConfig([]byte(`{"mcpServers":{"s":{"command":"x","args":["${TOKEN}","${PART}","-v=${FLAG}","${URLISH}","${UNSET:-default-value}"]}}}`),
		func(k string) string { return env[k] })
	require.NoError(t, err)
	s := cfg.Servers[0]
	require.Equal(t, "${TOKEN} ${PART} -v=1 ${URLISH} ${URLISH} ${URLISH} default-value",
		s.Redact("abcdef abcd -v=1 a b/c a+b%2Fc a%20b%2Fc default-value"),
		"the longer value whole; a one-character flag and a default written in the file stay")
}

// serveMCPTools serves, over streamable HTTP, an MCP server (the Go SDK's)
// that offers tools of these names, and gives its URL.
func serveMCPTools(t *testing.T, tools ...string) string {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "tools-" + strings.Join(tools, "-"), Version: "1"}, nil)
	for _, name := range tools {
		server.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " ran"}}}, nil
			})
	}
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestMCPToolsOfTwoServersUnderOneNameAreRefusedNamingBoth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(servers map[string]string) (*MCP, error) {
		t.Helper()
		entries := map[string]any{}
		for name, u := range servers {
			entries[name] = map[string]string{"type": "http", "url": u}
		}
		b, err := json.Marshal(map[string]any{"mcpServers": entries})
		require.NoError(t, err)
		cfg, err := ParseMCPConfig(b, os.Getenv)
		require.NoError(t, err)
		m, err := StartMCP(ctx, cfg, slog.New(slog.DiscardHandler))
		if m != nil {
			t.Cleanup(m.Close) // before the servers' own
		}
		return m, err
	}

	// Server a's tool _x and server a_'s tool x are both mcp__a___x.
	_, err := start(map[string]string{"a": serveMCPTools(t, "_x", "y"), "a_": serveMCPTools(t, "x")})
	require.EqualError(t, err, `MCP server "a"'s tool "_x" and MCP server "a_"'s tool "x" would both be offered as mcp__a___x: rename a server in the configuration so that every tool has a name of its own`)
	// One server's tools whose names differ only where a model takes no
	// character.
	_, err = start(map[string]string{"web": serveMCPTools(t, "search.v2", "search_v2")})
	require.ErrorContains(t, err, `MCP server "web"'s tool "search.v2" and MCP server "web"'s tool "search_v2" would both be offered as mcp__web__search_v2`)

	// Renamed, both are offered, each calling its own.
	m, err := start(map[string]string{"a": serveMCPTools(t, "_x"), "b": serveMCPTools(t, "x")})
	require.NoError(t, err)
	require.Equal(t, []string{"mcp__a___x", "mcp__b__x"}, specNames(m.Specs()))
	require.Equal(t, "_x ran", callMCP(t, m, "mcp__a___x", `{}`).Result)
	require.Equal(t, "x ran", callMCP(t, m, "mcp__b__x", `{}`).Result)
}

// TestMCPWorkspacePathsAreCheckedAsTheFileToolsCheckTheirs configures
// server-filesystem's write_file "path" as a workspace path: the spec
// says so (the turn resolves it before the policy), the server gets the
// workspace's absolute path of the file the policy saw, a path that
// leaves the workspace or leads through a link when the call runs is
// refused before the server sees it, and a configuration naming a tool
// or an argument the server does not have stops the start, naming them.
func TestMCPWorkspacePathsAreCheckedAsTheFileToolsCheckTheirs(t *testing.T) {
	ws := t.TempDir()
	server := proctest.MCPServer(t, "mcp-server-filesystem")
	start := func(paths map[string][]string, workspace string) (*MCP, error) {
		b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"fs": map[string]any{
			"command": server, "args": []string{ws}, "workspacePaths": paths,
		}}})
		parsed, err := ParseMCPConfig(b, os.Getenv)
		require.NoError(t, err)
		parsed.Dir, parsed.Workspace = t.TempDir(), workspace
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m, err := StartMCP(ctx, parsed, slog.New(slog.DiscardHandler))
		if m != nil {
			t.Cleanup(m.Close)
		}
		return m, err
	}

	_, err := start(map[string][]string{"write_file": {"path", "content", "mode"}, "no_such_tool": {"path"}}, ws)
	require.ErrorContains(t, err, `MCP server "fs"`)
	require.ErrorContains(t, err, `workspacePaths names tool "no_such_tool", which the server does not offer`)
	require.ErrorContains(t, err, `workspacePaths names argument "mode" of tool "write_file", which its schema does not declare as a string`)
	require.NotContains(t, err.Error(), `argument "content"`, "content is a string: a path, as far as the schema can say")
	_, err = start(map[string][]string{"write_file": {"path"}}, "")
	require.ErrorContains(t, err, "workspacePaths needs the worker's workspace")

	m, err := start(map[string][]string{"write_file": {"path"}}, ws)
	require.NoError(t, err)
	write := mcpSpecNamed(t, m, "mcp__fs__write_file")
	require.Equal(t, []string{"path"}, write.WorkspacePaths)
	require.Empty(t, mcpSpecNamed(t, m, "mcp__fs__read_text_file").WorkspacePaths, "only what the configuration names")

	require.NoError(t, os.MkdirAll(filepath.Join(ws, "src"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "docs"), 0o755))
	require.NoError(t, os.Symlink("../src", filepath.Join(ws, "docs", "src")))
	args, _, err := ResolveArguments(write, WorkspaceRoots(ws, ws), `{"path":"docs/src/main.go","content":"x"}`)
	require.NoError(t, err)
	require.JSONEq(t, `{"path":"src/main.go","content":"x"}`, args, "the policy reads the file the link leads to")

	out := callMCP(t, m, "mcp__fs__write_file", `{"path":"src/main.go","content":"written\n"}`)
	require.Equal(t, protocol.StatusOK, out.Status, out.Result)
	got, err := os.ReadFile(filepath.Join(ws, "src", "main.go"))
	require.NoError(t, err)
	require.Equal(t, "written\n", string(got), "a relative path is the workspace's file, whatever folder the server runs in")

	out = callMCP(t, m, "mcp__fs__write_file", `{"path":"docs/src/other.go","content":"x"}`)
	require.Equal(t, protocol.StatusError, out.Status)
	require.Contains(t, out.Result, `leads through a symbolic link to "src/other.go"`)
	require.NoFileExists(t, filepath.Join(ws, "src", "other.go"))

	out = callMCP(t, m, "mcp__fs__write_file", `{"path":"../outside.txt","content":"x"}`)
	require.Equal(t, protocol.StatusError, out.Status)
	require.Contains(t, out.Result, "is outside the workspace")
}
