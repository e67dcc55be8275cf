package workflows

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// vet is what the gate's policy says of a call of tool, before a grant, the
// sandbox or a person: the arguments normalized for the tool when the
// settings describe it, the workspace's links followed (as turn.vetBatch
// does), then the rule, its cost limits and the tool's annotations
// (Settings.check). An error is why the arguments are refused: such a
// call never runs.
func (s Settings) vet(tool, arguments string) (check, error) {
	call := protocol.ToolCall{Name: tool, Arguments: arguments}
	if spec, ok := s.spec(tool); ok {
		args, _, err := activities.ResolveArguments(spec, s.WorkspaceRoots, arguments)
		if err != nil {
			return check{}, err
		}
		call.Arguments = args
	}
	return s.check(call, nil), nil
}

// ruleText names what decides the calls of tool under s: its rule, or the
// default, for a backtest's report.
func (s Settings) ruleText(tool string, required bool) string {
	switch rule := s.rule(tool); {
	case rule != nil:
		return ruleWords(rule)
	case required:
		return "default: " + tool + " is a protected tool"
	default:
		return "default: " + tool + " is not protected"
	}
}

// Kinds of a rule's examples (protocol.PolicyExampleFailure.Kind).
const (
	exampleAsk   = "ask"
	exampleAllow = "allow"
)

// exampleFailures checks the examples of s's rules with the gate's own
// check (vet), and answers those it does not decide as they say, and how
// many it checked. An example whose arguments the tool refuses, or on
// which the rule could not decide (and so fails closed), fails too.
func exampleFailures(live Settings) (failures []protocol.PolicyExampleFailure, n int) {
	for _, rule := range live.Rules {
		s := live
		if rule.Shadow {
			// A shadow rule's examples say what it would do once promoted.
			s.Rules = []Rule{rule}
			s.Rules[0].Shadow = false
		}
		for _, kind := range []string{exampleAsk, exampleAllow} {
			examples := rule.Examples.Ask
			if kind == exampleAllow {
				examples = rule.Examples.Allow
			}
			for _, args := range examples {
				n++
				c, err := s.vet(rule.Tool, args)
				problem := ""
				switch {
				case err != nil:
					problem = "the tool refuses its arguments: " + err.Error()
				case c.Problem != "":
					problem = c.Problem
				case kind == exampleAsk && !c.Required:
					problem = "the rule lets it run without a person"
				case kind == exampleAllow && c.Required:
					problem = "the rule asks a person about it"
				}
				if problem != "" {
					failures = append(failures, protocol.PolicyExampleFailure{Tool: rule.Tool, Kind: kind, Arguments: args, Problem: problem})
				}
			}
		}
	}
	return failures, n
}

// CheckExamples says which examples of settings' rules the rules do not
// decide as they say (with settings' tools and workspace, as the gate
// would), or nil when all pass: a worker whose policy has a failing
// example does not start.
func CheckExamples(settings Settings) error {
	failures, _ := exampleFailures(settings)
	var errs []error
	for _, f := range failures {
		errs = append(errs, fmt.Errorf("tool %s: example %s %s: %s", f.Tool, f.Kind, f.Arguments, f.Problem))
	}
	return errors.Join(errs...)
}

// LedgerReader reads the audit ledger's rows for a backtest:
// auditdb.Ledger. Each calls fn with every row of conversation (all, when
// "") asked at or after since (all, when zero).
type LedgerReader interface {
	Each(ctx context.Context, conversation string, since time.Time, fn func(audit.Record) error) error
}

// PolicyTester runs the activity of contract.PolicyTestWorkflow with the
// worker's own settings (its tools, their annotations, its workspace and
// required tools) and its ledger, which may be nil.
type PolicyTester struct {
	Settings Settings
	Ledger   LedgerReader
}

// PolicyTestActivity names PolicyTester.Test.
const PolicyTestActivity = "TestPolicy"

