package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
)

// The sandbox stage (issue 30, "Measure"): what the Bash sandbox and its
// overlay add to a command, measured in this process through the tools'
// activities over a workspace of the stage's own (no Temporal), and how
// many calls of a typical session need a person with and without
// `sandbox: auto` (sandboxsession.go).
const (
	// sandboxTrueRuns, sandboxFilesRuns and sandboxBuildRuns are the runs
	// of each side of `true`, of the command that writes sandboxFiles
	// files, and of a `go build` with a warm cache; sandboxColdRuns of a
	// `go build` with a cold one, which takes seconds.
	sandboxTrueRuns  = 20
	sandboxFilesRuns = 5
	sandboxBuildRuns = 5
	sandboxColdRuns  = 3
	sandboxFiles     = 1000
	// sandboxTimeout is each command's time limit.
	sandboxTimeout = 2 * time.Minute
)

// sandboxResult is what the sandbox stage measured.
type sandboxResult struct {
	// Unavailable says why the sandbox cannot start on this machine; the
	// stage then measured nothing.
	Unavailable string
	// Err says why the stage did not finish; what it measured before
	// stays.
	Err string
	// Costs are each command's times, plain and sandboxed.
	Costs []sandboxCost
	// Apply is ApplySandbox's time on the run that wrote sandboxFiles
	// files, and Applied how many changes each apply applied.
	Apply   summary
	Applied int
	// Sessions are the scripted session without and with sandbox: auto.
	Sessions []sessionResult
	// ListenerHits are the requests the session's local listener got.
	ListenerHits int64
}

// sandboxCost is one command's times, run by the Bash activity (plain) and
// by SandboxBash (sandboxed).
type sandboxCost struct {
	// Key names the row for the verdict: "true", "cold", "warm",
	// "default" or "files".
	Key string
	// Command names the command in the report; PlainHow and SandboxedHow
	// say how each side ran it, when not as written.
	Command, PlainHow, SandboxedHow string
	Plain, Sandboxed                summary
	PlainN, SandboxedN              int
}

// smallModule is the module that the stage builds and tests: a main
// package that imports nothing (a cold build compiles the runtime alone),
// and its test.
var smallModule = map[string]string{
	"go.mod":       "module example.com/small\n\ngo 1.22\n",
	"main.go":      "package main\n\nfunc main() { println(greet(\"world\")) }\n\nfunc greet(s string) string { return \"hello, \" + s }\n",
	"main_test.go": "package main\n\nimport \"testing\"\n\nfunc TestGreet(t *testing.T) {\n\tif got := greet(\"x\"); got != \"hello, x\" {\n\t\tt.Fatal(got)\n\t}\n}\n",
}

