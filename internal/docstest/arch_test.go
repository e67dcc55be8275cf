package docstest

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/tollgate/tollgate/"

// imports lists each package of the module (by its path inside it) and the
// module's packages it imports, as go list sees them, tests left out.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "../../...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		got[pkg] = []string{}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module) {
				got[pkg] = append(got[pkg], strings.TrimPrefix(imp, module))
			}
		}
		slices.Sort(got[pkg])
	}
	return got
}

// documented reads docs/architecture.md's table of packages and their
// imports: a row names one or more packages, and their imports, or (any).
func documented(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/architecture.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Packages and imports\n")
	require.True(t, ok, "docs/architecture.md has no section Packages and imports")
	doc := map[string][]string{}
	for _, cells := range TableRows(section) {
		if len(cells) != 3 { // | package | owns | imports |
			continue
		}
		pkgs, imps := CodeSpans(cells[0]), CodeSpans(cells[2])
		if len(pkgs) == 0 { // the header
			continue
		}
		any := cells[2] == "(any)"
		slices.Sort(imps)
		for _, p := range pkgs {
			if any {
				doc[p] = nil
			} else {
				doc[p] = append([]string{}, imps...)
			}
		}
	}
	return doc
}

// TestArchitectureDocMatchesTheImports keeps docs/architecture.md's table
// true: every package is in it, with exactly the module's packages it
// imports (test helpers excepted, which may import anything).
func TestArchitectureDocMatchesTheImports(t *testing.T) {
	got, doc := imports(t), documented(t)
	for pkg, imps := range got {
		want, ok := doc[pkg]
		require.True(t, ok, "docs/architecture.md's table has no row for %s", pkg)
		if want == nil {
			continue
		}
		require.Equal(t, want, imps, "%s's imports, as docs/architecture.md lists them and as go list sees them", pkg)
	}
	for pkg := range doc {
		_, ok := got[pkg]
		require.True(t, ok, "docs/architecture.md lists %s, which is not a package", pkg)
	}
}

// TestTheArrowsPointDown checks the rules docs/architecture.md states, so
// that a change that breaks one fails here even if it updates the table.
func TestTheArrowsPointDown(t *testing.T) {
	got := imports(t)
	above := []string{"workflows", "api", "worker", "cmd/tollgate", "cmd/scripted-model"}
	for pkg, imps := range got {
		if strings.HasPrefix(pkg, "internal/") {
			for _, imp := range imps {
				require.NotContains(t, above, imp, "%s imports %s: internal packages are leaves or below the workflows", pkg, imp)
			}
		}
	}
	require.Empty(t, got["protocol"], "protocol is a leaf")
	require.Subset(t, []string{"activities", "internal/agents", "internal/audit", "internal/policy", "internal/text", "internal/workflowtrace", "protocol", "workflows/contract"}, got["workflows"],
		"workflows imports no helper above it")
	require.Subset(t, []string{"protocol", "internal/text", "internal/audit", "internal/suggest"}, got["cmd/tollgate"],
		"the terminal client speaks the contract only, and reads the ledger's rows (GET /audit's body) for policy suggest")
	require.Subset(t, []string{"internal/audit", "internal/text"}, got["internal/suggest"], "suggestions are plain Go over the ledger's rows")
	require.Subset(t, []string{"protocol", "internal/text"}, got["internal/scripted"], "the scripted model server speaks the contract only")
	require.NotContains(t, got["api"], "activities", "the API shares the contract with the activities through protocol")
	require.Subset(t, []string{"protocol", "internal/text"}, got["workflows/contract"], "the workflows' contract is a leaf above protocol")
	require.NotContains(t, got["api"], "workflows", "the API speaks to the workflows through workflows/contract")

	// The workflows link no SQL driver: the ledger's rows are a leaf.
	out, err := exec.Command("go", "list", "-deps", "../../workflows").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.False(t, dep == "database/sql" || strings.HasPrefix(dep, "modernc.org/") || strings.HasPrefix(dep, "github.com/jackc/"), "workflows links %s", dep)
	}

	// The API links no CEL, MCP SDK or model client: what the workflows
	// run stays in the worker.
	out, err = exec.Command("go", "list", "-deps", "../../api").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/google/cel-go", "cel.dev/expr", "github.com/modelcontextprotocol/go-sdk", "github.com/sashabaranov/go-openai"} {
			require.False(t, strings.HasPrefix(dep, banned), "api links %s", dep)
		}
	}

	// What the terminal client and the contract link, all the way down.
	for _, pkg := range []string{"protocol", "cmd/tollgate"} {
		out, err := exec.Command("go", "list", "-deps", "../../"+pkg).CombinedOutput()
		require.NoError(t, err, "%s", out)
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{"go.temporal.io/", "google.golang.org/grpc", "github.com/google/cel-go", "go.opentelemetry.io/"} {
				require.False(t, strings.HasPrefix(dep, banned), "%s links %s", pkg, dep)
			}
		}
	}
}