// policyTestOptions run PolicyTester.Test: it reads the whole window of
// the ledger, heartbeating as it goes.
var policyTestOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Minute,
	HeartbeatTimeout:    time.Minute,
	RetryPolicy: &temporal.RetryPolicy{
		MaximumAttempts:        3,
		NonRetryableErrorTypes: []string{contract.ErrBadPolicy, contract.ErrNoLedger},
	},
}

// RegisterPolicyTester registers contract.PolicyTestWorkflow and its
// activity with r.
func RegisterPolicyTester(r worker.Registry, p *PolicyTester) {
	r.RegisterWorkflowWithOptions(policyTest, workflow.RegisterOptions{Name: contract.PolicyTestWorkflow})
	r.RegisterActivityWithOptions(p.Test, activity.RegisterOptions{Name: PolicyTestActivity})
}

// policyTest is contract.PolicyTestWorkflow: the test runs in one
// activity, on a worker of the task queue, which compiles the candidate.
func policyTest(ctx workflow.Context, in contract.PolicyTestInput) (protocol.PolicyReport, error) {
	ctx = workflow.WithActivityOptions(ctx, policyTestOptions)
	var report protocol.PolicyReport
	err := workflow.ExecuteActivity(ctx, PolicyTestActivity, in).Get(ctx, &report)
	return report, err
}

// Test parses the candidate policy as the worker reads its own (a
// candidate that does not parse fails with contract.ErrBadPolicy, naming
// the rule), checks its examples, and for a backtest evaluates it on
// every ledger row of the window asked. The candidate replaces the
// worker's rules; everything else (TOLLGATE_REQUIRED_TOOLS, the tools'
// specs and annotations, the workspace) is the worker's.
func (p *PolicyTester) Test(ctx context.Context, in contract.PolicyTestInput) (protocol.PolicyReport, error) {
	rules, err := policy.Parse([]byte(in.Request.Policy))
	if err != nil {
		return protocol.PolicyReport{}, temporal.NewNonRetryableApplicationError("the policy: "+err.Error(), contract.ErrBadPolicy, nil)
	}
	s := p.Settings
	s.Rules = rules
	report := protocol.PolicyReport{ExampleFailures: []protocol.PolicyExampleFailure{}, Groups: []protocol.PolicyTestGroup{}, Calls: []protocol.PolicyTestCall{}}
	failures, n := exampleFailures(s)
	report.ExampleFailures, report.Examples = append(report.ExampleFailures, failures...), n
	if !in.Backtest {
		return report, nil
	}
	if p.Ledger == nil {
		return report, temporal.NewNonRetryableApplicationError("this worker keeps no audit ledger (TOLLGATE_AUDIT_DB is off): there are no calls to test the policy on", contract.ErrNoLedger, nil)
	}
	var since time.Time
	if in.Request.Since != nil {
		since = *in.Request.Since
	}
	b := newBacktest(s)
	heartbeat := activity.IsActivity(ctx)
	err = p.Ledger.Each(ctx, in.Request.ConversationID, since, func(r audit.Record) error {
		if r.Note() {
			return nil // a vote, an escalation step or an admin's change: no call
		}
		b.add(r)
		if heartbeat && b.rows%1000 == 0 {
			activity.RecordHeartbeat(ctx, b.rows)
		}
		return nil
	})
	if err != nil {
		return report, err
	}
	b.fill(&report)
	return report, nil
}

// maxListedArguments bounds the arguments a backtest's report shows of a
// call: the ledger has them whole.
const maxListedArguments = 500

// listedVerdicts are the verdicts whose calls a report lists, in its
// order: those a person declined first.
var listedVerdicts = []string{protocol.VerdictDeclinedWouldRun, protocol.VerdictWouldRun, protocol.VerdictDecidersChange, protocol.VerdictRefused}