// writeFiles writes files (path: content) under dir.
func writeFiles(dir string, files map[string]string) error {
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// bashCall is a Bash call of command.
func bashCall(id, command string) protocol.ToolCall {
	args, _ := json.Marshal(map[string]string{"command": command})
	return protocol.ToolCall{ID: id, Name: protocol.ToolBash, Arguments: string(args)}
}

// sandboxTools runs commands through the tools' activities, in this
// process, in one workspace.
type sandboxTools struct{ tools *activities.Tools }

// plain runs command as the Bash activity does and says how long it took;
// a command that fails is an error.
func (s sandboxTools) plain(ctx context.Context, command string) (time.Duration, error) {
	start := time.Now()
	out, err := s.tools.Bash(ctx, activities.ToolInput{Call: bashCall("plain", command)})
	took := time.Since(start)
	if err == nil && out.Status != protocol.StatusOK {
		err = fmt.Errorf("%s failed: %s", command, firstLine(out.Result))
	}
	return took, err
}

// sandboxed runs command in the sandbox as SandboxBash does and says how
// long it took, its changes read; a command that fails, or that the
// sandbox could not run, is an error.
func (s sandboxTools) sandboxed(ctx context.Context, command string) (protocol.SandboxRun, time.Duration, error) {
	start := time.Now()
	run, err := s.tools.SandboxBash(ctx, activities.ToolInput{Call: bashCall("sandboxed", command)})
	took := time.Since(start)
	switch {
	case err != nil:
	case run.Unavailable != "":
		err = fmt.Errorf("%s did not run in the sandbox: %s", command, run.Unavailable)
	case run.ExitCode != 0:
		err = fmt.Errorf("%s failed in the sandbox (exit code %d): %s", command, run.ExitCode, strings.TrimSpace(run.Output))
	}
	return run, took, err
}

// sandboxCosts measures each command plain and sandboxed, the two
// alternating, in a workspace of the small module under dir, and the apply
// of the run that wrote sandboxFiles files. The go build rows compare
// like with like (a cold cache on both sides, a warm one on both) and
// what the default gives (the worker's warm cache against the sandbox's
// fresh one).
func sandboxCosts(ctx context.Context, dir string) (sandboxResult, error) {
	var res sandboxResult
	ws := filepath.Join(dir, "workspace")
	if err := writeFiles(ws, smallModule); err != nil {
		return res, err
	}
	s := sandboxTools{tools: &activities.Tools{Workspace: ws, BashTimeout: sandboxTimeout, OutputCap: activities.DefaultOutputCap}}
	clean := func(paths ...string) error {
		for _, p := range paths {
			if err := os.RemoveAll(filepath.Join(ws, p)); err != nil {
				return err
			}
		}
		return nil
	}
	// The warm cache is the one a plain command gets, the worker's.
	warm, err := goCache()
	if err != nil {
		return res, err
	}
	// Warm up, unmeasured: the cache, and each side's first start.
	if _, err := s.plain(ctx, "go build -o app . && go test ./... && go vet ./..."); err != nil {
		return res, err
	}
	if _, _, err := s.sandboxed(ctx, "true"); err != nil {
		return res, err
	}

	// pair runs n of each side, alternating, with before run (unmeasured)
	// before each.
	pair := func(n int, before func() error, plain func() (time.Duration, error), sandboxed func() (time.Duration, error)) (p, sb []time.Duration, err error) {
		for range n {
			for _, side := range []struct {
				run func() (time.Duration, error)
				out *[]time.Duration
			}{{plain, &p}, {sandboxed, &sb}} {
				if err := before(); err != nil {
					return p, sb, err
				}
				took, err := side.run()
				if err != nil {
					return p, sb, err
				}
				*side.out = append(*side.out, took)
			}
		}
		return p, sb, nil
	}
	nothing := func() error { return nil }
	sandboxedRun := func(command string) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			_, took, err := s.sandboxed(ctx, command)
			return took, err
		}
	}
	plainRun := func(command string) func() (time.Duration, error) {
		return func() (time.Duration, error) { return s.plain(ctx, command) }
	}
	add := func(c sandboxCost, p, sb []time.Duration) {
		c.Plain, c.PlainN, c.Sandboxed, c.SandboxedN = summarize(p), len(p), summarize(sb), len(sb)
		res.Costs = append(res.Costs, c)
	}

	p, sb, err := pair(sandboxTrueRuns, nothing, plainRun("true"), sandboxedRun("true"))
	if err != nil {
		return res, err
	}
	add(sandboxCost{Key: "true", Command: "`true`"}, p, sb)

	// go build with a cold cache on both sides: the sandbox's cache is a
	// fresh /tmp/.cache each run, and plain gets a fresh GOCACHE.
	var cold string
	coldPlain, coldSandboxed, err := pair(sandboxColdRuns, func() error {
		if cold != "" {
			removeAll(cold)
		}
		dir, err := os.MkdirTemp("", "bench-gocache-")
		cold = dir
		if err != nil {
			return err
		}
		return clean("app")
	}, func() (time.Duration, error) {
		return s.plain(ctx, "GOCACHE="+cold+" go build -o app .")
	}, sandboxedRun("go build -o app ."))
	if cold != "" {
		removeAll(cold)
	}
	if err != nil {
		return res, err
	}
	add(sandboxCost{Key: "cold", Command: "`go build -o app .`, a cold cache on both sides", PlainHow: "a fresh `GOCACHE` each run", SandboxedHow: "the sandbox's fresh `/tmp/.cache`, the default"},
		coldPlain, coldSandboxed)

	// go build with the worker's warm cache on both sides: read-only in
	// the sandbox, which Go's build cache bears.
	p, sb, err = pair(sandboxBuildRuns, func() error { return clean("app") },
		plainRun("go build -o app ."), sandboxedRun("GOCACHE="+warm+" go build -o app ."))
	if err != nil {
		return res, err
	}
	add(sandboxCost{Key: "warm", Command: "`go build -o app .`, the worker's warm cache on both sides", PlainHow: "the worker's cache", SandboxedHow: "`GOCACHE=` the same cache, read-only there"}, p, sb)
	add(sandboxCost{Key: "default", Command: "`go build -o app .`, each side's default", PlainHow: "the worker's warm cache", SandboxedHow: "the sandbox's fresh `/tmp/.cache`"}, p, coldSandboxed)

	// The files: each run writes them anew, and each sandboxed run's
	// changes are applied to a workspace without them, and timed.
	files := fmt.Sprintf("mkdir out && for i in $(seq %d); do echo $i > out/f$i.txt; done", sandboxFiles)
	var applies []time.Duration
	p, sb, err = pair(sandboxFilesRuns, func() error { return clean("out") }, plainRun(files), func() (time.Duration, error) {
		run, took, err := s.sandboxed(ctx, files)
		if err != nil {
			return took, err
		}
		if err := clean("out"); err != nil {
			return took, err
		}
		start := time.Now()
		out, err := s.tools.ApplySandbox(ctx, activities.SandboxApplyInput{Call: bashCall("sandboxed", files), Run: run})
		applies = append(applies, time.Since(start))
		switch {
		case err != nil:
			return took, err
		case out.Applied == nil || len(out.Applied.Applied) != len(run.Changes) || len(out.Applied.Conflicts) > 0:
			return took, fmt.Errorf("the apply of %d changes did not apply them all: %s", len(run.Changes), firstLine(out.Result))
		}
		res.Applied = len(out.Applied.Applied)
		return took, nil
	})
	if err != nil {
		return res, err
	}
	add(sandboxCost{Key: "files", Command: fmt.Sprintf("writing %s small files (`%s`)", thousands(sandboxFiles), files)}, p, sb)
	res.Apply = summarize(applies)
	return res, clean("out", "app")
}

