package activities

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/protocol"
)

// NormalizeArguments is the one view of a call's arguments that the
// approval policy, the approval request a person reads, a remembered
// decision and the tool itself all see. It takes the arguments as the model
// wrote them and gives them back as a compact JSON object, its keys in the
// model's order, or refuses them with an error the model can act on:
//
//   - not a JSON object;
//   - a key given twice, or two keys that differ only in case (encoding/json
//     would let the last one win, matching case-insensitively, while a
//     policy reads the exact key: {"command":"echo hi","Command":"rm -rf ."}
//     would show one command and run another);
//   - a key the tool's schema does not declare, where it declares its
//     properties and says "additionalProperties": false (tollgate's own
//     tools do; a client tool's schema without it takes other keys);
//   - a value of another JSON type than the schema's, or a required key
//     missing;
//   - a workspace path (spec.WorkspacePaths) that leaves the workspace.
//
// Workspace paths are cleaned and made relative to the workspace, whatever
// form the model sent (workspace lists the folder's spellings: as
// configured, and as resolved when that is reached through a link):
// "docs/../src/a.go" is "src/a.go" and "/ws/docs/a.md" is "docs/a.md", so a
// rule on args.file_path sees the file that will be touched. This is
// lexical: ResolveArguments follows the symbolic links of the workspace
// too.
//
// It is pure: the workflow calls it to vet a batch (its outcome is recorded
// in history), and the tool calls it again before it runs, so a call that a
// turn of an older release let through unvetted is refused there too.
func NormalizeArguments(spec protocol.ToolSpec, workspace []string, arguments string) (string, error) {
	return normalize(spec, workspace, arguments, nil)
}

// ResolveArguments is NormalizeArguments, and then every workspace path is
// the file the tool will really open: each symbolic link on the way is
// followed (chains of them, a dangling one to where it points, the folder
// of a file not yet written), so that `docs/src/main.go`, where docs/src
// links to ../src, is `src/main.go` to the policy, a grant, the preview,
// the ledger and the person who decides. A link that leads out of the
// workspace is refused, as a `..` is. It reads the file system (lstat and
// readlink, never an open, so a FIFO cannot block it) where the last of
// workspace, the folder as resolved, is.
//
// resolved lists the paths that links changed, by argument name: what a
// workflow records so that NormalizeArgumentsWith makes the same view
// again on replay without reading the file system.
//
// Where the workspace cannot be found (a worker without it), the view is
// NormalizeArguments' alone, and the tool, which looks again, refuses a
// path that leads through a link.
func ResolveArguments(spec protocol.ToolSpec, workspace []string, arguments string) (args string, resolved map[string]string, err error) {
	if len(workspace) == 0 || len(spec.WorkspacePaths) == 0 {
		args, err := NormalizeArguments(spec, workspace, arguments)
		return args, nil, err
	}
	real, err := filepath.EvalSymlinks(workspace[len(workspace)-1])
	if err != nil {
		args, err := NormalizeArguments(spec, workspace, arguments)
		return args, nil, err
	}
	args, err = normalize(spec, workspace, arguments, func(name, p string) (string, error) {
		r, err := realRelative(real, p)
		if err != nil {
			return "", err
		}
		if r != p {
			if resolved == nil {
				resolved = map[string]string{}
			}
			resolved[name] = r
		}
		return r, nil
	})
	if err != nil {
		return "", nil, err
	}
	return args, resolved, nil
}

// NormalizeArgumentsWith is NormalizeArguments with the workspace paths
// that ResolveArguments resolved earlier (resolved, by argument name) in
// place of the model's spelling: the view ResolveArguments gave, made
// again without reading the file system.
func NormalizeArgumentsWith(spec protocol.ToolSpec, workspace []string, arguments string, resolved map[string]string) (string, error) {
	if len(resolved) == 0 {
		return NormalizeArguments(spec, workspace, arguments)
	}
	return normalize(spec, workspace, arguments, func(name, p string) (string, error) {
		if r, ok := resolved[name]; ok {
			return r, nil
		}
		return p, nil
	})
}

