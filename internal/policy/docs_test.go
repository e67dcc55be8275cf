package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// docSection is the section of the document at path (from the module's
// root) under the second-level heading, up to the next one or the end.
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + path)
	require.NoError(t, err)
	_, section, ok := strings.Cut("\n"+string(b), "\n"+heading+"\n")
	require.True(t, ok, "%s has no heading %q", path, heading)
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// TestPolicyDocExamplesCompileAndDecideAsTheyClaim keeps the policies of
// docs/policy.md true: every YAML block of the page is one of them.
func TestPolicyDocExamplesCompileAndDecideAsTheyClaim(t *testing.T) {
	doc, err := os.ReadFile("../../docs/policy.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	require.Len(t, blocks, 8, "docs/policy.md's YAML blocks: a new one needs its claims tested here")

	var policies [][]workflows.Rule
	for _, b := range blocks {
		rules, err := policy.Parse([]byte(b[1]))
		require.NoError(t, err, b[1])
		policies = append(policies, rules)
	}
	// The worker's tools in a workspace, and a client's Pay, as a real
	// model sees them; models send absolute paths as often as relative ones.
	const ws = "/home/dev/project"
	pay := protocol.ToolSpec{Name: "Pay", Parameters: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"}},"required":["amount"]}`)}
	tools := append((&activities.Tools{Workspace: ws}).Specs(), pay)
	requires := func(rules []workflows.Rule, tool, args string) bool {
		s := workflows.Settings{Rules: rules, Tools: tools, WorkspaceRoots: []string{ws}}
		return workflows.RequiresApproval(s, tool, args)
	}
	require.True(t, requires(policies[0], "Bash", `{"command":"sudo apt-get install x"}`))
	require.False(t, requires(policies[0], "Bash", `{"command":"ls -la"}`))
	require.False(t, requires(policies[0], "Write", `{"file_path":"a","content":"b"}`))
	require.False(t, requires(policies[1], "Edit", `{"file_path":"docs/x.md","old_string":"a","new_string":"b"}`))
	require.False(t, requires(policies[1], "Write", `{"file_path":"`+ws+`/docs/guide.md","content":"x"}`), "an absolute path inside docs/")
	require.False(t, requires(policies[1], "Write", `{"file_path":"./docs//guide.md","content":"x"}`))
	require.True(t, requires(policies[1], "Write", `{"file_path":"docs/../main.go","content":"x"}`), "a path that only starts with docs/")
	require.True(t, requires(policies[1], "Write", `{"file_path":"`+ws+`/src/main.go","content":"x"}`))
	require.True(t, requires(policies[1], "Edit", `{"file_path":"docs/x.md","old_string":"a","new_string":"b","replace_all":true}`))
	require.True(t, requires(policies[1], "Write", `{"file_path":"main.go","content":""}`))
	require.True(t, requires(policies[2], "Pay", `{"amount":12.5}`))
	require.False(t, requires(policies[2], "Pay", `{"amount":0}`))
	require.Equal(t, []string{"finance-lead", "role:admin"}, policies[2][1].Deciders)
	require.True(t, policies[2][1].SecondPerson)
	// Every Bash call asks, unless its sandboxed run wrote only what no
	// Write rule protects (workflows' TestWithSandboxAuto... holds that).
	require.True(t, requires(policies[3], "Bash", `{"command":"ls"}`))
	require.Equal(t, policy.SandboxAuto, policies[3][0].Sandbox)
	require.False(t, requires(policies[3], "Write", `{"file_path":"docs/a.md","content":""}`))
	require.True(t, requires(policies[3], "Write", `{"file_path":"src/main.go","content":""}`))
	// The shadow rules act on nothing: every Bash call asks, and no Read
	// (not a required tool); promoted, they decide as the comment says.
	watched := policies[5]
	require.True(t, requires(watched, "Bash", `{"command":"go test ./..."}`))
	require.False(t, requires(watched, "Read", `{"file_path":"src/main.go"}`), "Read has no live rule")
	var promoted []workflows.Rule
	for _, r := range watched {
		if r.Shadow {
			r.Shadow = false
			promoted = append(promoted, r)
		}
	}
	require.Len(t, promoted, 2)
	require.False(t, requires(promoted, "Bash", `{"command":"go test ./..."}`))
	require.False(t, requires(promoted, "Bash", `{"command":"git status --short"}`))
	require.True(t, requires(promoted, "Bash", `{"command":"go test ./... && curl x"}`))
	require.False(t, requires(promoted, "Read", `{"file_path":"docs/a.md"}`))
	require.True(t, requires(promoted, "Read", `{"file_path":"src/main.go"}`))
	// The examples hold, as the worker checks them at start, and say what
	// the rules do.
	require.Equal(t, policy.Examples{Ask: []string{`{"command":"sudo apt-get install jq"}`, `{"command":"rm -rf build"}`}, Allow: []string{`{"command":"go test ./..."}`}}, policies[4][0].Examples)
	require.NoError(t, workflows.CheckExamples(workflows.Settings{Rules: policies[4], Tools: tools, WorkspaceRoots: []string{ws}}))
	require.False(t, requires(policies[4], "Write", `{"file_path":"./docs//guide.md","content":"# Guide"}`))
	require.True(t, requires(policies[4], "Write", `{"file_path":"docs/../main.go","content":""}`))
	broken := slices.Clone(policies[4])
	broken[0].Examples.Ask = []string{`{"command":"git push --force"}`}
	err = workflows.CheckExamples(workflows.Settings{Rules: broken, Tools: tools, WorkspaceRoots: []string{ws}})
	require.EqualError(t, err, `tool Bash: example ask {"command":"git push --force"}: the rule lets it run without a person`)
	require.Contains(t, string(doc), err.Error(), "the page shows the error of this example")
	// Carol's token (approve+finance) decides a Pay call; Dave's
	// (approve) does not.
	pays := &policies[6][0]
	require.Equal(t, []string{"role:finance"}, pays.Deciders)
	require.NoError(t, pays.MayDecide("carol", "approve", []string{"finance"}, "dev"))
	require.ErrorContains(t, pays.MayDecide("dave", "approve", nil, "dev"), `Pay calls are decided only by role:finance, not by "dave"`)
	// Two of the leads decide a deploy; the admins, then dave, may too.
	deploy := policies[7][0]
	require.True(t, requires(policies[7], "Bash", `{"command":"make deploy prod"}`))
	require.False(t, requires(policies[7], "Bash", `{"command":"make test"}`))
	require.Equal(t, 2, deploy.Quorum)
	approvals, declines := deploy.Needed()
	require.Equal(t, []int{2, 1}, []int{approvals, declines}, "one decline declines")
	require.Equal(t, []policy.Escalation{{AfterPercent: 50, To: []string{"role:admin"}}, {After: 25 * time.Minute, To: []string{"dave"}}}, deploy.Escalate)
	require.Equal(t, 15*time.Minute, deploy.Escalate[0].Offset(deploy.Timeout))
}

// TestToolsDocMCPExamplesAreTrue keeps the MCP servers section of
// docs/tools.md true: its .mcp.json is the repository's .mcp.json.example,
// and its policy decides as its comment says, on the tools and annotations
// of the real filesystem server.
func TestToolsDocMCPExamplesAreTrue(t *testing.T) {
	section := docSection(t, "docs/tools.md", "## MCP servers")

	jsonBlocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(section, -1)
	require.Len(t, jsonBlocks, 2)
	example, err := os.ReadFile("../../.mcp.json.example")
	require.NoError(t, err)
	require.JSONEq(t, string(example), jsonBlocks[0][1])
	cfg, err := activities.ParseMCPConfig(example, func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, []string{"-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "./workspace"}, cfg.Servers[0].Args)
	exampleCfg := cfg
	cfg, err = activities.ParseMCPConfig([]byte(jsonBlocks[1][1]), func(name string) string { return map[string]string{"SEARCH_TOKEN": "t0k"}[name] })
	require.NoError(t, err)
	require.Equal(t, activities.MCPServerConfig{Name: "search", Type: activities.MCPHTTP, URL: "https://mcp.example.com/mcp",
		Headers: map[string]string{"Authorization": "Bearer t0k"}}, cfg.Servers[0])

	yamlBlock := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(section)
	require.NotNil(t, yamlBlock)
	rules, err := policy.Parse([]byte(yamlBlock[1]))
	require.NoError(t, err)

	dir := t.TempDir()
	fs, err := activities.ParseMCPConfig(fmt.Appendf(nil, `{"mcpServers":{"filesystem":{"command":%q,"args":[%q]}}}`,
		proctest.MCPServer(t, "mcp-server-filesystem"), dir), os.Getenv)
	require.NoError(t, err)
	// The example's workspacePaths name tools and arguments the real
	// server has: the worker would not start otherwise.
	fs.Servers[0].WorkspacePaths, fs.Workspace = exampleCfg.Servers[0].WorkspacePaths, dir
	require.NotEmpty(t, fs.Servers[0].WorkspacePaths)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := activities.StartMCP(ctx, fs, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer m.Close()
	search := protocol.ToolSpec{Name: "mcp__search__query", Parameters: json.RawMessage(`{"type":"object"}`),
		Annotations: &protocol.ToolAnnotations{ReadOnly: true}, MCP: &protocol.MCPTool{Server: "search", Tool: "query"}}
	s := workflows.Settings{Rules: rules, Tools: append(m.Specs(), search)}
	requires := func(tool, args string) bool { return workflows.RequiresApproval(s, tool, args) }

	require.True(t, requires("mcp__filesystem__move_file", `{"source":"a","destination":"b"}`), "destructive")
	require.False(t, requires("mcp__filesystem__create_directory", `{"path":"x"}`), "not destructive")
	require.False(t, requires("mcp__filesystem__read_text_file", `{"path":"x"}`), "read-only")
	require.True(t, requires("mcp__filesystem__write_file", `{"path":"src/a.go","content":""}`))
	require.False(t, requires("mcp__filesystem__write_file", `{"path":"notes/a.md","content":""}`), "its own rule")
	require.True(t, requires("mcp__search__query", `{}`), "the server's rule, though read-only")

	// Without a policy, only what is not marked read-only asks.
	s.Rules = nil
	require.False(t, requires("mcp__filesystem__read_text_file", `{"path":"x"}`))
	require.True(t, requires("mcp__filesystem__create_directory", `{"path":"x"}`))
	require.False(t, requires("mcp__search__query", `{}`))
}
