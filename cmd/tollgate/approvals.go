package main

import (
	"context"
	"fmt"
	"io"
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
// soonest to expire first.
func writeApprovals(out io.Writer, list []protocol.PendingApproval, now time.Time) {
	if len(list) == 0 {
		fmt.Fprintln(out, "no approvals are waiting")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGE\tEXPIRES\tTOOL\tARGUMENTS\tREQUEST")
	for _, p := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n",
			age(now.Sub(p.RequestedAt)), untilExpiry(p.ExpiresAt.Sub(now)), p.ToolName,
			text.Truncate(compact(p.Arguments), listArgumentsWidth), p.RequestID)
	}
	_ = tw.Flush()
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