// normalize is NormalizeArguments, each clean workspace path then given to
// resolve (named by its argument) when that is not nil.
func normalize(spec protocol.ToolSpec, workspace []string, arguments string, resolve func(name, path string) (string, error)) (string, error) {
	schema, err := parseSchema(spec.Parameters)
	if err != nil {
		return "", fmt.Errorf("the schema of %s cannot be read: %w", spec.Name, err)
	}
	if strings.TrimSpace(arguments) == "" {
		arguments = "{}"
	}
	values, names, err := objectMembers(arguments)
	if err != nil {
		return "", err
	}
	for name, v := range values {
		prop, known := schema.Properties[name]
		switch {
		case known:
			if err := checkKind(name, typeName(prop.Type), v); err != nil {
				return "", err
			}
		case len(schema.Properties) > 0 && !schema.open:
			return "", unknownArgument(spec.Name, name, schema)
		}
	}
	for _, name := range schema.Required {
		if _, ok := values[name]; !ok {
			return "", fmt.Errorf("%s is required", name)
		}
	}
	for _, name := range spec.WorkspacePaths {
		raw, ok := values[name]
		if !ok {
			continue
		}
		var p string
		if err := json.Unmarshal(raw, &p); err != nil {
			return "", fmt.Errorf("%s must be a string", name)
		}
		clean, err := workspacePath(workspace, p)
		if err != nil {
			return "", fmt.Errorf("%s %q %w", name, p, err)
		}
		if resolve != nil {
			if clean, err = resolve(name, clean); err != nil {
				return "", fmt.Errorf("%s %q %w", name, p, err)
			}
		}
		values[name], _ = json.Marshal(clean) // a string always marshals
	}
	// The keys stay in the order the model wrote them (a person reads
	// file_path before content); each value is compacted. A string is
	// compact already, and copied as it is: compacting scans it byte by
	// byte, which for a model's 4 MB of commands, vetted in workflow code,
	// was nearly half of the time normalizing took.
	var out bytes.Buffer
	out.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			out.WriteByte(',')
		}
		key, _ := json.Marshal(name) // a string always marshals
		out.Write(key)
		out.WriteByte(':')
		if v := values[name]; isString(v) {
			out.Write(v)
		} else if err := json.Compact(&out, v); err != nil {
			return "", fmt.Errorf("arguments cannot be written back: %w", err)
		}
	}
	out.WriteByte('}')
	return out.String(), nil
}

// isString reports whether v, one valid JSON value, is a string and
// nothing else: it begins and ends with a quote.
func isString(v json.RawMessage) bool {
	return len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"'
}

// errOutsideWorkspace ends the message of a path that leaves the workspace.
var errOutsideWorkspace = errors.New("is outside the workspace")

// workspacePath cleans p and makes it relative to the workspace, which
// roots spell; a path that leaves the workspace is refused.
func workspacePath(roots []string, p string) (string, error) {
	if p == "" {
		return "", errors.New("is empty")
	}
	if filepath.IsAbs(p) {
		rel, ok := "", false
		for _, root := range roots {
			r, err := filepath.Rel(filepath.Clean(root), filepath.Clean(p))
			if err == nil && r != ".." && !strings.HasPrefix(r, "../") {
				rel, ok = r, true
				break
			}
		}
		if !ok {
			return "", errOutsideWorkspace
		}
		p = rel
	}
	p = filepath.Clean(p)
	if p == ".." || strings.HasPrefix(p, "../") || filepath.IsAbs(p) {
		return "", errOutsideWorkspace
	}
	return filepath.ToSlash(p), nil
}

