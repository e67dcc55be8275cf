package activities

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

// specOf is the spec of one of the built-in tools.
func specOf(t testing.TB, name string) protocol.ToolSpec {
	spec, ok := (&Tools{}).spec(name)
	require.True(t, ok, name)
	return spec
}

func TestArgumentsThatCouldShowOneCallAndRunAnotherAreRefused(t *testing.T) {
	roots := []string{"/srv/ws"}
	for _, tc := range []struct {
		name, tool, args, want string
	}{
		{"a case variant of the policy's key", protocol.ToolBash, `{"command":"echo hi","Command":"rm -f src/main.go && echo DELETED"}`,
			`arguments "command" and "Command" differ only in case`},
		{"a case variant of a path", protocol.ToolWrite, `{"file_path":"docs/a.md","FILE_PATH":"src/main.go","content":"x"}`,
			`arguments "file_path" and "FILE_PATH" differ only in case`},
		{"the same key twice", protocol.ToolBash, `{"command":"echo hi","command":"rm -rf ."}`, `argument "command" is given twice`},
		{"a key the schema does not know", protocol.ToolBash, `{"command":"ls","cwd":"/"}`, `unknown argument "cwd"; the arguments of Bash are`},
		{"a misspelt key", protocol.ToolWrite, `{"File_Path":"a.txt","content":"x"}`, `unknown argument "File_Path" (did you mean "file_path"?)`},
		{"an unknown key", protocol.ToolRead, `{"file_path":"a.txt","sudo":true}`, `unknown argument "sudo"; the arguments of Read are file_path, limit, offset`},
		{"a traversal", protocol.ToolWrite, `{"file_path":"docs/../../etc/passwd","content":"x"}`, `file_path "docs/../../etc/passwd" is outside the workspace`},
		{"an absolute path elsewhere", protocol.ToolRead, `{"file_path":"/etc/passwd"}`, `file_path "/etc/passwd" is outside the workspace`},
		{"a sibling that shares a prefix", protocol.ToolRead, `{"file_path":"/srv/ws-other/a"}`, `is outside the workspace`},
		{"not an object", protocol.ToolBash, `["ls"]`, `arguments must be a JSON object, not an array`},
		{"two values", protocol.ToolBash, `{"command":"ls"} {"command":"rm"}`, `more than one JSON value`},
		{"text after the object", protocol.ToolBash, `{"command":"ls"} rm -rf .`, `arguments have text after the object`},
		{"a wrong type", protocol.ToolBash, `{"command":["rm","-rf"]}`, `command must be a string, not an array`},
		{"a fraction for an integer", protocol.ToolBash, `{"command":"ls","timeout":1.5}`, `timeout must be an integer, not a number`},
		{"a required key missing", protocol.ToolWrite, `{"file_path":"a.txt"}`, `content is required`},
		{"an empty path", protocol.ToolRead, `{"file_path":""}`, `file_path "" is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NormalizeArguments(specOf(t, tc.tool), roots, tc.args)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestPathsAreGivenRelativeToTheWorkspaceWhateverFormTheModelSent(t *testing.T) {
	roots := []string{"/home/dev/ws", "/mnt/disk/ws"} // as configured, and as resolved
	for sent, want := range map[string]string{
		"docs/a.md":                 "docs/a.md",
		"./docs//a.md":              "docs/a.md",
		"docs/../src/main.go":       "src/main.go",
		"/home/dev/ws/docs/a.md":    "docs/a.md",
		"/mnt/disk/ws/docs/a.md":    "docs/a.md",
		"/home/dev/ws/../ws/notes/": "notes",
	} {
		got, err := NormalizeArguments(specOf(t, protocol.ToolWrite), roots, `{"content":"x","file_path":`+quote(sent)+`}`)
		require.NoError(t, err, sent)
		require.JSONEq(t, `{"content":"x","file_path":`+quote(want)+`}`, got, sent)
	}
}

// linkedRepo is docs/policy.md's repository with links inside it that
// lead out of docs/: docs/src -> ../src, docs/readme.md -> ../README.md, a
// chain docs/chain -> ../lib -> src, a dangling docs/new.md -> ../NEW.md,
// and docs/out, a link out of the workspace. It gives the workspace's
// roots, as configured (through a link of its own) and as resolved.
func linkedRepo(t *testing.T) (ws string, roots []string) {
	t.Helper()
	real, _ := newWorkspace(t)
	given := filepath.Join(t.TempDir(), "ws-link")
	require.NoError(t, os.Symlink(real, given))
	for _, dir := range []string{"docs", "src"} {
		require.NoError(t, os.Mkdir(filepath.Join(real, dir), 0o755))
	}
	writeFile(t, filepath.Join(real, "src", "main.go"), "package main\n")
	writeFile(t, filepath.Join(real, "README.md"), "# readme\n")
	for link, target := range map[string]string{
		"docs/src": "../src", "docs/readme.md": "../README.md", "lib": "src", "docs/chain": "../lib",
		"docs/new.md": "../NEW.md", "docs/out": t.TempDir(),
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(real, link)))
	}
	return real, WorkspaceRoots(given, real)
}

func TestResolvedArgumentsNameTheFileALinkInTheWorkspaceLeadsTo(t *testing.T) {
	ws, roots := linkedRepo(t)
	write := specOf(t, protocol.ToolWrite)
	for sent, want := range map[string]string{
		"docs/src/main.go":              "src/main.go",
		"docs/readme.md":                "README.md",
		"docs/chain/main.go":            "src/main.go",     // a chain of links
		"docs/src/new/deep.go":          "src/new/deep.go", // a file not yet written, in a linked folder
		"docs/new.md":                   "NEW.md",          // a dangling link: the file it would create
		roots[0] + "/docs/src/main.go":  "src/main.go",     // the workspace as configured
		ws + "/docs/readme.md":          "README.md",       // and as resolved
		"docs/plain.md":                 "docs/plain.md",   // no link: as it was
		"docs/../docs/src/../readme.md": "README.md",       // lexically docs/readme.md
		"lib":                           "src",
	} {
		args := `{"file_path":` + quote(sent) + `,"content":"x"}`
		got, resolved, err := ResolveArguments(write, roots, args)
		require.NoError(t, err, sent)
		require.Equal(t, `{"file_path":`+quote(want)+`,"content":"x"}`, got, sent)
		lexical, err := NormalizeArguments(write, roots, args)
		require.NoError(t, err)
		if lexical == got {
			require.Empty(t, resolved, sent)
		} else {
			require.Equal(t, map[string]string{"file_path": want}, resolved, sent)
		}
		again, err := NormalizeArgumentsWith(write, roots, args, resolved)
		require.NoError(t, err)
		require.Equal(t, got, again, "the recorded paths make the same view again: %s", sent)
	}
	for _, sent := range []string{"docs/out/x.md", "docs/out"} {
		_, _, err := ResolveArguments(write, roots, `{"file_path":`+quote(sent)+`,"content":"x"}`)
		require.ErrorContains(t, err, `file_path `+quote(sent)+` is outside the workspace: a symbolic link leads to`, "a link out is refused, as before")
	}
	require.NoError(t, os.Symlink("loop2", filepath.Join(ws, "loop1")))
	require.NoError(t, os.Symlink("loop1", filepath.Join(ws, "loop2")))
	_, _, err := ResolveArguments(write, roots, `{"file_path":"loop1/x","content":"x"}`)
	require.ErrorContains(t, err, `file_path "loop1/x" cannot be resolved`)
}

func TestNormalizedArgumentsAreCompactInTheModelsOrderAndKeepTheirValues(t *testing.T) {
	got, err := NormalizeArguments(specOf(t, protocol.ToolBash), nil, "{\n  \"timeout\": 120000,\n  \"command\": \"printf '%s\\\\n' \\\"a  b\\\"\", \"description\": \"print\"\n}")
	require.NoError(t, err)
	require.Equal(t, `{"timeout":120000,"command":"printf '%s\\n' \"a  b\"","description":"print"}`, got)
	again, err := NormalizeArguments(specOf(t, protocol.ToolBash), nil, got)
	require.NoError(t, err)
	require.Equal(t, got, again, "normalizing is idempotent")
}

// FuzzNormalizedValuesAreCompactedAsJSONCompactsThem checks that
// normalizing the arguments a schemaless tool takes writes each value back
// as json.Compact does, strings (which normalize copies as they are)
// included.
func FuzzNormalizedValuesAreCompactedAsJSONCompactsThem(f *testing.F) {
	for _, seed := range []string{
		"{\n  \"command\" :  \"printf '%s\\\\n' \\\"a  b\\\"\"  ,\t\"n\": [ 1, {\"x\" : \" y \"} ] }",
		`{"html":"<a href=\"x\">&amp;</a>","esc":"\u003c\u2028\ud83d\ude00\/","raw":"  é 	"}`,
		"{\"bad\":\"\xff\xfe\",\"empty\":\"\",\"null\":null,\"t\":true}",
		`{"s":" \" "  }`,
	} {
		f.Add(seed)
	}
	none := protocol.ToolSpec{Name: "Anything"}
	f.Fuzz(func(t *testing.T, arguments string) {
		norm, err := NormalizeArguments(none, nil, arguments)
		if err != nil || strings.TrimSpace(arguments) == "" {
			return
		}
		sent, names, err := objectMembers(arguments)
		require.NoError(t, err)
		written, again, err := objectMembers(norm)
		require.NoError(t, err)
		require.Equal(t, names, again)
		for _, name := range names {
			var want bytes.Buffer
			require.NoError(t, json.Compact(&want, sent[name]))
			require.Equal(t, want.String(), string(written[name]), name)
		}
	})
}

func TestASchemaThatAllowsOtherKeysTakesThemButNotTheirCaseVariants(t *testing.T) {
	open := protocol.ToolSpec{Name: "Pay", Parameters: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"}},"additionalProperties":true}`)}
	got, err := NormalizeArguments(open, nil, `{"amount":5,"memo":"rent"}`)
	require.NoError(t, err)
	require.Equal(t, `{"amount":5,"memo":"rent"}`, got)
	_, err = NormalizeArguments(open, nil, `{"amount":5,"Amount":500}`)
	require.ErrorContains(t, err, "differ only in case")
	_, err = NormalizeArguments(open, nil, `{"amount":5,"secret":1,"ſecret":2}`)
	require.ErrorContains(t, err, "differ only in case", "folded as encoding/json folds them")
	_, err = NormalizeArguments(open, nil, `{"amount":"5"}`)
	require.ErrorContains(t, err, "amount must be a number, not a string")
	unsaid := protocol.ToolSpec{Name: "Pay", Parameters: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"},"memo":{"type":["string","null"]}}}`)}
	got, err = NormalizeArguments(unsaid, nil, `{"amount":5,"memo":null,"note":"rent"}`)
	require.NoError(t, err, "without additionalProperties a schema takes other keys, and a list of types takes any of them")
	require.Equal(t, `{"amount":5,"memo":null,"note":"rent"}`, got)
	_, err = NormalizeArguments(unsaid, nil, `{"amount":"5"}`)
	require.ErrorContains(t, err, "amount must be a number, not a string")
	none := protocol.ToolSpec{Name: "Anything"}
	_, err = NormalizeArguments(none, nil, `{"x":1}`)
	require.NoError(t, err, "a tool without a schema takes any object")
}

func TestBashRunsNoCommandWhoseArgumentsCouldReadTwoWays(t *testing.T) {
	ws, _ := newWorkspace(t)
	tools := &Tools{Workspace: ws}
	out := callRaw(t, tools.Bash, `{"command":"echo hi","Command":"touch pwned"}`)
	requireToolError(t, out, `arguments "command" and "Command" differ only in case`)
	out = callRaw(t, tools.Write, `{"file_path":"docs/a.md","FILE_PATH":"src/main.go","content":"x"}`)
	requireToolError(t, out, "differ only in case")
	require.NoFileExists(t, filepath.Join(ws, "pwned"))
	require.NoFileExists(t, filepath.Join(ws, "src", "main.go"))
	require.NoFileExists(t, filepath.Join(ws, "docs", "a.md"))
	entries, err := os.ReadDir(ws)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// FuzzPolicyAndToolSeeTheSameCall checks, for any arguments a model may
// send, that what the policy reads (the normalized JSON as a map, with exact
// keys) is what the tool runs (the same JSON decoded into its arguments, as
// encoding/json does: case-insensitively, the last key winning), and that
// the tool, normalizing again, changes nothing.
func FuzzPolicyAndToolSeeTheSameCall(f *testing.F) {
	for _, seed := range []string{
		`{"command":"echo hi","Command":"rm -f src/main.go"}`,
		`{"file_path":"docs/a.md","FILE_PATH":"src/main.go","content":"x"}`,
		`{"file_path":"docs/../src/main.go","content":"x"}`,
		`{"file_path":"/ws/docs/a.md","content":"x"}`,
		`{"command":"ls","timeout":5}`,
		`{"command":"ls","description":"list"}`,
		`{"command":"a","command":"b"}`,
		`{"file_path":"a","content":"\u0000\ud800"}`,
		`{"ﬁle_path":"a","file_path":"b","content":"c"}`,
		`{"command":"a","\u212aey":1}`,
	} {
		f.Add(seed)
	}
	roots := []string{"/ws"}
	bash, write := specOf(f, protocol.ToolBash), specOf(f, protocol.ToolWrite)
	f.Fuzz(func(t *testing.T, arguments string) {
		if norm, err := NormalizeArguments(bash, roots, arguments); err == nil {
			var policy map[string]any
			require.NoError(t, json.Unmarshal([]byte(norm), &policy))
			var tool struct {
				Command *string `json:"command"`
			}
			require.NoError(t, decodeArgs(norm, &tool))
			require.NotNil(t, tool.Command)
			require.Equal(t, policy["command"], *tool.Command)
			again, err := NormalizeArguments(bash, roots, norm)
			require.NoError(t, err)
			require.Equal(t, norm, again)
		}
		if norm, err := NormalizeArguments(write, roots, arguments); err == nil {
			var policy map[string]any
			require.NoError(t, json.Unmarshal([]byte(norm), &policy))
			var tool struct {
				FilePath *string `json:"file_path"`
				Content  *string `json:"content"`
			}
			require.NoError(t, decodeArgs(norm, &tool))
			require.Equal(t, policy["file_path"], *tool.FilePath)
			require.Equal(t, policy["content"], *tool.Content)
			p := *tool.FilePath
			require.False(t, filepath.IsAbs(p) || p == ".." || len(p) > 2 && p[:3] == "../", "the path %q stays in the workspace", p)
			again, err := NormalizeArguments(write, roots, norm)
			require.NoError(t, err)
			require.Equal(t, norm, again)
		}
	})
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestResolvedArgumentsTakeAWorkspaceGivenOnlyByALinkOrNotFound(t *testing.T) {
	ws, roots := linkedRepo(t)
	write := specOf(t, protocol.ToolWrite)
	got, resolved, err := ResolveArguments(write, roots[:1], `{"file_path":"docs/readme.md","content":"x"}`)
	require.NoError(t, err, "the workspace spelled only as configured, through a link")
	require.Equal(t, `{"file_path":"README.md","content":"x"}`, got)
	require.Equal(t, map[string]string{"file_path": "README.md"}, resolved)

	require.NoError(t, os.RemoveAll(ws))
	got, resolved, err = ResolveArguments(write, roots, `{"file_path":"docs/readme.md","content":"x"}`)
	require.NoError(t, err, "a worker without the workspace gives the lexical view; the tool looks again")
	require.Equal(t, `{"file_path":"docs/readme.md","content":"x"}`, got)
	require.Empty(t, resolved)
}

func TestALinkMadeAfterThePolicyReadTheCallIsRefusedWhenItRuns(t *testing.T) {
	ws, roots := linkedRepo(t)
	tools := &Tools{Workspace: ws}
	writeFile(t, filepath.Join(ws, "docs", "notes.md"), "notes\n")
	// What the turn gives the policy and then the tool: docs/notes.md is
	// a file of its own.
	args, resolved, err := ResolveArguments(specOf(t, protocol.ToolWrite), roots, `{"file_path":"docs/notes.md","content":"pwned"}`)
	require.NoError(t, err)
	require.Empty(t, resolved)

	// Before the tool runs, it becomes a link to README.md.
	require.NoError(t, os.Remove(filepath.Join(ws, "docs", "notes.md")))
	require.NoError(t, os.Symlink("../README.md", filepath.Join(ws, "docs", "notes.md")))
	requireToolError(t, callRaw(t, tools.Write, args),
		`Write: file_path "docs/notes.md" leads through a symbolic link to "README.md", which is not the file this call was checked for`)
	require.Equal(t, "# readme\n", readFile(t, filepath.Join(ws, "README.md")))
}

// ResolveArguments runs in a workflow task (the turn's vetting
// SideEffect), which the SDK fails as deadlocked past a second, on every
// attempt: a model's long path must cost it little. A Write to 100 KB of
// a/a/a/… that does not exist took 8.6 s (each name walked up and joined
// again), and through a link that loops, forty times that.
func TestALongPathIsResolvedWellWithinAWorkflowTask(t *testing.T) {
	ws, roots := linkedRepo(t)
	require.NoError(t, os.Symlink("loop", filepath.Join(ws, "loop")))
	write := specOf(t, protocol.ToolWrite)
	deep := strings.Repeat("a/", 50_000) + "x"
	for _, p := range []string{deep, "docs/src/" + deep, "loop/" + deep} {
		args, _ := json.Marshal(map[string]string{"file_path": p, "content": "x"})
		// What the walk allocates stands for what it costs, without a
		// clock: the walk that took seconds joined the path again for
		// every name, gigabytes for this one; what is left is linear, a walk per
		// link followed.
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, _, err := ResolveArguments(write, roots, string(args))
		runtime.ReadMemStats(&after)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1000*len(p)), "bytes allocated resolving %.20s…", p)
		if strings.HasPrefix(p, "loop/") {
			require.ErrorContains(t, err, "too many levels of symbolic links")
			continue
		}
		require.NoError(t, err)
		require.Contains(t, got, `"file_path":"`)
	}
}
