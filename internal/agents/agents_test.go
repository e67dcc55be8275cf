package agents

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func write(t *testing.T, dir, name, text string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
}

func TestDefinitionsAreReadInNameOrderWithToolsInEitherForm(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "b-reviewer.md", "---\nname: reviewer\ndescription: Reviews code\ntools: Read, Bash\ndisallowedTools: [Bash]\nmodel: small\n---\nYou review code.\n")
	write(t, dir, "a-writer.md", "---\nname: writer\ndescription: Writes docs\ntools:\n  - Read\n  - Write\n---\n\nYou write docs.\nBriefly.\n")
	write(t, dir, "notes.txt", "not a definition")

	defs, err := Load(dir)

	require.NoError(t, err)
	require.Equal(t, []Def{
		{Name: "writer", Description: "Writes docs", Tools: []string{"Read", "Write"}, Prompt: "You write docs.\nBriefly."},
		{Name: "reviewer", Description: "Reviews code", Tools: []string{"Read", "Bash"}, DisallowedTools: []string{"Bash"}, Model: "small", Prompt: "You review code."},
	}, defs)
}

func TestBadDefinitionsKeepAnErrorTheModelCanRead(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "nofront.md", "just text")
	write(t, dir, "unclosed.md", "---\nname: x\n")
	write(t, dir, "typo.md", "---\nname: typo\ndescription: d\ntool: Read\n---\nbody\n")
	write(t, dir, "noname.md", "---\ndescription: d\n---\nbody\n")
	write(t, dir, "zz-twice.md", "---\nname: typo\ndescription: d\n---\nbody\n")

	defs, err := Load(dir)

	require.NoError(t, err)
	byName := map[string]Def{}
	for _, d := range defs {
		byName[d.Name] = d
	}
	require.Contains(t, byName["nofront"].Error, "no YAML front matter")
	require.Contains(t, byName["unclosed"].Error, "no closing line")
	require.Contains(t, byName["typo"].Error, "field tool not found")
	require.Contains(t, byName["noname"].Error, "name is missing")
	require.Contains(t, byName["typo@zz-twice.md"].Error, "defined twice")
}

func TestMissingFolderIsAnErrorAndNoFolderMeansNoSubagents(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent"))
	require.ErrorContains(t, err, "absent")
	defs, err := Load("")
	require.NoError(t, err)
	require.Empty(t, defs)
}
