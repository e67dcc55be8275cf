package activities

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/activity"
)

// Tool names. Each is both the name the model calls the tool by and the name
// of the Temporal activity that runs it.
const (
	// ToolRead reads a file of the workspace.
	ToolRead = "Read"
	// ToolWrite writes a file of the workspace.
	ToolWrite = "Write"
	// ToolEdit replaces text in a file of the workspace.
	ToolEdit = "Edit"
	// ToolBash runs a shell command in the workspace.
	ToolBash = "Bash"
)

// Defaults of the Tools limits.
const (
	// DefaultBashTimeout is how long a Bash command may run when
	// Tools.BashTimeout is not set.
	DefaultBashTimeout = 2 * time.Minute
	// DefaultOutputCap is how many bytes of output Read and Bash return when
	// Tools.OutputCap is not set.
	DefaultOutputCap = 30000
)

const (
	// heartbeatEvery is how often a running Bash command heartbeats when the
	// activity has no heartbeat timeout; heartbeats are also how an activity
	// learns that it was cancelled.
	heartbeatEvery = 5 * time.Second
	// pipeGrace is how long Bash waits, after bash itself exited, for
	// processes it left in the background to close its output.
	pipeGrace = time.Second
)

// Tools are the file and shell tools, confined to one workspace folder. The
// zero values of the limits mean their defaults.
type Tools struct {
	// Workspace is the folder the tools work in. A path outside it is an
	// error answered to the model, never a file touched.
	Workspace string
	// BashTimeout is how long a Bash command runs by default, and the most a
	// call may ask for.
	BashTimeout time.Duration
	// OutputCap is how many bytes of output Read and Bash return at most.
	OutputCap int
}

// Activities returns the tool activities by their names, for registration
// with a worker:
//
//	for name, fn := range tools.Activities() {
//		w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
//	}
//
// It is a map because registration does not care about order; Specs lists
// the tools in a stable order for the model.
func (t *Tools) Activities() map[string]any {
	return map[string]any{
		ToolRead:  t.Read,
		ToolWrite: t.Write,
		ToolEdit:  t.Edit,
		ToolBash:  t.Bash,
	}
}

// Specs describes the tools to the model. The argument names are those of
// Claude Code's tools, which models already know.
func (t *Tools) Specs() []ToolSpec {
	return []ToolSpec{
		{
			Name: ToolRead,
			Description: fmt.Sprintf("Reads a text file in the workspace. Lines are numbered from 1, as cat -n prints them. "+
				"Use offset and limit to read part of a long file; output beyond %d bytes is cut.", t.outputCap()),
			Parameters: objectSchema([]string{"file_path"}, map[string]property{
				"file_path": {Type: "string", Description: "Path of the file, relative to the workspace or absolute inside it."},
				"offset":    {Type: "integer", Description: "Line number to start reading at, from 1.", Minimum: 1},
				"limit":     {Type: "integer", Description: "Number of lines to read.", Minimum: 1},
			}),
			WorkspacePaths: []string{"file_path"},
			Annotations:    &ToolAnnotations{ReadOnly: true},
		},
		{
			Name:        ToolWrite,
			Description: "Writes a file in the workspace, replacing it if it exists and creating missing parent folders.",
			Parameters: objectSchema([]string{"file_path", "content"}, map[string]property{
				"file_path": {Type: "string", Description: "Path of the file, relative to the workspace or absolute inside it."},
				"content":   {Type: "string", Description: "The complete new content of the file."},
			}),
			WorkspacePaths: []string{"file_path"},
			Annotations:    &ToolAnnotations{Destructive: true, Idempotent: true},
		},
		{
			Name: ToolEdit,
			Description: "Replaces text in a file in the workspace. old_string must occur exactly once unless replace_all is true; " +
				"include enough surrounding text to make it unique. Copy it from the file exactly, without Read's line numbers.",
			Parameters: objectSchema([]string{"file_path", "old_string", "new_string"}, map[string]property{
				"file_path":   {Type: "string", Description: "Path of the file, relative to the workspace or absolute inside it."},
				"old_string":  {Type: "string", Description: "The text to replace."},
				"new_string":  {Type: "string", Description: "The text to put in its place."},
				"replace_all": {Type: "boolean", Description: "Replace every occurrence of old_string instead of exactly one."},
			}),
			WorkspacePaths: []string{"file_path"},
			Annotations:    &ToolAnnotations{Destructive: true},
		},
		{
			Name: ToolBash,
			Description: fmt.Sprintf("Runs a command with bash -c in the workspace folder and returns its combined stdout and stderr "+
				"(at most %d bytes) and its exit code when that is not 0.", t.outputCap()),
			Parameters: objectSchema([]string{"command"}, map[string]property{
				"command": {Type: "string", Description: "The command to run."},
				"timeout": {Type: "integer", Description: fmt.Sprintf("Milliseconds after which the command is killed; "+
					"the default and maximum is %d.", t.bashTimeout().Milliseconds()), Minimum: 1},
				"description": {Type: "string", Description: "What the command does, in a few words, for the person who approves it."},
			}),
			Annotations: &ToolAnnotations{Destructive: true, OpenWorld: true},
		},
	}
}