// goCache is the build cache that go uses here.
func goCache() (string, error) {
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOCACHE: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" || dir == "off" {
		return "", errors.New("go has no build cache here (go env GOCACHE)")
	}
	return dir, nil
}

// removeAll removes dir, making its folders writable first (Go keeps
// its module cache read-only).
func removeAll(dir string) {
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o755)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// thousands writes n with a comma between thousands.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// sandboxMarkdown is the section of the sandbox stage.
func (r *report) sandboxMarkdown() string {
	sb := r.Sandbox
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("### The Bash sandbox")
	p("")
	if sb.Unavailable != "" {
		p("The sandbox cannot start on this machine, so the stage measured nothing: %s.", sb.Unavailable)
		p("")
		return b.String()
	}
	p("Each command through the tools' activities in the benchmark's process (no Temporal), over a workspace")
	p("of the stage's own holding a small Go module (a main package that imports nothing, and its test):")
	p("plain as the Bash activity runs it (under the guard, in the workspace), sandboxed as SandboxBash runs")
	p("it (unshare and the overlay, bwrap, prlimit; its changes read from the overlay's upper layer, with")
	p("their diffs). The two sides alternate, after an unmeasured warm-up; percentiles are nearest-rank, so")
	p("with 5 runs or fewer the p95 is the slowest run.")
	if sb.Err != "" {
		p("")
		p("**The stage did not finish:** %s", firstLine(sb.Err))
		p("What it measured before that is below.")
	}
	p("")
	p("| command | plain, p50 / p95 | sandboxed, p50 / p95 | sandboxed / plain, p50 | sandboxed − plain, p50 | runs of each |")
	p("|---|---:|---:|---:|---:|---:|")
	for _, c := range sb.Costs {
		what := c.Command
		if c.PlainHow != "" {
			what += fmt.Sprintf(": plain with %s, sandboxed with %s", c.PlainHow, c.SandboxedHow)
		}
		runs := strconv.Itoa(c.PlainN)
		if c.SandboxedN != c.PlainN {
			runs = fmt.Sprintf("%d, %d", c.PlainN, c.SandboxedN)
		}
		p("| %s | %s / %s | %s / %s | %s | %s | %s |", what, span(c.Plain.p50), span(c.Plain.p95), span(c.Sandboxed.p50), span(c.Sandboxed.p95),
			ratioCell(ratio(c.Sandboxed.p50, c.Plain.p50)), span(c.Sandboxed.p50-c.Plain.p50), runs)
	}
	if sb.Applied > 0 {
		p("| ApplySandbox of the %s-file run (%s changes), into a workspace without them | — | %s / %s | | | %d |",
			thousands(sandboxFiles), thousands(sb.Applied), span(sb.Apply.p50), span(sb.Apply.p95), sandboxFilesRuns)
	}
	p("")
	p("A sandboxed run's cache is a fresh `/tmp/.cache` (`XDG_CACHE_HOME`), so by default every go command")
	p("in the sandbox builds from nothing: the row of each side's default is what a person sees today.")
	p("With a cold cache on both sides, the sandbox's is in memory (its `/tmp` is a tmpfs) and plain's fresh")
	p("`GOCACHE` in the temporary folder, on disk here: the sandboxed build may come out ahead.")
	p("Go's build cache may be read-only: `TOLLGATE_BASH_ENV=GOCACHE`, with the worker's `GOCACHE` set,")
	p("gives sandboxed commands the worker's warm cache (the warm row), and what they build that it lacks")
	p("is built and not kept.")
	p("")
	p("%s", r.sessionMarkdown())
	return b.String()
}

