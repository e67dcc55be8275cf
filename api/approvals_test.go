package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/workflows"
)

func TestPendingApprovalIsListedByASecondAPIInstance(t *testing.T) {
	st := newStack(t)
	_, msgs := st.chat(t, `{"query":"hello","conversationId":"inbox-2"}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, workflows.EventHeartbeat, 1)
	var asked []string
	for _, e := range events {
		if e.Type == workflows.EventApprovalRequest {
			asked = append(asked, e.RequestID)
		}
	}

	// The second instance has never seen this turn: it reads Temporal.
	other := st.newAPI(t)
	var listed []string
	require.Eventually(t, func() bool {
		listed = nil
		for _, a := range approvalsAt(t, other.URL, "?conversationId=inbox-2") {
			listed = append(listed, a.RequestID)
		}
		return len(listed) == len(asked)
	}, waitFor, 20*time.Millisecond)
	require.ElementsMatch(t, asked, listed)
}
