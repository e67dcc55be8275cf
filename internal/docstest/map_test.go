package docstest

import (
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// mapHeading is the README's section whose table maps the folders.
const mapHeading = "## Find your way around"

// mapped reads the folders the README's table names: the code spans of
// each row's first cell, each a folder ending in /.
func mapped(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n"+mapHeading+"\n")
	require.True(t, ok, "README.md has no heading %q", mapHeading)
	section, _, _ = strings.Cut(section, "\n## ")
	var folders []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
			require.True(t, strings.HasSuffix(m[1], "/"), "README's map: %s is not a folder (end it in /)", m[1])
			folders = append(folders, strings.TrimSuffix(m[1], "/"))
		}
	}
	return folders
}

// folders are what the map must name: every top-level folder but the
// hidden and the ignored ones, and every folder of internal/ and cmd/.
func folders(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{".", "internal", "cmd"} {
		entries, err := fs.ReadDir(fsys, dir)
		require.NoError(t, err)
		for _, e := range entries {
			p := path.Join(dir, e.Name())
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || slices.Contains(skipped, p) || p == "internal" || p == "cmd" {
				continue
			}
			out = append(out, p)
		}
	}
	return out
}

func TestTheREADMEMapsEveryFolderAndNoOther(t *testing.T) {
	fsys := os.DirFS(root)
	readme, err := fs.ReadFile(fsys, "README.md")
	require.NoError(t, err)
	named := mapped(t, string(readme))
	for _, f := range folders(t, fsys) {
		require.Contains(t, named, f, "README.md's table under %q has no row for %s/", mapHeading, f)
	}
	for _, f := range named {
		info, err := fs.Stat(fsys, f)
		require.NoError(t, err, "README.md's table under %q names %s/, which is not here", mapHeading, f)
		require.True(t, info.IsDir(), "%s is not a folder", f)
	}
}
