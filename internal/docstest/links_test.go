// Package docstest holds the tests that keep the repository's Markdown
// honest: every relative link leads to a file and every #anchor to a
// heading of it, and no document points outside the repository.
package docstest

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// root is the module's root, from this package's folder.
const root = "../.."

// skipped are the folders of the root that hold no document of ours and
// that git ignores: what make builds (npm packages among it) and the
// agent's workspace. Hidden folders (.git, .tollgate, .ci) are skipped too.
var skipped = []string{"bin", "workspace"}

// markdownFiles lists the repository's .md files, as slash paths from
// fsys's root.
func markdownFiles(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	var files []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && (strings.HasPrefix(d.Name(), ".") || slices.Contains(skipped, p) || d.Name() == "node_modules") {
			return fs.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

var (
	fence      = regexp.MustCompile("(?ms)^ {0,3}(```|~~~).*?^ {0,3}```[ \t]*$")
	codeSpan   = regexp.MustCompile("``[^`]+``|`[^`\n]+(?:\n[^`\n]+)*`")
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	heading    = regexp.MustCompile(`(?m)^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose is a document without its code blocks and code spans, where
// neither links nor headings are.
func prose(doc string) string {
	doc = fence.ReplaceAllString(doc, "")
	return codeSpan.ReplaceAllString(doc, "code")
}

// links lists the destinations of a document's links, inline and by
// reference.
func links(doc string) []string {
	text := prose(doc)
	var out []string
	for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
		out = append(out, m[2])
	}
	for _, m := range refLink.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// anchor is GitHub's id for a heading: its text as rendered (code spans'
// backticks dropped, a link's text kept), lowercased, with spaces made
// hyphens and every other character that is not a letter, a digit, - or _
// dropped.
func anchor(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors is the set of ids a document's headings get, with GitHub's -1,
// -2 … for a heading's text repeated, and those of its HTML anchors.
func anchors(doc string) map[string]bool {
	doc = fence.ReplaceAllString(doc, "")
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(doc, -1) {
		id := anchor(m[2])
		if n := seen[id]; n > 0 {
			seen[id]++
			id = fmt.Sprintf("%s-%d", id, n)
		} else {
			seen[id] = 1
		}
		out[id] = true
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(doc, -1) {
		out[m[1]] = true
	}
	return out
}

// brokenLinks checks every relative link of the documents at paths in
// fsys: its file must exist, and its #anchor must be a heading of that
// file (of the document itself, for a bare #anchor). It returns one line
// a broken link.
func brokenLinks(fsys fs.FS, paths []string) ([]string, error) {
	var broken []string
	for _, p := range paths {
		doc, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		for _, dest := range links(string(doc)) {
			if dest == "" || scheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
				continue
			}
			file, frag, _ := strings.Cut(dest, "#")
			target := p
			switch {
			case strings.HasPrefix(file, "/"):
				target = path.Clean(strings.TrimPrefix(file, "/"))
			case file != "":
				target = path.Join(path.Dir(p), file)
			}
			if !fs.ValidPath(target) {
				broken = append(broken, fmt.Sprintf("%s: %s leaves the repository", p, dest))
				continue
			}
			if _, err := fs.Stat(fsys, target); err != nil {
				broken = append(broken, fmt.Sprintf("%s: %s: no file %s", p, dest, target))
				continue
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				broken = append(broken, fmt.Sprintf("%s: %s: an anchor into %s, which has no headings", p, dest, target))
				continue
			}
			linked, err := fs.ReadFile(fsys, target)
			if err != nil {
				return nil, err
			}
			if !anchors(string(linked))[frag] {
				broken = append(broken, fmt.Sprintf("%s: %s: %s has no heading #%s", p, dest, target, frag))
			}
		}
	}
	return broken, nil
}

// outside are what a document of this repository must not refer to: the
// documents it was written from, which are not in it.
var outside = []string{"../shared", "design.md"}

// outsideReferences lists, for the documents at paths, each one's mention
// of a document outside the repository.
func outsideReferences(fsys fs.FS, paths []string) ([]string, error) {
	var found []string
	for _, p := range paths {
		doc, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		for i, line := range strings.Split(string(doc), "\n") {
			for _, o := range outside {
				if strings.Contains(line, o) {
					found = append(found, fmt.Sprintf("%s:%d: refers to %s, which is not in the repository", p, i+1, o))
				}
			}
		}
	}
	return found, nil
}

func TestEveryRelativeLinkOfTheDocsLeadsToAFileAndItsHeading(t *testing.T) {
	fsys := os.DirFS(root)
	files := markdownFiles(t, fsys)
	for _, want := range []string{"README.md", "CHANGELOG.md", "docs/protocol.md", "docs/versioning.md"} {
		require.Contains(t, files, want)
	}
	broken, err := brokenLinks(fsys, files)
	require.NoError(t, err)
	require.Empty(t, broken, "links that lead nowhere:\n%s", strings.Join(broken, "\n"))
}

func TestNoDocumentRefersToOneOutsideTheRepository(t *testing.T) {
	fsys := os.DirFS(root)
	found, err := outsideReferences(fsys, markdownFiles(t, fsys))
	require.NoError(t, err)
	require.Empty(t, found, "\n%s", strings.Join(found, "\n"))
}
