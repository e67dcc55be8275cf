package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/protocol"
)

// Defaults of the Tools limits.
const (
	// DefaultOutputCap is how many bytes of output Read and Bash return when
	// Tools.OutputCap is not set.
	DefaultOutputCap = 30000
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
	// BashEnv names the variables of the worker's environment that a Bash
	// command gets besides BaseEnv; it gets none of the others, which hold
	// the worker's secrets.
	BashEnv []string
	// Ledger, when set, takes the audit ledger's rows that a turn hands a
	// tool's activity (ToolInput.Ledger) while the tool runs.
	Ledger audit.Writer
}

// Activities returns the tool activities by their names, and the
// sandbox's (SandboxBashActivity, ApplySandboxActivity), for registration
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
		// A turn hands the file tools no rows (levelFileToolsCarryNone in
		// package workflows); those of an older turn they carry.
		protocol.ToolRead:  Carried(t.Ledger, t.Read),
		protocol.ToolWrite: Carried(t.Ledger, t.Write),
		protocol.ToolEdit:  Carried(t.Ledger, t.Edit),
		protocol.ToolBash:  Carried(t.Ledger, t.Bash),
		// The sandbox's: a Bash call run over a copy-on-write view of the
		// workspace, and its changes applied once approved.
		SandboxBashActivity:  t.SandboxBash,
		ApplySandboxActivity: Carried(t.Ledger, t.ApplySandbox),
	}
}

// Specs describes the tools to the model. The argument names are those of
// Claude Code's tools, which models already know.
func (t *Tools) Specs() []protocol.ToolSpec {
	return []protocol.ToolSpec{
		{
			Name: protocol.ToolRead,
			Description: fmt.Sprintf("Reads a text file in the workspace. Lines are numbered from 1, as cat -n prints them. "+
				"Use offset and limit to read part of a long file; output beyond %d bytes is cut.", t.outputCap()),
			Parameters: objectSchema([]string{"file_path"}, map[string]property{
				"file_path": {Type: "string", Description: "Path of the file, relative to the workspace or absolute inside it."},
				"offset":    {Type: "integer", Description: "Line number to start reading at, from 1.", Minimum: 1},
				"limit":     {Type: "integer", Description: "Number of lines to read.", Minimum: 1},
			}),
			WorkspacePaths: []string{"file_path"},
			Annotations:    &protocol.ToolAnnotations{ReadOnly: true},
		},
		{
			Name:        protocol.ToolWrite,
			Description: "Writes a file in the workspace, replacing it if it exists and creating missing parent folders.",
			Parameters: objectSchema([]string{"file_path", "content"}, map[string]property{
				"file_path": {Type: "string", Description: "Path of the file, relative to the workspace or absolute inside it."},
				"content":   {Type: "string", Description: "The complete new content of the file."},
			}),
			WorkspacePaths: []string{"file_path"},
			Annotations:    &protocol.ToolAnnotations{Destructive: true, Idempotent: true},
		},
		{
			Name: protocol.ToolEdit,
			Description: "Replaces text in a file in the workspace. old_string must occur exactly once unless replace_all is true; " +
				"include enough surrounding text to make it unique. Copy it from the file exactly, without Read's line numbers.",
			Parameters: objectSchema([]string{"file_path", "old_string", "new_string"}, map[string]property{
				"file_path":   {Type: "string", Description: "Path of the file, relative to the workspace or absolute inside it."},
				"old_string":  {Type: "string", Description: "The text to replace."},
				"new_string":  {Type: "string", Description: "The text to put in its place."},
				"replace_all": {Type: "boolean", Description: "Replace every occurrence of old_string instead of exactly one."},
			}),
			WorkspacePaths: []string{"file_path"},
			Annotations:    &protocol.ToolAnnotations{Destructive: true},
		},
		{
			Name: protocol.ToolBash,
			Description: fmt.Sprintf("Runs a command with bash -c in the workspace folder and returns its combined stdout and stderr "+
				"(at most %d bytes) and its exit code when that is not 0.", t.outputCap()),
			Parameters: objectSchema([]string{"command"}, map[string]property{
				"command": {Type: "string", Description: "The command to run."},
				"timeout": {Type: "integer", Description: fmt.Sprintf("Milliseconds after which the command is killed; "+
					"the default and maximum is %d.", t.bashTimeout().Milliseconds()), Minimum: 1},
				"description": {Type: "string", Description: "What the command does, in a few words, for the person who approves it."},
			}),
			Annotations: &protocol.ToolAnnotations{Destructive: true, OpenWorld: true},
		},
	}
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

// run is what every tool has in common: it opens the workspace, runs the
// tool and turns a tool's failure into an error result for the model. Only
// the cancellation of the activity fails the activity.
func (t *Tools) run(ctx context.Context, tool string, in ToolInput, fn func(*workspace, ToolInput) (string, error)) (ToolOutput, error) {
	if err := ctx.Err(); err != nil {
		return ToolOutput{}, err
	}
	result, err := func() (string, error) {
		ws, in, err := t.open(tool, in)
		if err != nil {
			return "", err
		}
		defer ws.Close()
		return fn(ws, in)
	}()
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ToolOutput{}, ctxErr
	}
	if err != nil {
		return ToolOutput{Status: protocol.StatusError, Result: tool + ": " + err.Error()}, nil
	}
	return ToolOutput{Status: protocol.StatusOK, Result: result}, nil
}

