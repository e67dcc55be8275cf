package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// listArgumentsWidth is how much of a call's arguments the table shows.
const listArgumentsWidth = 48

// approvalsOptions are the flags of `tollgate approvals`.
type approvalsOptions struct {
	ConversationID string
	Tool           string
	Decide         bool
}

// approvals lists the pending approvals and, with Decide, asks about each.
func approvals(ctx context.Context, api *apiClient, opts approvalsOptions, in io.Reader, out io.Writer) error {
	list, err := api.pending(ctx, opts.ConversationID, opts.Tool)
	if err != nil {
		return err
	}
	now := time.Now()
	writeApprovals(out, list, now)
	if !opts.Decide || len(list) == 0 {
		return nil
	}
	a := newAsker(in, out)
	for _, p := range list {
		req := request{RequestID: p.RequestID, ToolName: p.ToolName, Arguments: p.Arguments, ExpiresAt: p.ExpiresAt, Preview: p.Preview, Sandboxed: p.Sandboxed}
		if _, err := askAndDecide(ctx, a, api, req); err != nil {
			return err
		}
	}
	return nil
}

// writeApprovals prints pending approvals as a table, in the API's order:
// soonest to expire first. When a rule names who may decide one of them,
// a last column says who may, and where a quorum's votes stand.
func writeApprovals(out io.Writer, list []protocol.PendingApproval, now time.Time) {
	if len(list) == 0 {
		fmt.Fprintln(out, "no approvals are waiting")
		return
	}
	who := slices.ContainsFunc(list, func(p protocol.PendingApproval) bool { return standing(p) != "" })
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	head := "AGE\tEXPIRES\tTOOL\tARGUMENTS\tREQUEST"
	if who {
		head += "\tWHO MAY DECIDE"
	}
	fmt.Fprintln(tw, head)
	for _, p := range list {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s",
			age(now.Sub(p.RequestedAt)), untilExpiry(p.ExpiresAt.Sub(now)), p.ToolName,
			text.Truncate(compact(p.Arguments), listArgumentsWidth), p.RequestID)
		if who {
			line += "\t" + standing(p)
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
}

// standing says who may decide p now and, for a rule with a quorum, where
// its votes stand, in the words of the inbox page: "votes: 1 of 2
// approvals · alice approved · may still vote: bob, carol", or "deciders:
// alice, bob". Empty when anyone may.
func standing(p protocol.PendingApproval) string {
	var parts []string
	if v := p.Votes; v != nil {
		parts = append(parts, fmt.Sprintf("votes: %d of %d approvals", v.Approvals(), v.Quorum))
		if v.Declines > 1 || v.Declined() > 0 {
			parts = append(parts, fmt.Sprintf("%d of %d declines", v.Declined(), v.Declines))
		}
		var cast []string
		for _, c := range v.Cast {
			cast = append(cast, c.By+" "+pastTense(c.Decision))
		}
		if len(cast) > 0 {
			parts = append(parts, strings.Join(cast, ", "))
		}
		if len(v.MayVote) > 0 {
			parts = append(parts, "may still vote: "+strings.Join(v.MayVote, ", "))
		}
	} else if len(p.Deciders) > 0 {
		parts = append(parts, "deciders: "+strings.Join(p.Deciders, ", "))
	}
	return strings.Join(parts, " · ")
}

// age prints a duration the way a person reads it at a glance.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

func untilExpiry(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return "in " + age(d)
}
