package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// The policy backtest stage (issue 31): a candidate policy evaluated on
// every row of a SQLite ledger of backtestRows rows, as the backtest's
// activity (workflows.PolicyTester.Test) does it on a worker, called in
// this process with the worker's default tools (no Temporal).
const (
	// backtestRows are the ledger's rows, written backtestBatch at a time.
	backtestRows  = 100_000
	backtestBatch = 1000
	// backtestRuns are the backtests timed, after an unmeasured one.
	backtestRuns = 5
	// backtestGoal is issue 31's: the backtest of a 100,000-row ledger
	// within 10 s.
	backtestGoal = 10 * time.Second
)

// backtestCandidate is the policy the stage tests: rules with CEL
// conditions on Bash and Write, Edit always asking, decided by admins.
const backtestCandidate = `tools:
  Bash:
    when: '!(args.command.startsWith("ls") || args.command.startsWith("git status") || args.command.startsWith("go test"))'
  Write:
    when: '!args.file_path.startsWith("notes/") && !args.file_path.endsWith(".md")'
  Edit:
    require: always
    deciders: ["role:admin"]
`

// backtestResult is what the backtest stage measured.
type backtestResult struct {
	// Err says why the stage did not finish; what it measured before
	// stays.
	Err string
	// Rows are the ledger's rows, Seed how long writing them took.
	Rows int
	Seed time.Duration
	// Took is the backtests' times, of Runs runs.
	Took summary
	Runs int
	// Report is the last run's report.
	Report protocol.PolicyReport
}

// backtestStage runs the backtest stage in dir; a failure is the result's
// Err.
func backtestStage(ctx context.Context, dir string) backtestResult {
	res, err := backtest(ctx, dir)
	if err != nil {
		res.Err = err.Error()
	}
	return res
}

// backtest seeds a ledger of backtestRows rows in dir and times the
// backtest of backtestCandidate over all of them.
func backtest(ctx context.Context, dir string) (backtestResult, error) {
	var res backtestResult
	ledger, err := auditdb.Open(ctx, filepath.Join(dir, "audit.db"))
	if err != nil {
		return res, err
	}
	defer ledger.Close()
	start := time.Now()
	if res.Rows, err = seedLedger(ctx, ledger, backtestRows); err != nil {
		return res, fmt.Errorf("seeding the ledger: %w", err)
	}
	res.Seed = time.Since(start)

	ws := filepath.Join(dir, "workspace")
	tester := &workflows.PolicyTester{Ledger: ledger, Settings: workflows.Settings{
		RequiredTools:  strings.Split(config.DefaultRequiredTools, ","),
		Tools:          (&activities.Tools{Workspace: ws}).Specs(),
		WorkspaceRoots: activities.WorkspaceRoots(ws, ws),
	}}
	in := contract.PolicyTestInput{Request: protocol.PolicyTestRequest{Policy: backtestCandidate}, Backtest: true}
	var took []time.Duration
	for i := range backtestRuns + 1 {
		start := time.Now()
		report, err := tester.Test(ctx, in)
		d := time.Since(start)
		if err != nil {
			return res, fmt.Errorf("the backtest: %w", err)
		}
		if report.Rows != res.Rows {
			return res, fmt.Errorf("the backtest read %d rows of the ledger's %d", report.Rows, res.Rows)
		}
		res.Report = report
		if i > 0 { // the first warms the page cache and the CEL programs
			took = append(took, d)
		}
	}
	res.Took, res.Runs = summarize(took), len(took)
	return res, nil
}

