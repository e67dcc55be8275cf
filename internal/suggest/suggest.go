// Package suggest proposes policy rules and grants from the audit ledger's
// rows: patterns of calls that people approved many times the same way and
// never declined, each with the rule (or grant scope) that would have
// answered them. A suggestion is text for a person to review; nothing here
// applies one. It is plain Go over audit.Record, so the terminal client,
// which links no CEL, can run it on what GET /audit gives it.
package suggest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/text"
)

// DefaultMin is how many approvals a pattern needs when Options says none.
const DefaultMin = 10

// Options tune Suggest.
type Options struct {
	// Min is the approvals a pattern needs to be suggested: DefaultMin when
	// 0.
	Min int
}

// Suggestion is a pattern of calls that people approved Approvals times,
// with no decline and no edit, and what would answer them without asking.
type Suggestion struct {
	Tool string
	// Pattern says in words what the calls share: `command "go test ./..."`,
	// `command starting "go test"`, `file_path under "docs/"`.
	Pattern string
	// Approvals counts the approvals (a person's, or a grant's), Distinct
	// the different commands, files or arguments among them (1 for an
	// exact pattern),
	// Conversations where they were made, and Principals who made them.
	Approvals, Distinct, Conversations int
	Principals                         []string
	// Last is when the last of them was asked.
	Last time.Time
	// Match is the CEL expression that holds for exactly the pattern's
	// calls; When the rule's when that would have let them through (the
	// live rule the rows were asked under, with the pattern taken out).
	Match, When string
	// LiveRule is what the rows were last asked under (their asked
	// column).
	LiveRule string
	// SimilarDecline is the last call like these (the same tool, and for a
	// command the same first word) that a person declined or edited, if
	// any: why the pattern may be narrower than it looks.
	SimilarDecline *audit.Record
	// Similar says which calls SimilarDecline was looked for among.
	Similar string
}

// call is what Suggest reads of a row.
type call struct {
	row  *audit.Record
	args map[string]any
	// approved is true for an approval without edits; otherwise the person
	// (or a grant) declined or changed it.
	approved bool
	// exact is the match of the call's narrowest pattern: the command, the
	// file, the arguments.
	exact string
}

// group is the calls of one pattern.
type group struct {
	tool, pattern, match, similar string
	// broad is true of a prefix's or a folder's group, which is worth
	// suggesting only when it holds more than one distinct call.
	broad bool
	// family finds the calls whose declines are similar.
	family func(c call) bool
	calls  []call
}

// shellSyntax is what a command prefix must not be followed by for a rule
// on the prefix to be safe: anything that runs another command, redirects
// or expands (`go test ./... && rm -rf ~`), as an RE2 class in a CEL raw
// string.
const shellSyntax = "r\"[;&|<>$`\\\\\\n(){}]\""

// Suggest groups the decided rows by tool and pattern (a command, and its
// first two words; a file's path, and its first folder; any other tool's
// arguments whole), and returns the patterns that people approved at least
// o.Min times and never declined or edited, most approved first. Rows no
// person decided (a timer's, the turn's, the sandbox's, the policy's) are
// not counted.
func Suggest(rows []audit.Record, o Options) []Suggestion {
	minimum := cmp.Or(o.Min, DefaultMin)
	var calls []call
	for i := range rows {
		r := &rows[i]
		if r.DecidedBy != "person" && r.DecidedBy != "grant" {
			continue
		}
		var args map[string]any
		if json.Unmarshal([]byte(r.Arguments), &args) != nil {
			continue
		}
		calls = append(calls, call{row: r, args: args, approved: r.Decision == "approve" && r.EditedArguments == ""})
	}
	groups := map[string]*group{}
	var order []string
	add := func(c call, g group) {
		key := g.tool + "\x00" + g.match
		if groups[key] == nil {
			groups[key] = &g
			order = append(order, key)
		}
		groups[key].calls = append(groups[key].calls, c)
	}
	for _, c := range calls {
		gs := patterns(c)
		if len(gs) > 0 {
			c.exact = gs[0].match
		}
		for _, g := range gs {
			add(c, g)
		}
	}
	var out []Suggestion
	for _, key := range order {
		g := groups[key]
		s, ok := g.suggestion(calls, minimum)
		if ok {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b Suggestion) int {
		return cmp.Or(b.Approvals-a.Approvals, strings.Compare(a.Tool, b.Tool), strings.Compare(a.Pattern, b.Pattern))
	})
	return out
}

