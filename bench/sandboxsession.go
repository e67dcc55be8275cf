package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// The scripted session: an agent's typical commands, one Bash call a
// step of one turn, through a worker and an API of their own with
// TOLLGATE_BASH_SANDBOX=preview and a policy that protects every file
// outside docs/, once without `sandbox: auto` and once with it. A person
// (the stage, through the API) approves every request, so the session goes
// on; what counts is which calls asked.

// sessionWait bounds one session's turn.
const sessionWait = 3 * time.Minute

// sessionQuery is the session's message; the model's answers do not
// depend on it.
const sessionQuery = "sandbox-session: run the commands"

// sessionPolicy is the session's policy, with sandbox: auto on Bash's
// rule or not: writes outside docs/ ask (docs/policy.md, its fourth
// example), and so does every Bash call.
func sessionPolicy(auto bool) string {
	p := "tools:\n  Write:\n    when: '!args.file_path.startsWith(\"docs/\")'\n  Bash:\n    require: always\n"
	if auto {
		p += "    sandbox: auto\n"
	}
	return p
}

// sessionFiles are the session's workspace: a small module in src/, its
// docs, and a file to delete. src/util.go is not gofmt'ed.
var sessionFiles = map[string]string{
	"go.mod":           "module example.com/small\n\ngo 1.22\n",
	"README.md":        "# small\n\nA small module the benchmark's session works on.\n",
	"notes.txt":        "scratch notes\n",
	"src/main.go":      "package main\n\nfunc main() { println(greet(\"world\")) }\n\nfunc greet(s string) string { return \"hello, \" + s }\n",
	"src/util.go":      "package main\n\nfunc twice(n int)int{\nreturn 2*n}\n",
	"src/main_test.go": "package main\n\nimport \"testing\"\n\nfunc TestGreet(t *testing.T) {\n\tif got := greet(\"x\"); got != \"hello, x\" {\n\t\tt.Fatal(got)\n\t}\n\tif twice(2) != 4 {\n\t\tt.Fatal(twice(2))\n\t}\n}\n",
	"docs/x.md":        "# X\n\nA draft of the docs.\n",
	"docs/old.md":      "# Old\n\nTo be archived.\n",
}

// sessionCommands are the session's commands; curl asks the local
// listener on port. With git, the workspace is a repository and two
// commands read it; without, two other reads stand in for them.
func sessionCommands(port int, git bool) []string {
	status, diff := "git status --short", "git diff --stat"
	if !git {
		status, diff = "ls docs", "du -sh src"
	}
	return []string{
		"ls -la",
		"cat README.md",
		"wc -l src/*.go docs/*.md",
		"grep -rn greet src",
		"go test ./...",
		"go vet ./...",
		"gofmt -l .",
		"gofmt -w src/util.go",
		"sed -i 's/world/gopher/' src/main.go",
		"sed -i 's/A draft/The draft/' docs/x.md",
		"go build -o /tmp/small ./src && /tmp/small",
		"curl -sS --max-time 5 http://127.0.0.1:" + strconv.Itoa(port) + "/",
		"rm notes.txt",
		"mv docs/old.md docs/archive.md",
		status,
		diff,
		"head -n 3 docs/x.md",
		"find . -name '*.go' -not -path './.git/*'",
		"echo '- checked' >> docs/x.md",
		"go test ./...",
	}
}

// sessionResult is one session: which calls asked a person, and which the
// sandbox let go on.
type sessionResult struct {
	Name             string
	Asked, Contained int
	Calls            []sessionCall
	Took             time.Duration
}

// sessionCall is one command of a session.
type sessionCall struct {
	Command          string
	Asked, Contained bool
	// Changes are what the command changed in the sandbox ("op path").
	Changes []string
	// Result is how it ended, as the model read it.
	Result string
	// Took is the step: from the result before it (or the turn's start)
	// to its own, the model's call and the person's decision included.
	Took time.Duration
}

// sessionScript is the session's model: at each step one Bash call of the
// next command, then "done".
func sessionScript(commands []string) scripted.Script {
	return func(req openai.ChatCompletionRequest) scripted.Reply {
		n := 0
		for _, m := range req.Messages {
			if m.Role == openai.ChatMessageRoleTool {
				n++
			}
		}
		if n >= len(commands) {
			return scripted.Reply{Content: "done"}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{bashCall(sessionCallID(n), commands[n])}}
	}
}

func sessionCallID(i int) string { return fmt.Sprintf("cmd_%02d", i) }

// sessionWorkspace writes the session's files into ws and, with git,
// commits them, and builds and tests the module once there, so that the
// build cache holds it.
func sessionWorkspace(ws string, git bool) error {
	if err := writeFiles(ws, sessionFiles); err != nil {
		return err
	}
	script := "go test ./... >/dev/null && go vet ./... && go build -o /dev/null ./src"
	if git {
		script += " && git init -q && git add -A && git -c user.name=bench -c user.email=bench@example.com commit -qm start"
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = ws
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("the session's workspace: %s: %w: %s", script, err, out)
	}
	return nil
}

// runSession runs the session's turn on api, approving each request as it
// comes, and notes of each call whether it asked, whether the sandbox let it
// go on, what it changed and how it ended.
func runSession(ctx context.Context, api apiClient, conv string, commands []string) (sessionResult, error) {
	ctx, cancel := context.WithTimeout(ctx, sessionWait)
	defer cancel()
	r := sessionResult{Calls: make([]sessionCall, len(commands))}
	index := map[string]int{}
	for i, c := range commands {
		r.Calls[i].Command = c
		index[sessionCallID(i)] = i
	}
	changes := func(i int, run *protocol.SandboxRun) {
		if run == nil {
			return
		}
		r.Calls[i].Changes = nil
		for _, c := range run.Changes {
			path := c.Path
			if c.From != "" {
				path = c.From + " → " + c.Path
			}
			r.Calls[i].Changes = append(r.Calls[i].Changes, c.Op+" "+path)
		}
	}
	start := time.Now()
	last := start
	resp, turnID, err := api.chat(ctx, sessionQuery, conv)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	for ev := range readStamped(resp.Body) {
		switch ev.Type {
		case protocol.EventApprovalRequest:
			if i, ok := index[ev.ToolCallID]; ok && ev.Kind == "" {
				r.Calls[i].Asked = true
				r.Asked++
				changes(i, ev.Sandbox)
			}
			if err := api.approve(ctx, ev.RequestID); err != nil {
				return r, err
			}
		case protocol.EventApprovalDecision:
			if i, ok := index[ev.ToolCallID]; ok && ev.By == workflows.DecidedBySandbox {
				r.Calls[i].Contained = true
				r.Contained++
				changes(i, ev.Sandbox)
			}
		case protocol.EventToolResult:
			for _, tr := range ev.ToolResults {
				if i, ok := index[tr.ID]; ok {
					r.Calls[i].Result = tr.Status + ": " + firstLine(strings.TrimSpace(tr.Result))
					r.Calls[i].Took, last = ev.at.Sub(last), ev.at
				}
			}
		case protocol.EventError:
			return r, fmt.Errorf("turn %s: error event: %s", turnID, ev.Message)
		case protocol.EventFinish:
			r.Took = time.Since(start)
			if ev.Reason != protocol.FinishStop {
				return r, fmt.Errorf("turn %s finished with %s: %s", turnID, ev.Reason, ev.Message)
			}
			return r, nil
		}
	}
	return r, fmt.Errorf("turn %s: its stream ended before its finish: %w", turnID, ctx.Err())
}
