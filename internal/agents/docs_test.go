package agents

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestToolsDocSubagentExampleIsADefinition keeps the subagent example of
// docs/tools.md true: it reads as the definition its comments describe,
// and it is the repository's own notetaker with two optional keys more.
func TestToolsDocSubagentExampleIsADefinition(t *testing.T) {
	doc, err := os.ReadFile("../../docs/tools.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## Subagents\n")
	require.True(t, ok, "docs/tools.md has no heading ## Subagents")
	section, _, _ = strings.Cut(section, "\n## ")
	block := regexp.MustCompile("(?s)```markdown\n(.*?)```").FindStringSubmatch(section)
	require.NotNil(t, block, "the Subagents section has no markdown block")

	def, err := Parse([]byte(block[1]))
	require.NoError(t, err)
	require.Equal(t, Def{
		Name:            "notetaker",
		Description:     "Reads files in the workspace and writes short notes about them.",
		Tools:           []string{"Read", "Write"},
		DisallowedTools: []string{"Bash"},
		Model:           "gpt-4o-mini",
		Prompt:          "You are a careful note-taker. …",
	}, def)

	shipped, err := os.ReadFile("../../agents/notetaker.md")
	require.NoError(t, err)
	own, err := Parse(shipped)
	require.NoError(t, err)
	require.Equal(t, own.Name, def.Name)
	require.Equal(t, own.Description, def.Description)
	require.Equal(t, own.Tools, def.Tools)
}
