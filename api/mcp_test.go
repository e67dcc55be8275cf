package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
)

// childrenOf lists the processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after it.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) && fields[0] != "Z" {
			out = append(out, child)
		}
	}
	return out
}

// TestMCPToolsOfTheWorkerGoThroughTheGateOverHTTP runs the worker binary
// with an .mcp.json of two real servers, one over stdio
// (server-filesystem, serving the workspace) and one over streamable HTTP
// (server-everything): the model is offered their tools, the read-only
// one runs unasked, the write waits for a decision taken over HTTP, and
// the worker's death ends the stdio server.
func TestMCPToolsOfTheWorkerGoThroughTheGateOverHTTP(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the worker, starts a Temporal dev server and MCP servers")
	}
	waitForBuild := proctest.Build(t, "github.com/tollgate/tollgate/worker")
	var st *stack
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Done."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{
			{ID: "call_echo", Name: "mcp__everything__echo", Arguments: `{"message":"hello from the gate"}`},
			{ID: "call_write", Name: "mcp__fs__write_file", Arguments: fmt.Sprintf(`{"path":%q,"content":"via MCP\n"}`, filepath.Join(st.workspace, "mcp.txt"))},
		}}
	}
	st = newStack(t, withScript(script), withoutWorker())

	// server-everything over streamable HTTP, as a remote server runs.
	addr := proctest.FreeAddr(t)
	everything := exec.Command(proctest.MCPServer(t, "mcp-server-everything"), "streamableHttp")
	everything.Env = append(os.Environ(), "PORT="+strings.Split(addr, ":")[1])
	everything.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, everything.Start())
	t.Cleanup(func() { _ = syscall.Kill(-everything.Process.Pid, syscall.SIGKILL); _ = everything.Wait() })

	mcpConfig := filepath.Join(t.TempDir(), ".mcp.json")
	require.NoError(t, os.WriteFile(mcpConfig, fmt.Appendf(nil, `{"mcpServers":{
		"fs": {"command": %q, "args": [%q]},
		"everything": {"type": "http", "url": "http://%s/mcp"}
	}}`, proctest.MCPServer(t, "mcp-server-filesystem"), st.workspace, addr), 0o644))
	bin := waitForBuild()
	env := st.workerEnv(
		config.EnvMetricsAddr+"=off",
		config.EnvMCPConfig+"="+mcpConfig,
		// The servers' tools make a turn's settings larger than history
		// takes: they go to the payload store.
		config.EnvPayloadDir+"="+t.TempDir(),
	)
	// The HTTP server may still be starting: the worker would stop, saying
	// it cannot connect. Wait until it answers.
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	worker := proctest.Start(t, "worker", bin, env)

	_, msgs := st.chat(t, `{"query": "echo and write", "conversationId": "mcp-e2e"}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1)
	request := lastOf(events)
	require.Equal(t, "mcp__fs__write_file", request.ToolName)
	require.JSONEq(t, fmt.Sprintf(`{"path":%q,"content":"via MCP\n"}`, filepath.Join(st.workspace, "mcp.txt")), request.Arguments)
	require.NoFileExists(t, filepath.Join(st.workspace, "mcp.txt"), "nothing is written before the approval")

	// The model was offered the servers' tools with their schemas.
	offered := map[string]string{}
	for _, tool := range st.replies.Requests()[0].Tools {
		schema, err := json.Marshal(tool.Function.Parameters)
		require.NoError(t, err)
		offered[tool.Function.Name] = string(schema)
	}
	require.Contains(t, offered, "mcp__everything__echo")
	require.Contains(t, offered["mcp__fs__write_file"], `"content"`)
	require.Contains(t, offered, "Bash", "the built-in tools stay")

	postDecision(t, st.api, request.RequestID, protocol.DecisionApprove, "", true)
	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	results := ofType(rest, protocol.EventToolResult)[0].ToolResults
	require.Equal(t, []string{"call_echo mcp__everything__echo ok", "call_write mcp__fs__write_file ok"}, resultStatuses(results))
	require.Contains(t, results[0].Result, "hello from the gate")
	got, err := os.ReadFile(filepath.Join(st.workspace, "mcp.txt"))
	require.NoError(t, err)
	require.Equal(t, "via MCP\n", string(got))

	// The worker owns the stdio server: it is its child, in a process
	// group of its own, and dies with the worker even when the worker is
	// killed and closes nothing (a clean stop closes it: TestMCPClose…).
	servers := childrenOf(t, worker.Cmd.Process.Pid)
	require.NotEmpty(t, servers, "the stdio server runs as the worker's child")
	worker.Crash(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, pid := range servers {
			// A zombie that init has yet to reap is gone too.
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			assert.True(c, err != nil || strings.Contains(string(stat), ") Z "), "process %d outlived the worker", pid)
		}
	}, 10*time.Second, 20*time.Millisecond)
}

// TestAnMCPToolsWorkspacePathsAreResolvedThroughLinksBeforeThePolicy runs
// the worker binary with server-filesystem serving the workspace, its
// write_file's "path" named a workspace path in .mcp.json, and the
// documented policy "writes outside docs/ ask": a write through docs/src,
// a link to ../src, asks as src/main.go, the person sees that file, and
// the server writes it only once approved; a write that stays in docs/
// runs unasked, given to the server as the workspace's absolute path.
func TestAnMCPToolsWorkspacePathsAreResolvedThroughLinksBeforeThePolicy(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the worker, starts a Temporal dev server and an MCP server")
	}
	waitForBuild := proctest.Build(t, "github.com/tollgate/tollgate/worker")
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Done."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{
			{ID: "c1", Name: "mcp__fs__write_file", Arguments: `{"path":"docs/src/main.go","content":"approved\n"}`},
			{ID: "c2", Name: "mcp__fs__write_file", Arguments: `{"path":"docs/notes.md","content":"fine\n"}`},
		}}
	}
	st := newStack(t, withScript(script), withoutWorker())
	mainGo := filepath.Join(st.workspace, "src", "main.go")
	require.NoError(t, os.MkdirAll(filepath.Dir(mainGo), 0o755))
	require.NoError(t, os.WriteFile(mainGo, []byte("package main\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(st.workspace, "docs"), 0o755))
	require.NoError(t, os.Symlink("../src", filepath.Join(st.workspace, "docs", "src")))

	dir := t.TempDir()
	mcpConfig := filepath.Join(dir, ".mcp.json")
	require.NoError(t, os.WriteFile(mcpConfig, fmt.Appendf(nil, `{"mcpServers":{
		"fs": {"command": %q, "args": [%q], "workspacePaths": {"write_file": ["path"]}}
	}}`, proctest.MCPServer(t, "mcp-server-filesystem"), st.workspace), 0o644))
	policyFile := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(`tools:
  mcp__fs__write_file:
    when: '!args.path.startsWith("docs/")'
`), 0o644))
	proctest.Start(t, "worker", waitForBuild(), st.workerEnv(
		config.EnvMetricsAddr+"=off",
		config.EnvMCPConfig+"="+mcpConfig,
		config.EnvPolicyFile+"="+policyFile,
		config.EnvPayloadDir+"="+t.TempDir(),
	))

	_, msgs := st.chat(t, `{"query": "write through a link", "conversationId": "mcp-linked"}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1)
	requests := ofType(events, protocol.EventApprovalRequest)
	require.Len(t, requests, 1)
	require.Equal(t, "c1", requests[0].ToolCallID, "the write through docs/src asks")
	require.JSONEq(t, `{"path":"src/main.go","content":"approved\n"}`, requests[0].Arguments, "the person sees the file that would be written")
	require.Equal(t, "package main\n", fileText(mainGo), "nothing is written before the approval")

	postDecision(t, st.api, requests[0].RequestID, protocol.DecisionApprove, "", true)
	events = append(events, untilEvent(t, msgs, &seq, protocol.EventFinish, 1)...)
	require.Len(t, ofType(events, protocol.EventApprovalRequest), 1, "the write inside docs/ did not ask")
	results := ofType(events, protocol.EventToolResult)[0].ToolResults
	require.Equal(t, []string{"c1 mcp__fs__write_file ok", "c2 mcp__fs__write_file ok"}, resultStatuses(results), "%v", results)
	require.Equal(t, "approved\n", fileText(mainGo), "the approved file is the one written")
	require.Equal(t, "fine\n", fileText(filepath.Join(st.workspace, "docs", "notes.md")))
}