// sessionMarkdown is the part of the sandbox stage's section on the
// scripted session.
func (r *report) sessionMarkdown() string {
	sb := r.Sandbox
	if len(sb.Sessions) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	calls := len(sb.Sessions[0].Calls)
	p("#### A session of %d commands, with and without `sandbox: auto`", calls)
	p("")
	p("One turn of %d steps, one Bash call a step, from the scripted model, on a worker and an API of their", calls)
	p("own on the run's dev server, each session in a fresh workspace: the module in `src/` (a git")
	p("repository when git is installed), `docs/`, a README and a notes file. `TOLLGATE_BASH_SANDBOX=preview`,")
	p("`TOLLGATE_BASH_ENV=GOCACHE` with the worker's warm build cache, and the policy")
	p("")
	p("```yaml")
	p("%s```", sessionPolicy(true))
	p("")
	p("without its last line, then with it. The benchmark approves every request through POST")
	p("/chat/approval as it comes. `curl` asks a listener on the machine's 127.0.0.1, which got %d", sb.ListenerHits)
	p("requests in all (the sandbox has a loopback of its own). In brackets, each step's time: from the")
	p("result before it to its own, with the model's call, the sandboxed run, the decision and the apply.")
	p("")
	header, line := "| # | command | what it changed in the sandbox |", "|---:|---|---|"
	for _, s := range sb.Sessions {
		header += " asked a person, " + s.Name + " |"
		line += "---|"
	}
	p("%s how it ended |", header)
	p("%s---|", line)
	for i := range calls {
		last := sb.Sessions[len(sb.Sessions)-1].Calls[i]
		changed := strings.Join(last.Changes, ", ")
		if changed == "" {
			changed = "nothing"
		}
		row := fmt.Sprintf("| %d | `%s` | %s |", i+1, last.Command, changed)
		for _, s := range sb.Sessions {
			c := s.Calls[i]
			switch {
			case c.Asked:
				row += " **asked**"
			case c.Contained:
				row += " no: contained"
			default:
				row += " no"
			}
			row += fmt.Sprintf(" (%.0f ms) |", ms(c.Took))
		}
		p("%s %s |", row, strings.ReplaceAll(truncate(last.Result, 80), "|", `\|`))
	}
	var asked []string
	for _, s := range sb.Sessions {
		asked = append(asked, fmt.Sprintf("%s %d of %d calls asked a person (the turn took %s)", s.Name, s.Asked, calls, s.Took.Round(100*time.Millisecond)))
	}
	p("")
	p("%s. What it changed and how it ended are the last session's.", strings.Join(asked, "; "))
	p("")
	return b.String()
}

// sandboxVerdict says in words what the sandbox stage measured.
func (r *report) sandboxVerdict() string {
	sb := r.Sandbox
	if sb.Unavailable != "" {
		return fmt.Sprintf("The Bash sandbox cannot start on this machine, and its stage measured nothing (%s). ", firstLine(sb.Unavailable))
	}
	var s strings.Builder
	if sb.Err != "" {
		fmt.Fprintf(&s, "The sandbox stage did not finish (%s). ", firstLine(sb.Err))
	}
	costs := map[string]sandboxCost{}
	for _, c := range sb.Costs {
		costs[c.Key] = c
	}
	if c, ok := costs["true"]; ok {
		fmt.Fprintf(&s, "The Bash sandbox adds %s to `true` at p50 (%s against %s plain)", span(c.Sandboxed.p50-c.Plain.p50), span(c.Sandboxed.p50), span(c.Plain.p50))
		if d, ok := costs["default"]; ok {
			fmt.Fprintf(&s, "; a `go build` of a small module takes %s in it against %s plain, since its build cache starts empty", span(d.Sandboxed.p50), span(d.Plain.p50))
		}
		if w, ok := costs["warm"]; ok {
			fmt.Fprintf(&s, " (%s with the worker's cache read-only)", span(w.Sandboxed.p50))
		}
		if f, ok := costs["files"]; ok && sb.Applied > 0 {
			fmt.Fprintf(&s, "; writing %s files takes %s in it against %s plain, and applying them %s", thousands(sandboxFiles), span(f.Sandboxed.p50), span(f.Plain.p50), span(sb.Apply.p50))
		}
		s.WriteString(". ")
	}
	if len(sb.Sessions) == 2 {
		a, b := sb.Sessions[0], sb.Sessions[1]
		fmt.Fprintf(&s, "In a session of %d typical commands, %d asked a person without `sandbox: auto` and %d with it. ", len(a.Calls), a.Asked, b.Asked)
	}
	return s.String()
}

// span is a duration in a table: milliseconds, or seconds past 10 s.
func span(d time.Duration) string {
	if d >= 10*time.Second || d <= -10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f ms", ms(d))
}

// truncate is s cut to n runes, with an ellipsis when cut.
func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
