package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/mocks"
)

// TestAMessageWhoseWorkflowTaskFailedIs503WithRetryAfter: on a fresh
// cluster whose history service does not know the search attributes yet,
// the workflow task that takes a message fails, and the server answers the
// message's Update with WorkflowNotReady (Temporal's words below): the
// message was not taken, and the client should send it again.
func TestAMessageWhoseWorkflowTaskFailedIs503WithRetryAfter(t *testing.T) {
	c := mocks.NewClient(t)
	c.On("NewWithStartWorkflowOperation", mock.Anything, mock.Anything, mock.Anything).Return(nil)
	h := mocks.NewWorkflowUpdateHandle(t)
	h.On("Get", mock.Anything, mock.Anything).Return(
		serviceerror.NewWorkflowNotReady("Unable to perform workflow execution update due to unexpected workflow task failure."))
	c.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).Return(h, nil)
	api := newMockedServer(t, c)

	resp, body := send(t, http.MethodPost, api.URL+"/chat/stream", "", `{"query":"hello","conversationId":"fresh-1"}`)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.Equal(t, retryAfter, resp.Header.Get("Retry-After"))
	require.Contains(t, body, "send it again")
}
