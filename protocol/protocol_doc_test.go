package protocol

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/docstest"
)

// protocolDoc is the wire protocol's reference, which these tests hold to
// the workflows' events and decisions.
const protocolDoc = "../docs/protocol.md"

// protocolConstants returns the string constants of this package whose
// names are prefix and a capitalized word (EventToken, not EventsQuery),
// read from its source, so that a constant added anywhere in the package
// is found: name to value.
func protocolConstants(t *testing.T, prefix string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string]string{}
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					rest, ok := strings.CutPrefix(name.Name, prefix)
					if !ok || rest == "" || !unicode.IsUpper(rune(rest[0])) || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					out[name.Name] = v
				}
			}
		}
	}
	require.NotEmpty(t, out, "no %s constants", prefix)
	return out
}

func TestProtocolDocGivesEveryEventTypeASubsection(t *testing.T) {
	doc := readProtocolDoc(t)
	events := docSection(t, doc, "## The event stream")
	var headings []string
	for _, l := range strings.Split(events, "\n") {
		if strings.HasPrefix(l, "#### ") {
			headings = append(headings, l)
		}
	}
	types := protocolConstants(t, "Event")
	require.Contains(t, types, "EventContextCompacted", "the constants are read from every file")
	for name, v := range types {
		require.True(t, slices.ContainsFunc(headings, func(h string) bool { return strings.Contains(h, "`"+v) }),
			"%s (%q) has no subsection (a #### heading naming `%s`) under The event stream in %s", name, v, v, protocolDoc)
	}
}

func TestProtocolDocNamesEveryDecisionRejectionAndFinishReason(t *testing.T) {
	doc := readProtocolDoc(t)
	for _, tc := range []struct{ prefix, heading string }{
		{"Decision", "#### `approval_decision`"},
		{"Reject", "### Results and rejection reasons"},
		{"Finish", "#### `finish`"},
	} {
		keys := docstest.TableKeys(docSection(t, doc, tc.heading))
		for name, v := range protocolConstants(t, tc.prefix) {
			require.Contains(t, keys, v, "%s (%q) is not in the table under %q of %s", name, v, tc.heading, protocolDoc)
		}
	}
	statuses := docstest.TableRows(docSection(t, doc, "### Event fields"))
	i := slices.IndexFunc(statuses, func(cells []string) bool { return slices.Contains(docstest.CodeSpans(cells[0]), "status") })
	require.GreaterOrEqual(t, i, 0, "the tool result's status has a row")
	for _, s := range []string{StatusOK, StatusError, StatusDeclined, StatusTimeout} {
		require.Contains(t, docstest.CodeSpans(statuses[i][len(statuses[i])-1]), s, "the tool result status %q is explained", s)
	}
}

func TestProtocolDocNamesEveryFieldOfAnEventAndNoOther(t *testing.T) {
	keys := docstest.TableKeys(docSection(t, readProtocolDoc(t), "### Event fields"))
	var fields []string
	for _, typ := range []reflect.Type{reflect.TypeFor[Event](), reflect.TypeFor[ToolResult](), reflect.TypeFor[ToolCall]()} {
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			require.NotEmpty(t, name, "%s.%s has a JSON name", typ, typ.Field(i).Name)
			require.Contains(t, keys, name, "%s's field %q is not in the tables under Event fields in %s", typ, name, protocolDoc)
			fields = append(fields, name)
		}
	}
	for _, k := range keys {
		require.Contains(t, fields, k, "the tables under Event fields name %q, which no event has", k)
	}
}

// TestProtocolDocStreamExamplesAreEventsAsTheAPISendsThem reads every
// "data:" line of the reference as the event it shows: JSON with no field
// an Event lacks, a type the workflows publish, and the seq of the "id:"
// line before it (none for the keep-alive and the API's own error). Every
// event type is shown at least once.
func TestProtocolDocStreamExamplesAreEventsAsTheAPISendsThem(t *testing.T) {
	types := protocolConstants(t, "Event")
	known := map[string]bool{}
	for name, v := range types {
		if name != "EventSubagentPrefix" {
			known[v] = true
		}
	}
	shown := map[string]bool{}
	lines := strings.Split(readProtocolDoc(t), "\n")
	for i, l := range lines {
		data, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(data))
		dec.DisallowUnknownFields()
		var e Event
		require.NoError(t, dec.Decode(&e), "line %d: %s", i+1, l)
		base, sub := strings.CutPrefix(e.Type, EventSubagentPrefix)
		require.True(t, known[e.Type] || (sub && known[base]), "line %d: type %q is not one the workflows publish", i+1, e.Type)
		if sub {
			require.NotEmpty(t, e.Name, "line %d: a subagent's event has its name", i+1)
		}
		want := 0
		if id, ok := strings.CutPrefix(lines[max(i-1, 0)], "id: "); ok {
			n, err := strconv.Atoi(id)
			require.NoError(t, err, "line %d", i)
			want = n
		}
		require.Equal(t, want, e.Seq, "line %d: seq is the id line's (0 without one)", i+1)
		shown[e.Type] = true
	}
	for name, v := range types {
		if name != "EventSubagentPrefix" {
			require.True(t, shown[v], "no example in %s shows a %s event", protocolDoc, v)
		}
	}
}

func readProtocolDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(protocolDoc)
	require.NoError(t, err)
	return string(b)
}

// docSection returns the text under heading (a whole line, "## Name") up
// to the next heading of the same or a higher level.
func docSection(t *testing.T, doc, heading string) string {
	t.Helper()
	level := strings.Index(heading, " ")
	lines := strings.Split(doc, "\n")
	start := slices.Index(lines, heading)
	require.GreaterOrEqual(t, start, 0, "%s has no heading %q", protocolDoc, heading)
	var out []string
	fenced := false
	for _, l := range lines[start+1:] {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if n := strings.Index(l, " "); !fenced && strings.HasPrefix(l, "#") && n > 0 && n <= level {
			break
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
