package workflows_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/workflows"
)

// TestAwaitSearchAttributesNamesThemWhenTheyCannotBeSet: on a namespace
// without tollgate's attributes the probe's workflow task fails, and the
// wait ends at its deadline with the server's reason; once they are
// registered, it returns.
func TestAwaitSearchAttributesNamesThemWhenTheyCannotBeSet(t *testing.T) {
	srv, c := onDevServer(t)
	log := slog.New(slog.DiscardHandler)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := workflows.AwaitSearchAttributes(ctx, c, srv.Namespace, log)
	require.ErrorContains(t, err, "TollgateConversationId, TollgatePendingApprovals, TollgateStatus of namespace "+srv.Namespace+" not usable")
	require.ErrorContains(t, err, "its workflow task failed: BadSearchAttributes: Namespace "+srv.Namespace+" has no mapping defined for search attribute")

	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, workflows.EnsureSearchAttributes(ctx, c, srv.Namespace, log))
	require.NoError(t, workflows.AwaitSearchAttributes(ctx, c, srv.Namespace, log))
}