// patterns are the groups call c is in.
func patterns(c call) []group {
	tool := c.row.Tool
	sameTool := func(o call) bool { return o.row.Tool == tool }
	if cmd, ok := c.args["command"].(string); ok {
		first, _, _ := strings.Cut(strings.TrimSpace(cmd), " ")
		family := func(o call) bool {
			other, _ := o.args["command"].(string)
			f, _, _ := strings.Cut(strings.TrimSpace(other), " ")
			return o.row.Tool == tool && f == first
		}
		similar := fmt.Sprintf("%s commands that start with %q", tool, first)
		gs := []group{{tool: tool, pattern: "command " + strconv.Quote(cmd), match: "args.command == " + strconv.Quote(cmd), similar: similar, family: family}}
		if words := strings.Fields(cmd); len(words) >= 2 && !strings.ContainsAny(words[0]+words[1], ";&|<>$`\\(){}") {
			prefix := words[0] + " " + words[1]
			match := fmt.Sprintf("(args.command == %s || args.command.startsWith(%s)) && !args.command.matches(%s)",
				strconv.Quote(prefix), strconv.Quote(prefix+" "), shellSyntax)
			gs = append(gs, group{tool: tool, pattern: fmt.Sprintf("command starting %q, without shell syntax", prefix), match: match, similar: similar, family: family, broad: true})
		}
		return gs
	}
	if p, ok := c.args["file_path"].(string); ok {
		similar := tool + " calls of any file"
		gs := []group{{tool: tool, pattern: "file_path " + strconv.Quote(p), match: "args.file_path == " + strconv.Quote(p), similar: similar, family: sameTool}}
		if dir, _, ok := strings.Cut(path.Clean(p), "/"); ok && dir != ".." && dir != "" {
			gs = append(gs, group{tool: tool, pattern: fmt.Sprintf("file_path under %q", dir+"/"), match: fmt.Sprintf("args.file_path.startsWith(%s)", strconv.Quote(dir+"/")),
				similar: similar, family: sameTool, broad: true})
		}
		return gs
	}
	if match, ok := exactMatch(c.args); ok {
		b, _ := json.Marshal(c.args)
		return []group{{tool: tool, pattern: "arguments " + string(b), match: match, similar: tool + " calls", family: sameTool}}
	}
	return nil
}

// exactMatch is a CEL expression that holds for arguments exactly args,
// when every value is a string or a bool (numbers compare by type in CEL,
// and JSON says none).
func exactMatch(args map[string]any) (string, bool) {
	keys := slices.Sorted(maps.Keys(args))
	parts := []string{"size(args) == " + strconv.Itoa(len(keys))}
	for _, k := range keys {
		switch v := args[k].(type) {
		case string:
			parts = append(parts, fmt.Sprintf("args[%s] == %s", strconv.Quote(k), strconv.Quote(v)))
		case bool:
			parts = append(parts, fmt.Sprintf("args[%s] == %t", strconv.Quote(k), v))
		default:
			return "", false
		}
	}
	return strings.Join(parts, " && "), true
}

