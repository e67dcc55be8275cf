package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/protocol"
)

// policyTimeout bounds a policy test: the API gives up on the worker after
// two minutes.
const policyTimeout = 3 * time.Minute

// policyOptions are what `tollgate policy` was asked.
type policyOptions struct {
	// Backtest is true for `policy test`, false for `policy check`.
	Backtest       bool
	File           string
	Since          time.Time
	ConversationID string
}

// testPolicy posts a candidate policy to POST /policy/test or
// /policy/check.
func (c *apiClient) testPolicy(ctx context.Context, backtest bool, req protocol.PolicyTestRequest) (protocol.PolicyReport, error) {
	ctx, cancel := context.WithTimeout(ctx, policyTimeout)
	defer cancel()
	path := "/policy/check"
	if backtest {
		path = "/policy/test"
	}
	var report protocol.PolicyReport
	err := c.postJSON(ctx, path, req, &report)
	return report, err
}

// policy tests the policy file opts names through the API (a worker
// compiles it) and prints the report. It reports whether the policy
// passed: every example holds and, for a backtest, no call a person
// declined would now run without one.
func policy(ctx context.Context, api *apiClient, opts policyOptions, out io.Writer) (bool, error) {
	text, err := os.ReadFile(opts.File)
	if err != nil {
		return false, err
	}
	req := protocol.PolicyTestRequest{Policy: string(text), ConversationID: opts.ConversationID}
	if !opts.Since.IsZero() {
		req.Since = &opts.Since
	}
	report, err := api.testPolicy(ctx, opts.Backtest, req)
	if err != nil {
		return false, err
	}
	printExamples(out, opts.File, report)
	if !opts.Backtest {
		return len(report.ExampleFailures) == 0, nil
	}
	printBacktest(out, opts, report)
	declined := 0
	for _, g := range report.Groups {
		declined += g.DeclinedWouldRun
	}
	return len(report.ExampleFailures) == 0 && declined == 0, nil
}

// printExamples says how the rules' examples fared.
func printExamples(out io.Writer, file string, report protocol.PolicyReport) {
	switch {
	case report.Examples == 0:
		fmt.Fprintf(out, "%s: no examples\n", file)
	case len(report.ExampleFailures) == 0:
		fmt.Fprintf(out, "%s: %d examples, all hold\n", file, report.Examples)
	default:
		fmt.Fprintf(out, "%s: %d of %d examples fail:\n", file, len(report.ExampleFailures), report.Examples)
		for _, f := range report.ExampleFailures {
			fmt.Fprintf(out, "  tool %s, %s %s: %s\n", f.Tool, f.Kind, f.Arguments, f.Problem)
		}
	}
}

// verdictHeadings head the lists of calls, in the report's order.
var verdictHeadings = map[string]string{
	protocol.VerdictDeclinedWouldRun: "DECLINED by a person, and would now run without one",
	protocol.VerdictWouldRun:         "Would now run without a person",
	protocol.VerdictDecidersChange:   "Still asks, but whoever decided may no longer",
	protocol.VerdictRefused:          "Arguments now refused: would not run",
}

// printBacktest prints the counts by rule and tool, then the calls.
func printBacktest(out io.Writer, opts policyOptions, report protocol.PolicyReport) {
	window := "the whole ledger"
	if !opts.Since.IsZero() {
		window = "rows since " + opts.Since.Format(time.RFC3339)
	}
	if opts.ConversationID != "" {
		window += ", conversation " + opts.ConversationID
	}
	fmt.Fprintf(out, "\n%d calls that asked (%s):\n\n", report.Rows, window)
	if len(report.Groups) > 0 {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TOOL\tRULE\tCALLS\tDECLINED→RUN\t→RUN\tDECIDERS\tASK\tREFUSED")
		for _, g := range report.Groups {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", g.Tool, g.Rule, g.Rows, g.DeclinedWouldRun, g.WouldRun, g.DecidersChange, g.WouldAsk, g.Refused)
		}
		_ = tw.Flush()
	}
	last := ""
	for _, c := range report.Calls {
		if c.Verdict != last {
			fmt.Fprintf(out, "\n%s:\n", verdictHeadings[c.Verdict])
			last = c.Verdict
		}
		who := c.Decision
		if c.Principal != "" {
			who += " by " + c.Principal
		} else if c.DecidedBy != "" {
			who += " by " + c.DecidedBy
		}
		fmt.Fprintf(out, "  %s  %s %s  (%s; %s)\n", c.RequestedAt.Local().Format("2006-01-02 15:04"), c.Tool, c.Arguments, strings.TrimSpace(who), c.RequestID)
		if c.Why != "" {
			fmt.Fprintf(out, "      %s\n", c.Why)
		}
	}
	if report.Unlisted > 0 {
		fmt.Fprintf(out, "\n… and %d more calls not listed\n", report.Unlisted)
	}
	fmt.Fprintln(out, "\nThe ledger has only calls that asked: what a stricter policy would newly ask about is not here (test it with examples).")
}

// parseSince reads --since: a number of days (7d), a Go duration (36h),
// both before now, or an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q is not a number of days (7d), a duration (36h) or an RFC 3339 time", v)
}