// seedLedger writes n rows to ledger, as a month of turns would leave
// them: Bash, Write and Edit calls of a few hundred conversations, most
// approved by a person, some declined, timed out or answered by a grant.
func seedLedger(ctx context.Context, ledger *auditdb.Ledger, n int) (int, error) {
	rng := rand.New(rand.NewPCG(31, 100_000))
	commands := []string{"ls -la", "git status", "go test ./...", "go build ./...", "rm -rf build", "make deploy", "sudo apt-get install -y jq", "curl -s https://example.com/api", "git push origin main", "cat /etc/passwd"}
	paths := []string{"notes/todo.md", "README.md", "src/main.go", "src/server.go", "internal/db/db.go", "docs/guide.md", "config/prod.yaml", ".github/workflows/ci.yml"}
	people := [][2]string{{"alice", config.RoleAdmin}, {"bob", config.RoleApprove}, {"carol", config.RoleApprove}}
	jsonOf := func(v map[string]string) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	end := time.Now().Add(-time.Minute)
	batch := make([]audit.Record, 0, backtestBatch)
	for i := range n {
		conv := fmt.Sprintf("conv-%03d", i%400)
		turn := fmt.Sprintf("%s-turn-%d", conv, i/2000)
		r := audit.Record{
			ID: fmt.Sprintf("req-%06d", i), Stage: audit.StageEnded,
			ConversationID: conv, TurnID: turn, WorkflowID: "turn-" + turn, ToolCallID: fmt.Sprintf("call-%d", i),
			Sender:      people[rng.IntN(len(people))][0],
			RequestedAt: end.Add(-time.Duration(n-i) * 26 * time.Second), // a month
			Outcome:     "ok", Result: "done",
		}
		switch k := rng.IntN(10); {
		case k < 5:
			r.Tool, r.Arguments = protocol.ToolBash, jsonOf(map[string]string{"command": commands[rng.IntN(len(commands))]})
		case k < 8:
			r.Tool, r.Arguments = protocol.ToolWrite, jsonOf(map[string]string{"file_path": paths[rng.IntN(len(paths))], "content": strings.Repeat("line of the file\n", 1+rng.IntN(40))})
		default:
			r.Tool, r.Arguments = protocol.ToolEdit, jsonOf(map[string]string{"file_path": paths[rng.IntN(len(paths))], "old_string": "func old()", "new_string": "func new()"})
		}
		r.Asked = "default: " + r.Tool + " is a protected tool"
		decided := r.RequestedAt.Add(time.Duration(5+rng.IntN(300)) * time.Second)
		r.DecidedAt, r.FinishedAt = &decided, &decided
		switch k := rng.IntN(20); {
		case k < 14:
			p := people[rng.IntN(len(people))]
			r.Decision, r.DecidedBy, r.Principal, r.Role = protocol.DecisionApprove, workflows.DecidedByPerson, p[0], p[1]
		case k < 17:
			p := people[rng.IntN(len(people))]
			r.Decision, r.DecidedBy, r.Principal, r.Role, r.Reason = protocol.DecisionDecline, workflows.DecidedByPerson, p[0], p[1], "not now"
			r.Outcome, r.Result = "not_run", "declined"
		case k < 18:
			r.Decision, r.DecidedBy, r.Outcome, r.Result = protocol.DecisionTimeout, workflows.DecidedByTimer, "not_run", "timed out"
		default:
			r.Decision, r.DecidedBy, r.Grant = protocol.DecisionApprove, workflows.DecidedByGrant, "grant-"+conv
		}
		batch = append(batch, r)
		if len(batch) == backtestBatch || i == n-1 {
			if err := ledger.Write(ctx, batch); err != nil {
				return i + 1 - len(batch), err
			}
			batch = batch[:0]
		}
	}
	return n, nil
}

// backtestMarkdown is the section of the backtest stage.
func (r *report) backtestMarkdown() string {
	bt := r.Backtest
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("### The policy backtest")
	p("")
	p("A SQLite ledger of %s rows (Bash, Write and Edit calls over a month of turns in 400 conversations,", thousands(backtestRows))
	p("most approved by a person, some declined, timed out or answered by a grant), written %s rows a", thousands(backtestBatch))
	p("transaction; then the backtest's activity (`PolicyTester.Test`, as `POST /policy/test` runs it on")
	p("a worker) in the benchmark's process with the worker's default tools, over the whole ledger, with a")
	p("candidate whose rules have CEL conditions on Bash and Write and deciders on Edit. The runs follow an")
	p("unmeasured one; percentiles are nearest-rank.")
	if bt.Err != "" {
		p("")
		p("**The stage did not finish:** %s", firstLine(bt.Err))
		p("What it measured before that is below.")
	}
	p("")
	p("| rows | seeding the ledger | backtest, p50 / max | rows a second, p50 | goal | runs |")
	p("|---:|---:|---:|---:|---|---:|")
	if bt.Runs > 0 {
		p("| %s | %s | %s / %s | %s | ≤%s: %s | %d |", thousands(bt.Rows), span(bt.Seed), span(bt.Took.p50), span(bt.Took.max),
			thousands(int(float64(bt.Rows)/bt.Took.p50.Seconds())), span(backtestGoal), goalCell(bt.Took.p50.Seconds(), bt.Took.p50 <= backtestGoal), bt.Runs)
	}
	p("")
	if rep := bt.Report; rep.Rows > 0 {
		var would, declined, ask, deciders, refused int
		for _, g := range rep.Groups {
			would, declined, ask, deciders, refused = would+g.WouldRun, declined+g.DeclinedWouldRun, ask+g.WouldAsk, deciders+g.DecidersChange, refused+g.Refused
		}
		p("The candidate would ask about %s rows, let %s run unasked (%s of them declined by a person), change", thousands(ask), thousands(would+declined), thousands(declined))
		p("who decides %s and refuse %s.", thousands(deciders), thousands(refused))
		p("")
	}
	return b.String()
}

// backtestVerdict is the stage's sentence in what the numbers mean.
func (r *report) backtestVerdict() string {
	bt := r.Backtest
	switch {
	case bt.Runs == 0 && bt.Err != "":
		return fmt.Sprintf("The policy backtest stage did not finish (%s). ", firstLine(bt.Err))
	case bt.Runs == 0:
		return ""
	}
	return fmt.Sprintf("The backtest of a candidate policy over a %s-row SQLite ledger took %s at p50 (%s rows a second; goal at most %s: %s). ",
		thousands(bt.Rows), span(bt.Took.p50), thousands(int(float64(bt.Rows)/bt.Took.p50.Seconds())), span(backtestGoal), metGoal(bt.Took.p50 <= backtestGoal))
}
