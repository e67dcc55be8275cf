package docstest

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// TestTheChecksFindWhatIsBroken proves the checks can fail: on a small
// tree, each broken link and outside reference is reported, and nothing
// else.
func TestTheChecksFindWhatIsBroken(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md": {Data: []byte("# tollgate\n\n" +
			"[ok](docs/a.md), [ok](docs/a.md#the-gate-and-its-timers), [ok](#tollgate), [ok](https://temporal.io#x)\n" +
			"[ok](docs/a.md#choices-1) [ok](docs/a.md#get-chatturnsturnidevents) [ok](api/)\n" +
			"[gone](docs/b.md) [no heading](docs/a.md#security) [no heading here](#five-minutes)\n" +
			"`[in code](docs/nothing.md)`\n\n```md\n[in a block](docs/nothing.md)\n```\n\n" +
			"[ref]: docs/missing.md\n")},
		"docs/a.md": {Data: []byte("# A\n\n## The gate, and its timers\n\n## Choices\n\n## Choices\n\n" +
			"### `GET /chat/turns/:turnId/events`\n\n```sh\n# not a heading\n```\n\n" +
			"[up](../README.md#tollgate) [out](../../shared/design.md) [not a heading](#not-a-heading)\n")},
		"api/main.go": {Data: []byte("package main\n")},
	}
	broken, err := brokenLinks(fsys, []string{"README.md", "docs/a.md"})
	require.NoError(t, err)
	require.Equal(t, []string{
		"README.md: docs/b.md: no file docs/b.md",
		"README.md: docs/a.md#security: docs/a.md has no heading #security",
		"README.md: #five-minutes: README.md has no heading #five-minutes",
		"README.md: docs/missing.md: no file docs/missing.md",
		"docs/a.md: ../../shared/design.md leaves the repository",
		"docs/a.md: #not-a-heading: docs/a.md has no heading #not-a-heading",
	}, broken)

	found, err := outsideReferences(fsys, []string{"README.md", "docs/a.md"})
	require.NoError(t, err)
	require.Equal(t, []string{
		"docs/a.md:15: refers to ../shared, which is not in the repository",
		"docs/a.md:15: refers to design.md, which is not in the repository",
	}, found)
}
