package policy

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/workflows"
)

// TestREADMEPolicyExamplesCompileAndDecideAsTheyClaim keeps the README's
// policy examples true.
func TestREADMEPolicyExamplesCompileAndDecideAsTheyClaim(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	section := string(readme)
	section = section[strings.Index(section, "## Approval policy"):]
	section = section[:strings.Index(section, "\n## ")]
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(section, -1)
	require.Len(t, blocks, 3)

	var policies [][]workflows.Rule
	for _, b := range blocks {
		rules, err := Parse([]byte(b[1]))
		require.NoError(t, err, b[1])
		policies = append(policies, rules)
	}
	// The worker's tools in a workspace, and a client's Pay, as a real
	// model sees them; models send absolute paths as often as relative ones.
	const ws = "/home/dev/project"
	pay := activities.ToolSpec{Name: "Pay", Parameters: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"}},"required":["amount"]}`)}
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
}