// Read answers the numbered lines of a file, from line offset on, at most
// limit lines and at most OutputCap bytes.
func (t *Tools) Read(ctx context.Context, in ToolInput) (ToolOutput, error) {
	return t.run(ctx, ToolRead, in, func(ws *workspace, in ToolInput) (string, error) {
		var args struct {
			FilePath *string `json:"file_path"`
			Offset   *int    `json:"offset"`
			Limit    *int    `json:"limit"`
		}
		if err := decodeArgs(in.Call.Arguments, &args); err != nil {
			return "", err
		}
		if args.FilePath == nil {
			return "", missing("file_path")
		}
		offset, limit := 1, -1
		if args.Offset != nil {
			// 0 is taken as the start: models often count from 0 there.
			if *args.Offset < 0 {
				return "", fmt.Errorf("offset must be 1 or more, not %d", *args.Offset)
			}
			offset = max(*args.Offset, 1)
		}
		if args.Limit != nil {
			if *args.Limit < 1 {
				return "", fmt.Errorf("limit must be 1 or more, not %d", *args.Limit)
			}
			limit = *args.Limit
		}
		rel, err := ws.resolve("file_path", *args.FilePath)
		if err != nil {
			return "", err
		}
		f, err := ws.root.Open(rel)
		if err != nil {
			return "", fileErr("read", *args.FilePath, err)
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			return "", fileErr("read", *args.FilePath, err)
		}
		if info.IsDir() {
			return "", fmt.Errorf("%q is a directory, not a file", *args.FilePath)
		}
		return readLines(f, *args.FilePath, offset, limit, t.outputCap())
	})
}

// readLines formats lines of r like cat -n. It reads no further than it
// shows, so a huge file (or a huge line) costs no more than the cap.
func readLines(r io.Reader, name string, offset, limit, capBytes int) (string, error) {
	br := bufio.NewReader(r)
	var out strings.Builder
	line, shown := 0, 0
	midLine := false // the previous fragment did not end its line
	for limit < 0 || shown < limit {
		frag, more, err := br.ReadLine()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fileErr("read", name, err)
		}
		starts := !midLine
		if starts {
			line++
		}
		midLine = more
		if line < offset {
			continue
		}
		var piece []byte
		if starts {
			piece = fmt.Appendf(nil, "%6d\t", line)
		}
		piece = append(piece, frag...)
		if !more {
			piece = append(piece, '\n')
			shown++
		}
		if out.Len()+len(piece) > capBytes {
			out.WriteString(cutUTF8(piece, capBytes-out.Len()))
			fmt.Fprintf(&out, "\n... [output truncated at %d bytes in line %d: read on with offset %d]", capBytes, line, line)
			return out.String(), nil
		}
		out.Write(piece)
	}
	switch {
	case line == 0:
		return "(the file is empty)", nil
	case line < offset:
		return "", fmt.Errorf("offset %d is past the end of %q, which has %d lines", offset, name, line)
	}
	return out.String(), nil
}