// backtest evaluates a candidate's settings on ledger rows.
type backtest struct {
	settings Settings
	rows     int
	groups   map[[2]string]*protocol.PolicyTestGroup
	// listed are the calls listed so far, by verdict, and unlisted how
	// many more there were.
	listed   map[string][]protocol.PolicyTestCall
	unlisted int
}

func newBacktest(s Settings) *backtest {
	return &backtest{settings: s, groups: map[[2]string]*protocol.PolicyTestGroup{}, listed: map[string][]protocol.PolicyTestCall{}}
}

// add evaluates the call of row r as the gate would under the candidate.
func (b *backtest) add(r audit.Record) {
	b.rows++
	verdict, rule, why := b.settings.backtestRow(r)
	key := [2]string{r.Tool, rule}
	g := b.groups[key]
	if g == nil {
		g = &protocol.PolicyTestGroup{Tool: r.Tool, Rule: rule}
		b.groups[key] = g
	}
	g.Rows++
	switch verdict {
	case protocol.VerdictDeclinedWouldRun:
		g.DeclinedWouldRun++
	case protocol.VerdictWouldRun:
		g.WouldRun++
	case protocol.VerdictDecidersChange:
		g.DecidersChange++
	case protocol.VerdictRefused:
		g.Refused++
	default:
		g.WouldAsk++
		return
	}
	if len(b.listed[verdict]) >= protocol.MaxListedCalls {
		b.unlisted++
		return
	}
	b.listed[verdict] = append(b.listed[verdict], protocol.PolicyTestCall{
		Verdict: verdict, Rule: rule, Why: why,
		RequestID: r.ID, ConversationID: r.ConversationID, TurnID: r.TurnID, Tool: r.Tool,
		Arguments: text.Truncate(r.Arguments, maxListedArguments), RequestedAt: r.RequestedAt, Asked: r.Asked,
		Decision: r.Decision, DecidedBy: r.DecidedBy, Principal: r.Principal, Role: r.Role,
	})
}

// fill writes what b found into report: the groups in the order of their
// tool and rule, the calls by verdict, at most protocol.MaxListedCalls.
func (b *backtest) fill(report *protocol.PolicyReport) {
	report.Rows = b.rows
	for _, key := range slices.SortedFunc(maps.Keys(b.groups), func(x, y [2]string) int {
		return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1]))
	}) {
		report.Groups = append(report.Groups, *b.groups[key])
	}
	report.Unlisted = b.unlisted
	for _, v := range listedVerdicts {
		for _, c := range b.listed[v] {
			if len(report.Calls) == protocol.MaxListedCalls {
				report.Unlisted++
				continue
			}
			report.Calls = append(report.Calls, c)
		}
	}
}

// backtestRow is what s, a candidate's settings, does with the call of a
// ledger row: its verdict, the rule that decides it, and why (the
// deciders' change, or the arguments' refusal). The row's arguments are
// the call's as the gate normalized them; they are vetted again, as a
// new call would be.
func (s Settings) backtestRow(r audit.Record) (verdict, rule, why string) {
	c, err := s.vet(r.Tool, r.Arguments)
	if err != nil {
		return protocol.VerdictRefused, s.ruleText(r.Tool, true), err.Error()
	}
	rule = s.ruleText(r.Tool, c.Required)
	declined := r.Decision == protocol.DecisionDecline && (r.DecidedBy == DecidedByPerson || r.DecidedBy == DecidedByGrant)
	switch {
	case !c.Required && declined:
		return protocol.VerdictDeclinedWouldRun, rule, ""
	case !c.Required:
		return protocol.VerdictWouldRun, rule, ""
	case r.DecidedBy == DecidedByPerson:
		if err := s.rule(r.Tool).MayDecideFor(r.Principal, r.Role, nil, r.OnBehalfOf, r.Sender); err != nil {
			return protocol.VerdictDecidersChange, rule, err.Error()
		}
	}
	return protocol.VerdictWouldAsk, rule, ""
}