// open opens the workspace for a call of tool and gives the call with the
// arguments it runs with: the call the policy saw, the same normalized
// view of its arguments (a no-op for a call the turn has normalized). The
// caller closes the workspace.
func (t *Tools) open(tool string, in ToolInput) (*workspace, ToolInput, error) {
	ws, err := openWorkspace(t.Workspace)
	if err != nil {
		return nil, in, err
	}
	spec, ok := t.spec(tool)
	if !ok {
		ws.Close()
		return nil, in, fmt.Errorf("no such tool")
	}
	args, err := runArguments(spec, ws, in.Call.Arguments)
	if err != nil {
		ws.Close()
		return nil, in, err
	}
	in.Call.Arguments = args
	return ws, in, nil
}

// runArguments gives the arguments a tool runs with: normalized, and its
// workspace paths free of symbolic links. The turn resolved every link
// before the policy read the call (ResolveArguments), so a path that leads
// through one now was made a link after that (or came from a turn of an
// older release, or was edited in by a signal's decision): the policy, and
// the person, were asked about another file than the one it would reach,
// and it is refused, naming the file it leads to.
func runArguments(spec protocol.ToolSpec, ws *workspace, arguments string) (string, error) {
	args, resolved, err := ResolveArguments(spec, ws.roots(), arguments)
	if err == nil && len(resolved) == 0 {
		return args, nil
	}
	// Refused: normalized once more (only here), so that the error names
	// each path as the policy read it, not as the model spelled it.
	clean, nerr := NormalizeArguments(spec, ws.roots(), arguments)
	if nerr != nil {
		return "", nerr
	}
	if err != nil {
		if _, _, named := ResolveArguments(spec, ws.roots(), clean); named != nil {
			err = named
		}
		return "", err
	}
	for _, name := range spec.WorkspacePaths {
		if real, ok := resolved[name]; ok {
			var given string
			_ = json.Unmarshal(argument(clean, name), &given)
			return "", fmt.Errorf("%s %q leads through a symbolic link to %q, which is not the file this call was checked for: call again with %q",
				name, given, real, real)
		}
	}
	return args, nil // not reached: resolved names a workspace path
}

// argument is the JSON value of the named member of normalized
// arguments, or nil.
func argument(args, name string) json.RawMessage {
	var members map[string]json.RawMessage
	_ = json.Unmarshal([]byte(args), &members)
	return members[name]
}

// spec is the ToolSpec of the named tool.
func (t *Tools) spec(name string) (protocol.ToolSpec, bool) {
	specs := t.Specs()
	i := slices.IndexFunc(specs, func(s protocol.ToolSpec) bool { return s.Name == name })
	if i < 0 {
		return protocol.ToolSpec{}, false
	}
	return specs[i], true
}

func (t *Tools) bashTimeout() time.Duration {
	if t.BashTimeout > 0 {
		return t.BashTimeout
	}
	return protocol.DefaultBashTimeout
}

func (t *Tools) outputCap() int {
	if t.OutputCap > 0 {
		return t.OutputCap
	}
	return DefaultOutputCap
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