// Write replaces or creates a file with the given content, creating missing
// parent folders inside the workspace.
func (t *Tools) Write(ctx context.Context, in ToolInput) (ToolOutput, error) {
	return t.run(ctx, ToolWrite, in, func(ws *workspace, in ToolInput) (string, error) {
		var args struct {
			FilePath *string `json:"file_path"`
			Content  *string `json:"content"`
		}
		if err := decodeArgs(in.Call.Arguments, &args); err != nil {
			return "", err
		}
		if args.FilePath == nil {
			return "", missing("file_path")
		}
		if args.Content == nil {
			return "", missing("content")
		}
		rel, err := ws.resolve("file_path", *args.FilePath)
		if err != nil {
			return "", err
		}
		verb := "Updated"
		if _, err := ws.root.Stat(rel); errors.Is(err, fs.ErrNotExist) {
			verb = "Created"
		}
		if dir := filepath.Dir(rel); dir != "." {
			if err := ws.root.MkdirAll(dir, 0o755); err != nil {
				return "", fmt.Errorf("cannot create the folders of %q: %w", *args.FilePath, pathErr(err))
			}
		}
		if err := ws.root.WriteFile(rel, []byte(*args.Content), 0o644); err != nil {
			return "", fileErr("write", *args.FilePath, err)
		}
		return fmt.Sprintf("%s %q (%d bytes)", verb, *args.FilePath, len(*args.Content)), nil
	})
}

// Edit replaces old_string with new_string in a file: exactly one occurrence,
// or every one when replace_all is set.
func (t *Tools) Edit(ctx context.Context, in ToolInput) (ToolOutput, error) {
	return t.run(ctx, ToolEdit, in, func(ws *workspace, in ToolInput) (string, error) {
		var args struct {
			FilePath   *string `json:"file_path"`
			OldString  *string `json:"old_string"`
			NewString  *string `json:"new_string"`
			ReplaceAll bool    `json:"replace_all"`
		}
		if err := decodeArgs(in.Call.Arguments, &args); err != nil {
			return "", err
		}
		switch {
		case args.FilePath == nil:
			return "", missing("file_path")
		case args.OldString == nil:
			return "", missing("old_string")
		case args.NewString == nil:
			return "", missing("new_string")
		}
		rel, err := ws.resolve("file_path", *args.FilePath)
		if err != nil {
			return "", err
		}
		data, err := ws.root.ReadFile(rel) // a directory is EISDIR: see fileErr
		if err != nil {
			return "", fileErr("read", *args.FilePath, err)
		}
		text, n, err := applyEdit(*args.FilePath, string(data), *args.OldString, *args.NewString, args.ReplaceAll)
		if err != nil {
			return "", err
		}
		if err := ws.root.WriteFile(rel, []byte(text), 0o644); err != nil {
			return "", fileErr("write", *args.FilePath, err)
		}
		return fmt.Sprintf("Edited %q: replaced %d %s", *args.FilePath, n, plural(n, "occurrence")), nil
	})
}

// Bash runs a command with bash -c in the workspace and answers its combined
// output. The command and every process it started are killed when it
// times out, when the activity is cancelled and when the worker dies.
func (t *Tools) Bash(ctx context.Context, in ToolInput) (ToolOutput, error) {
	return t.run(ctx, ToolBash, in, func(ws *workspace, in ToolInput) (string, error) {
		var args struct {
			Command *string  `json:"command"`
			Timeout *float64 `json:"timeout"`
		}
		if err := decodeArgs(in.Call.Arguments, &args); err != nil {
			return "", err
		}
		if args.Command == nil {
			return "", missing("command")
		}
		if strings.TrimSpace(*args.Command) == "" {
			return "", errors.New("command is empty")
		}
		timeout := t.bashTimeout()
		if args.Timeout != nil {
			if *args.Timeout <= 0 {
				return "", fmt.Errorf("timeout must be a positive number of milliseconds, not %v", *args.Timeout)
			}
			if ms := *args.Timeout; ms < float64(timeout/time.Millisecond) {
				timeout = time.Duration(ms * float64(time.Millisecond))
			}
		}
		return runBash(ctx, ws.real, *args.Command, timeout, t.outputCap())
	})
}