// objectMembers reads a JSON object's members by key, and its keys in
// order, refusing keys given twice, or twice but for case.
func objectMembers(arguments string) (map[string]json.RawMessage, []string, error) {
	dec := json.NewDecoder(strings.NewReader(arguments))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, fmt.Errorf("arguments are not valid JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fmt.Errorf("arguments must be a JSON object, not %s", jsonKindOfToken(tok))
	}
	values := map[string]json.RawMessage{}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("arguments are not valid JSON: %w", err)
		}
		name := tok.(string) // inside an object, a token before a value is its key
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, fmt.Errorf("arguments are not valid JSON: %w", err)
		}
		if _, dup := values[name]; dup {
			return nil, nil, fmt.Errorf("argument %q is given twice", name)
		}
		// EqualFold is the folding encoding/json matches keys with (so
		// "ſ" is "s", and the Kelvin sign "k"), not just upper and lower
		// case.
		if i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, name) }); i >= 0 {
			return nil, nil, fmt.Errorf("arguments %q and %q differ only in case: send one", names[i], name)
		}
		values[name] = v
		names = append(names, name)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, nil, fmt.Errorf("arguments are not valid JSON: %w", err)
	}
	switch _, err := dec.Token(); {
	case err == nil:
		return nil, nil, errors.New("arguments hold more than one JSON value: send one object")
	case err != io.EOF:
		return nil, nil, fmt.Errorf("arguments have text after the object: %w", err)
	}
	return values, names, nil
}

// schema is what NormalizeArguments reads of a tool's JSON schema.
type schema struct {
	Properties map[string]struct {
		// Type is a type's name, or a list of them (["string","null"]),
		// which is not checked here.
		Type json.RawMessage `json:"type"`
	} `json:"properties"`
	Required []string `json:"required"`
	// AdditionalProperties is false (no others), true or missing (others
	// allowed, as JSON Schema says), or a schema (others allowed, of that
	// shape: not checked here).
	AdditionalProperties json.RawMessage `json:"additionalProperties"`
	open                 bool
}

// typeName is the one JSON schema type a property's type names; "" when it
// names none or several.
func typeName(raw json.RawMessage) string {
	var name string
	if json.Unmarshal(raw, &name) != nil {
		return ""
	}
	return name
}

func parseSchema(raw json.RawMessage) (schema, error) {
	var s schema
	if len(bytes.TrimSpace(raw)) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, err
	}
	s.open = strings.TrimSpace(string(s.AdditionalProperties)) != "false"
	return s, nil
}

// unknownArgument says that name is not an argument of the tool, and which
// are.
func unknownArgument(tool, name string, s schema) error {
	var known []string
	for k := range s.Properties {
		known = append(known, k)
	}
	slices.Sort(known)
	for _, k := range known {
		if strings.EqualFold(k, name) {
			return fmt.Errorf("unknown argument %q (did you mean %q?); the arguments of %s are %s", name, k, tool, strings.Join(known, ", "))
		}
	}
	return fmt.Errorf("unknown argument %q; the arguments of %s are %s", name, tool, strings.Join(known, ", "))
}

// checkKind says what is wrong when v is not of the JSON schema type typ
// (one of string, integer, number, boolean, object, array; any other, or
// none, takes anything).
func checkKind(name, typ string, v json.RawMessage) error {
	got := jsonValueKind(v)
	switch {
	case typ == "" || typ == got:
	case typ == "integer" && got == "number" && !bytes.ContainsAny(v, ".eE"):
	case typ == "number" && got == "integer":
	case !slices.Contains([]string{"string", "integer", "number", "boolean", "object", "array"}, typ):
	default:
		return fmt.Errorf("%s must be %s, not %s", name, article(typ), article(got))
	}
	return nil
}

// jsonValueKind names the JSON type of a value: string, number, boolean,
// object, array or null.
func jsonValueKind(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0:
		return "null"
	case v[0] == '"':
		return "string"
	case v[0] == '{':
		return "object"
	case v[0] == '[':
		return "array"
	case v[0] == 't' || v[0] == 'f':
		return "boolean"
	case v[0] == 'n':
		return "null"
	default:
		return "number"
	}
}

func jsonKindOfToken(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	default:
		return "null"
	}
}

func article(kind string) string {
	switch kind {
	case "integer", "object", "array":
		return "an " + kind
	case "null":
		return "null"
	default:
		return "a " + kind
	}
}
