package main

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/mocks"

	"github.com/tollgate/tollgate/workflows"
)

func TestMetricsCountDecisionsByOutcomeAndRequestsByRoute(t *testing.T) {
	c := mocks.NewClient(t)
	h := mocks.NewWorkflowUpdateHandle(t)
	h.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		*args.Get(1).(*workflows.ApprovalResult) = workflows.ApprovalResult{Accepted: true}
	}).Return(nil).Once()
	c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(h, nil).Once()
	c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(nil, serviceerror.NewUnavailable("connection refused")).Once()
	ts := newMockedServer(t, c)

	require.Equal(t, `{"accepted":true}`, postApprovalResult(t, ts, `{"requestId":"`+testRequestID+`","decision":"approve"}`))
	require.Equal(t, `{"accepted":false,"reason":"unknown"}`, postApprovalResult(t, ts, `{"requestId":"not-ours","decision":"decline"}`))
	status, _ := postApproval(t, ts, `{"requestId":"`+testRequestID+`","decision":"approve"}`)
	require.Equal(t, http.StatusServiceUnavailable, status)
	status, _ = postApproval(t, ts, `{"decision":"approve"}`)
	require.Equal(t, http.StatusBadRequest, status, "a body that is not a decision is not counted as one")
	resp, err := http.Get(ts.URL + "/chat/turns/" + testTurn + "x/nothing")
	require.NoError(t, err)
	resp.Body.Close()

	resp, err = http.Get(ts.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	text := string(body)

	require.Contains(t, text, "# TYPE tollgate_api_approval_decisions_total counter\n"+
		`tollgate_api_approval_decisions_total{decision="approve",outcome="accepted"} 1`+"\n"+
		`tollgate_api_approval_decisions_total{decision="approve",outcome="error"} 1`+"\n"+
		`tollgate_api_approval_decisions_total{decision="decline",outcome="rejected"} 1`+"\n")
	require.Contains(t, text, "# TYPE tollgate_api_requests_total counter\n")
	require.Contains(t, text, `tollgate_api_requests_total{method="POST",route="/chat/approval",status="200"} 2`+"\n")
	require.Contains(t, text, `tollgate_api_requests_total{method="POST",route="/chat/approval",status="400"} 1`+"\n")
	require.Contains(t, text, `tollgate_api_requests_total{method="POST",route="/chat/approval",status="503"} 1`+"\n")
	require.Contains(t, text, `tollgate_api_requests_total{method="GET",route="unmatched",status="404"} 1`+"\n",
		"paths no route matches share one series")
	require.Regexp(t, `(?m)^tollgate_api_open_streams 0$`, text, "the existing metrics keep their names")
}