// suggestion is g's suggestion, when people approved it at least minimum
// times and never declined or edited it.
func (g *group) suggestion(all []call, minimum int) (Suggestion, bool) {
	s := Suggestion{Tool: g.tool, Pattern: g.pattern, Match: g.match, Similar: g.similar}
	distinct, convs, principals := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var latest, asked *audit.Record
	for _, c := range g.calls {
		if !c.approved {
			return Suggestion{}, false
		}
		s.Approvals++
		distinct[c.exact] = true
		convs[c.row.ConversationID] = true
		if c.row.Principal != "" {
			principals[c.row.Principal] = true
		}
		if latest == nil || c.row.RequestedAt.After(latest.RequestedAt) {
			latest = c.row
		}
		// The rule the calls were asked under, not a failure of it.
		if (strings.HasPrefix(c.row.Asked, "rule ") || strings.HasPrefix(c.row.Asked, "default: ")) &&
			(asked == nil || c.row.RequestedAt.After(asked.RequestedAt)) {
			asked = c.row
		}
	}
	if s.Approvals < minimum || (g.broad && len(distinct) == 1) {
		return Suggestion{}, false
	}
	s.Distinct, s.Conversations, s.Principals = len(distinct), len(convs), slices.Sorted(maps.Keys(principals))
	s.Last = latest.RequestedAt
	if asked != nil {
		s.LiveRule = asked.Asked
	}
	s.When = "!(" + s.Match + ")"
	if _, expr, ok := strings.Cut(s.LiveRule, ": when "); ok && strings.HasPrefix(s.LiveRule, "rule ") {
		s.When = "(" + expr + ") && " + s.When
	}
	for _, c := range all {
		if !c.approved && g.family(c) && (s.SimilarDecline == nil || c.row.RequestedAt.After(s.SimilarDecline.RequestedAt)) {
			s.SimilarDecline = c.row
		}
	}
	return s, true
}

// Write writes s for a person to review: the pattern and its counts, the
// last similar decline, the rule to ship in shadow first, and the grant
// that would answer the same calls in one conversation.
func (s Suggestion) Write(w io.Writer) {
	fmt.Fprintf(w, "%s %s\n", s.Tool, s.Pattern)
	who := "no named principal"
	if len(s.Principals) > 0 {
		who = "by " + strings.Join(s.Principals, ", ")
	}
	fmt.Fprintf(w, "  approved %d %s (%s; %d distinct, %d %s), never declined or edited; last asked %s\n",
		s.Approvals, text.Plural(s.Approvals, "time"), who, s.Distinct,
		s.Conversations, text.Plural(s.Conversations, "conversation"), s.Last.UTC().Format(time.RFC3339))
	if s.LiveRule != "" {
		fmt.Fprintf(w, "  asked under: %s\n", s.LiveRule)
	}
	if d := s.SimilarDecline; d != nil {
		what := "declined"
		if d.Decision == "approve" {
			what = "approved with an edit"
		}
		fmt.Fprintf(w, "  last similar call a person %s (%s): %s %s at %s", what, s.Similar, d.Tool, d.Arguments, d.RequestedAt.UTC().Format(time.RFC3339))
		if d.Principal != "" {
			fmt.Fprintf(w, " by %s", d.Principal)
		}
		if d.Reason != "" {
			fmt.Fprintf(w, ": %q", d.Reason)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "  no similar call declined or edited (%s)\n", s.Similar)
	}
	fmt.Fprintf(w, "  rule, to ship as a shadow rule first (docs/policy.md, Shadow rules), then promote:\n")
	fmt.Fprintf(w, "    tools:\n      %s:\n        shadow:\n          when: %s\n", s.Tool, yamlQuote(s.When))
	fmt.Fprintf(w, "  or a grant, for one conversation: approve the next such call with\n")
	var scope strings.Builder
	enc := json.NewEncoder(&scope)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s.Match) // a string always encodes
	fmt.Fprintf(w, "    {\"remember\": \"conversation\", \"rememberWhen\": %s}\n", strings.TrimSpace(scope.String()))
}

// yamlQuote writes s as a YAML single-quoted scalar.
func yamlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