// runBash runs command in dir. A command that fails, is killed or times out
// is an error whose message carries the output. When it times out or ctx
// ends, its guard kills it and everything it started (see guard.go).
func runBash(ctx context.Context, dir, command string, timeout time.Duration, capBytes int) (string, error) {
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	out := &capWriter{max: capBytes}
	g, err := startGuarded(runCtx, dir, command, out)
	if err != nil {
		return "", err
	}
	stopHeartbeat := heartbeat(ctx)
	status, reported, err := g.wait()
	stopHeartbeat()

	switch {
	case ctx.Err() != nil:
		// The activity itself was cancelled or timed out; run reports it.
		return "", ctx.Err()
	case runCtx.Err() != nil:
		return "", fmt.Errorf("command timed out after %s\n\n%s", formatDuration(timeout), out)
	case errors.Is(err, exec.ErrWaitDelay):
		// bash succeeded but left processes running that hold its output open;
		// they keep running, and their later output is not shown.
		return out.String() + "\n(the command left processes running in the background; their later output is not shown)", nil
	case reported && status.Signaled():
		return "", fmt.Errorf("command was terminated (signal: %s)\n\n%s", status.Signal(), out)
	case reported && status.ExitStatus() != 0:
		return "", fmt.Errorf("command failed with exit code %d\n\n%s", status.ExitStatus(), out)
	case err != nil:
		// The guard failed (it says why in the output) or was killed.
		return "", fmt.Errorf("command failed: %w\n\n%s", err, out)
	}
	if out.Len() == 0 {
		return "(no output)", nil
	}
	return out.String(), nil
}

