package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/protocol"
)

// mcpHarness is a harness whose worker also offers the tools of a real
// MCP filesystem server (@modelcontextprotocol/server-filesystem) serving
// dir, under the name "fs".
func mcpHarness(t *testing.T, change func(*Settings), replies ...activities.ModelOutput) (h *harness, dir string) {
	t.Helper()
	dir = t.TempDir()
	cfg, err := activities.ParseMCPConfig(fmt.Appendf(nil, `{"mcpServers":{"fs":{"command":%q,"args":[%q]}}}`,
		proctest.MCPServer(t, "mcp-server-filesystem"), dir), os.Getenv)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := activities.StartMCP(ctx, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(m.Close)

	settings := testSettings()
	settings.Tools = append(settings.Tools, m.Specs()...)
	if change != nil {
		change(&settings)
	}
	h = newHarness(t, settings, replies...)
	for name, fn := range m.Activities() {
		h.env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	return h, dir
}

func requestedTools(events []protocol.Event) []string {
	var names []string
	for _, e := range events {
		if e.Type == protocol.EventApprovalRequest {
			names = append(names, e.ToolName)
		}
	}
	return names
}

func TestMCPToolThatIsNotReadOnlyWaitsForApprovalAndRunsOnTheServerOnlyOnceApproved(t *testing.T) {
	h, dir := mcpHarness(t, nil)
	h.replies = []activities.ModelOutput{calls(
		call("r", "mcp__fs__list_allowed_directories", `{}`),
		call("w", "mcp__fs__write_file", fmt.Sprintf(`{"path":%q,"content":"approved\n"}`, filepath.Join(dir, "a.txt"))),
		call("x", "mcp__fs__write_file", fmt.Sprintf(`{"path":%q,"content":"declined\n"}`, filepath.Join(dir, "b.txt"))),
	)}
	h.env.RegisterDelayedCallback(func() {
		for _, e := range h.events() {
			if e.Type != protocol.EventApprovalRequest {
				continue
			}
			d := protocol.DecisionDecline
			if e.ToolCallID == "w" {
				d = protocol.DecisionApprove
			}
			h.decide(protocol.ApprovalDecision{RequestID: e.RequestID, Decision: d})
		}
	}, time.Second)

	out := h.runTurn(userTurn("write two files"))

	// The read-only tool asked nobody; both writes asked.
	require.Equal(t, []string{"mcp__fs__write_file", "mcp__fs__write_file"}, requestedTools(h.events()))
	got, err := os.ReadFile(filepath.Join(dir, "a.txt"))
	require.NoError(t, err)
	require.Equal(t, "approved\n", string(got))
	require.NoFileExists(t, filepath.Join(dir, "b.txt"))

	results := toolMessages(out.Messages)
	require.Len(t, results, 3)
	require.Equal(t, []string{"r", "w", "x"}, []string{results[0].ToolCallID, results[1].ToolCallID, results[2].ToolCallID})
	require.Contains(t, results[0].Content, dir, "the server answered with its allowed directory")
	require.Contains(t, results[2].Content, "Not executed: a person declined this call.")
}

func TestPolicyReadsMCPAnnotationsAndAServerWideRule(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules []Rule
		want  []string // the tools that asked
	}{
		// create_directory is marked not destructive, write_file is.
		{"by hint", []Rule{{Tool: "mcp__fs__create_directory", Require: RequireWhen, When: "annotations.destructiveHint"},
			{Tool: "mcp__fs__write_file", Require: RequireWhen, When: "annotations.destructiveHint && !args.path.endsWith('.log')"}},
			[]string{"mcp__fs__write_file"}},
		// A rule for the server covers its tools, read-only ones too; a
		// tool's own rule wins over it.
		{"server-wide", []Rule{{Tool: "mcp__fs", Require: RequireAlways}, {Tool: "mcp__fs__create_directory", Require: RequireNever}},
			[]string{"mcp__fs__list_allowed_directories", "mcp__fs__write_file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, dir := mcpHarness(t, func(s *Settings) { s.Rules = tc.rules })
			h.replies = []activities.ModelOutput{calls(
				call("l", "mcp__fs__list_allowed_directories", `{}`),
				call("d", "mcp__fs__create_directory", fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "new"))),
				call("w", "mcp__fs__write_file", fmt.Sprintf(`{"path":%q,"content":"x"}`, filepath.Join(dir, "a.txt"))),
			)}
			h.env.RegisterDelayedCallback(func() {
				for _, e := range h.events() {
					if e.Type == protocol.EventApprovalRequest {
						h.decide(protocol.ApprovalDecision{RequestID: e.RequestID, Decision: protocol.DecisionApprove})
					}
				}
			}, time.Second)
			h.runTurn(userTurn("go"))
			require.Equal(t, tc.want, requestedTools(h.events()))
			require.DirExists(t, filepath.Join(dir, "new"))
			require.FileExists(t, filepath.Join(dir, "a.txt"))
		})
	}
}

func TestSubagentDefinitionNamesAnMCPServerForAllItsTools(t *testing.T) {
	h, _ := mcpHarness(t, func(s *Settings) {
		s.Agents = []AgentDef{
			{Name: "librarian", Description: "reads files", Tools: []string{"Read", "mcp__fs"}, DisallowedTools: []string{"mcp__fs__write_file"}, Prompt: "You read."},
		}
	}, task("librarian", "look around"), activities.ModelOutput{Content: "looked"}, activities.ModelOutput{Content: "done"})
	h.runTurn(userTurn("delegate"))

	var offered []string
	for _, tool := range h.modelInputs[1].Tools {
		offered = append(offered, tool.Name)
	}
	require.Contains(t, offered, "Read")
	require.Contains(t, offered, "mcp__fs__read_text_file")
	require.Contains(t, offered, "mcp__fs__create_directory")
	require.NotContains(t, offered, "mcp__fs__write_file")
	require.NotContains(t, offered, "Bash")
	require.True(t, slices.ContainsFunc(h.modelInputs[0].Tools, func(s protocol.ToolSpec) bool { return s.Name == "mcp__fs__write_file" }),
		"the turn itself is offered every tool")
	// The model reads the server's schema for each tool.
	i := slices.IndexFunc(h.modelInputs[1].Tools, func(s protocol.ToolSpec) bool { return s.Name == "mcp__fs__read_text_file" })
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(h.modelInputs[1].Tools[i].Parameters, &schema))
	require.Contains(t, schema.Properties, "path")
}
