package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

func TestPendingApprovalIsListedByASecondAPIInstance(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	_, msgs := st.chat(t, `{"query":"hello","conversationId":"inbox-2"}`)
	seq := 0
	var asked []string
	for _, e := range ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2), protocol.EventApprovalRequest) {
		asked = append(asked, e.RequestID)
	}
	require.Len(t, asked, 2)

	// The second instance has never seen this turn: it reads Temporal.
	other := st.newAPI(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var listed []string
		for _, a := range approvalsAt(c, other.URL, "?conversationId=inbox-2") {
			listed = append(listed, a.RequestID)
		}
		require.ElementsMatch(c, asked, listed)
	}, waitFor, 20*time.Millisecond)
}