// heartbeat records activity heartbeats until the returned stop is called.
// Outside an activity (a unit test calling a tool directly) it does nothing.
func heartbeat(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	every := heartbeatEvery
	if ht := activity.GetInfo(ctx).HeartbeatTimeout; ht > 0 {
		every = min(every, ht/2)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// capWriter keeps the first max bytes written to it and counts the rest, so
// a command that floods its output costs no more memory than the cap.
type capWriter struct {
	max     int
	buf     []byte
	dropped int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	n := len(p)
	if room := w.max - len(w.buf); room > 0 {
		k := min(room, len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
	}
	w.dropped += int64(len(p))
	return n, nil
}

// Len is the number of bytes written, kept or not.
func (w *capWriter) Len() int64 { return int64(len(w.buf)) + w.dropped }

// String is the kept output, with a note of how much was cut when it was.
func (w *capWriter) String() string {
	if w.dropped == 0 {
		return string(w.buf)
	}
	kept := string(trimPartialRune(w.buf))
	return fmt.Sprintf("%s\n... [output truncated: %d more bytes]", kept, w.Len()-int64(len(kept)))
}

// run is what every tool has in common: it opens the workspace, runs the
// tool and turns a tool's failure into an error result for the model. Only
// the cancellation of the activity fails the activity.
func (t *Tools) run(ctx context.Context, tool string, in ToolInput, fn func(*workspace, ToolInput) (string, error)) (ToolOutput, error) {
	if err := ctx.Err(); err != nil {
		return ToolOutput{}, err
	}
	result, err := func() (string, error) {
		ws, err := openWorkspace(t.Workspace)
		if err != nil {
			return "", err
		}
		defer ws.Close()
		// The tool runs the call the policy saw: the same normalized view
		// of its arguments (a no-op for a call the turn has normalized).
		spec, ok := t.spec(tool)
		if !ok {
			return "", fmt.Errorf("no such tool")
		}
		args, err := NormalizeArguments(spec, ws.roots(), in.Call.Arguments)
		if err != nil {
			return "", err
		}
		in.Call.Arguments = args
		return fn(ws, in)
	}()
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ToolOutput{}, ctxErr
	}
	if err != nil {
		return ToolOutput{Status: StatusError, Result: tool + ": " + err.Error()}, nil
	}
	return ToolOutput{Status: StatusOK, Result: result}, nil
}

// spec is the ToolSpec of the named tool.
func (t *Tools) spec(name string) (ToolSpec, bool) {
	specs := t.Specs()
	i := slices.IndexFunc(specs, func(s ToolSpec) bool { return s.Name == name })
	if i < 0 {
		return ToolSpec{}, false
	}
	return specs[i], true
}

func (t *Tools) bashTimeout() time.Duration {
	if t.BashTimeout > 0 {
		return t.BashTimeout
	}
	return DefaultBashTimeout
}

func (t *Tools) outputCap() int {
	if t.OutputCap > 0 {
		return t.OutputCap
	}
	return DefaultOutputCap
}

// applyEdit is what Edit does to text, the content of the file at path, and
// what its preview shows: it replaces old with new, in the one place old
// occurs, or in every one with all, and says how many. Its errors are
// written for the model to correct its call.
func applyEdit(path, text, old, new string, all bool) (string, int, error) {
	switch {
	case old == "":
		return "", 0, errors.New("old_string is empty; use Write to create or replace a whole file")
	case old == new:
		return "", 0, errors.New("old_string and new_string are the same; there is nothing to change")
	}
	switch n := strings.Count(text, old); {
	case n == 0:
		return "", 0, fmt.Errorf("old_string was not found in %q", path)
	case n > 1 && !all:
		return "", 0, fmt.Errorf("old_string occurs %d times in %q; include more surrounding text to make it unique, or set replace_all", n, path)
	default:
		return strings.ReplaceAll(text, old, new), n, nil
	}
}

// decodeArgs decodes a call's arguments into v, after run has normalized
// them (NormalizeArguments refused keys the schema does not declare and
// keys that differ only in case). Its errors are written for the model to
// correct its call.
func decodeArgs(arguments string, v any) error {
	if strings.TrimSpace(arguments) == "" {
		arguments = "{}"
	}
	err := json.Unmarshal([]byte(arguments), v)
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return fmt.Errorf("arguments must be a JSON object, not %s", typeErr.Value)
	case errors.As(err, &typeErr):
		return fmt.Errorf("%s must be %s, not %s", typeErr.Field, jsonKind(typeErr.Type), typeErr.Value)
	default:
		return fmt.Errorf("arguments are not valid JSON: %w", err)
	}
}

// jsonKind names the JSON type that decodes into t.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	default:
		return "a " + t.Kind().String()
	}
}

func missing(arg string) error { return fmt.Errorf("%s is required", arg) }

// fileErr says why a file could not be read or written, naming it as the
// model did.
func fileErr(verb, name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%q does not exist", name)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%q is a directory, not a file", name)
	default:
		return fmt.Errorf("cannot %s %q: %w", verb, name, pathErr(err))
	}
}

// cutUTF8 returns at most n bytes of b, without splitting a character.
func cutUTF8(b []byte, n int) string {
	return string(trimPartialRune(b[:min(max(n, 0), len(b))]))
}

// trimPartialRune drops the incomplete character a cut left at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// formatDuration prints d without the zero units time.Duration.String adds:
// 2m rather than 2m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// property is one argument in a tool's JSON schema.
type property struct {
	Type        string `json:"type"`
	Description string `json:"description"`
	Minimum     int    `json:"minimum,omitempty"`
}

// objectSchema is the JSON schema of a tool's arguments.
func objectSchema(required []string, props map[string]property) json.RawMessage {
	b, err := json.Marshal(struct {
		Type                 string              `json:"type"`
		Properties           map[string]property `json:"properties"`
		Required             []string            `json:"required"`
		AdditionalProperties bool                `json:"additionalProperties"`
	}{"object", props, required, false})
	if err != nil {
		panic(err) // cannot happen: the types above always marshal
	}
	return b
}
