package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// testRequestID is an approval request id of tollgate's form.
var testRequestID = contract.NewRequestID(testTurn, "s3cret")

func TestApprovalBodyThatIsNotValidIsRejectedWithWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"empty body", ``, "body is empty"},
		{"not JSON", `{"requestId": `, "not valid JSON"},
		{"syntax error", `{"requestId" "x"}`, "not valid JSON"},
		{"not an object", `"approve"`, "body must be a JSON object, not string"},
		{"two values", `{"requestId":"r","decision":"approve"}{}`, "more than one JSON value"},
		{"requestId missing", `{"decision":"approve"}`, "requestId is missing"},
		{"requestId not a string", `{"requestId": 7, "decision":"approve"}`, "requestId must be a string, not number"},
		{"decision missing", `{"requestId":"r"}`, `decision is missing: use "approve" or "decline"`},
		{"decision unknown", `{"requestId":"r","decision":"maybe"}`, `decision "maybe" is neither "approve" nor "decline"`},
		{"decision timeout is not a person's", `{"requestId":"r","decision":"timeout"}`, `decision "timeout" is neither`},
		{"arguments an array", `{"requestId":"r","decision":"approve","arguments":[1]}`, "arguments must be a JSON object (or a string holding one), not an array"},
		{"arguments a number", `{"requestId":"r","decision":"approve","arguments":3}`, "arguments must be a JSON object (or a string holding one), not a number"},
		{"arguments a string without an object", `{"requestId":"r","decision":"approve","arguments":"rm -rf"}`, "arguments must be a JSON object"},
		{"arguments a string with broken JSON", `{"requestId":"r","decision":"approve","arguments":"{\"a\":"}`, "arguments must be a JSON object"},
		{"too large", `{"requestId":"r","decision":"approve","reason":"` + strings.Repeat("x", maxBodyBytes) + `"}`, "body larger than the API's limit of 64 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ts := newTestServer(t, newFakeSource(), time.Hour) // no client: it must not be reached
			status, msg := postApproval(t, ts, tc.body)
			want := http.StatusBadRequest
			if tc.name == "too large" {
				want = http.StatusRequestEntityTooLarge
			}
			require.Equal(t, want, status)
			require.Contains(t, msg, tc.want)
		})
	}
}

func TestApprovalArgumentsAreTakenAsObjectOrAsStringHoldingOne(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"none", `{"requestId":"r","decision":"approve"}`, ""},
		{"null", `{"requestId":"r","decision":"approve","arguments":null}`, ""},
		{"empty string", `{"requestId":"r","decision":"approve","arguments":""}`, ""},
		{"object", `{"requestId":"r","decision":"approve","arguments":{"file_path": "a.txt", "n": [1, 2]}}`, `{"file_path":"a.txt","n":[1,2]}`},
		{"string holding an object", `{"requestId":"r","decision":"approve","arguments":" {\"command\": \"ls\"} "}`, `{"command":"ls"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := parseApproval(strings.NewReader(tc.body))
			require.NoError(t, err)
			require.Equal(t, tc.want, d.Arguments)
			require.Equal(t, "r", d.RequestID)
			require.Equal(t, protocol.DecisionApprove, d.Decision)
		})
	}
}

func TestApprovalForARequestIDTollgateNeverMadeIsNotAccepted(t *testing.T) {
	_, ts := newTestServer(t, newFakeSource(), time.Hour) // no client: it must not be reached
	for _, id := range []string{"r", "other-wf/apr-x", testTurn + "/apr-"} {
		resp := postApprovalResult(t, ts, `{"requestId":"`+id+`","decision":"approve"}`)
		require.Equal(t, `{"accepted":false,"reason":"unknown"}`, resp, id)
	}
}

func TestApprovalIsSentToTheWaitingTurnAsAnUpdate(t *testing.T) {
	c := mocks.NewClient(t)
	h := mocks.NewWorkflowUpdateHandle(t)
	decision := protocol.ApprovalDecision{RequestID: testRequestID, Decision: protocol.DecisionDecline, Reason: "no"}
	c.On("UpdateWorkflow", mock.Anything, client.UpdateWorkflowOptions{
		UpdateID:     decisionUpdateID(decision),
		WorkflowID:   testTurn,
		UpdateName:   contract.ApprovalUpdate,
		Args:         []any{decision},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	}).Return(h, nil)
	h.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		*args.Get(1).(*protocol.ApprovalResult) = protocol.ApprovalResult{Accepted: true}
	}).Return(nil)
	ts := newMockedServer(t, c)

	resp := postApprovalResult(t, ts, `{"requestId":"`+testRequestID+`","decision":"decline","reason":"no"}`)
	require.Equal(t, `{"accepted":true}`, resp)
}

func TestApprovalTheTurnDidNotTakeIsNotAccepted(t *testing.T) {
	for name, tc := range map[string]struct {
		updateErr, getErr error
		reason            string
		// status is the turn's, as Temporal describes it; describeErr
		// what it answers instead.
		status      enumspb.WorkflowExecutionStatus
		describeErr error
	}{
		"validator: decided": {getErr: temporal.NewApplicationError("approval request already decided", protocol.RejectDecided), reason: protocol.RejectDecided},
		"validator: expired": {getErr: temporal.NewApplicationError("approval request expired", protocol.RejectExpired), reason: protocol.RejectExpired},
		"validator: unknown": {getErr: temporal.NewApplicationError("unknown request", protocol.RejectUnknown), reason: protocol.RejectUnknown,
			status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
		"turn does not exist": {updateErr: serviceerror.NewNotFound("workflow not found"), reason: protocol.RejectUnknown,
			describeErr: serviceerror.NewNotFound("workflow not found")},
		"turn has ended": {updateErr: serviceerror.NewNotFound("workflow execution already completed"), reason: protocol.RejectUnknown,
			status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED},
		"turn was terminated": {updateErr: serviceerror.NewNotFound("workflow execution already completed"), reason: protocol.RejectUnknown,
			status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED},
	} {
		t.Run(name, func(t *testing.T) {
			c := mocks.NewClient(t)
			if tc.updateErr != nil {
				c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(nil, tc.updateErr)
			} else {
				h := mocks.NewWorkflowUpdateHandle(t)
				h.On("Get", mock.Anything, mock.Anything).Return(tc.getErr)
				c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(h, nil)
			}
			if tc.reason == protocol.RejectUnknown {
				// Unknown: the API looks whether the turn was ended for a
				// lost payload, to say so (it was not). It reads the close
				// event only of a terminated turn: Temporal holds a read of
				// a running one's until it closes (no mock is set for it).
				var d *client.WorkflowExecutionDescription
				if tc.describeErr == nil {
					d = &client.WorkflowExecutionDescription{RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
						Execution: &commonpb.WorkflowExecution{WorkflowId: testTurn, RunId: "run-1"}, Status: tc.status}}}
				}
				c.On("DescribeWorkflow", mock.Anything, testTurn, "").Return(d, tc.describeErr)
				if tc.status == enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
					it := mocks.NewHistoryEventIterator(t)
					it.On("HasNext").Return(true).Once()
					it.On("HasNext").Return(false)
					it.On("Next").Return(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
						Attributes: &historypb.HistoryEvent_WorkflowExecutionTerminatedEventAttributes{
							WorkflowExecutionTerminatedEventAttributes: &historypb.WorkflowExecutionTerminatedEventAttributes{Reason: "test"}}}, nil)
					c.On("GetWorkflowHistory", mock.Anything, testTurn, "run-1", false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT).Return(it)
				}
			}
			ts := newMockedServer(t, c)
			resp := postApprovalResult(t, ts, `{"requestId":"`+testRequestID+`","decision":"approve"}`)
			require.Equal(t, `{"accepted":false,"reason":"`+tc.reason+`"}`, resp)
		})
	}
}

func TestApprovalWhenTemporalIsUnreachableIs503(t *testing.T) {
	c := mocks.NewClient(t)
	c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(nil, serviceerror.NewUnavailable("connection refused"))
	ts := newMockedServer(t, c)
	status, msg := postApproval(t, ts, `{"requestId":"`+testRequestID+`","decision":"approve"}`)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, msg, "Temporal is unavailable (down, restarting or overloaded); try again in 1s")
}

func TestHealthzFollowsTemporal(t *testing.T) {
	up := mocks.NewClient(t)
	up.On("CheckHealth", mock.Anything, mock.Anything).Return(&client.CheckHealthResponse{}, nil)
	down := mocks.NewClient(t)
	down.On("CheckHealth", mock.Anything, mock.Anything).Return(nil, errors.New("connection refused"))

	for c, want := range map[*mocks.Client]int{up: http.StatusOK, down: http.StatusServiceUnavailable} {
		resp, err := http.Get(newMockedServer(t, c).URL + "/healthz")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode)
	}
}

// newMockedServer serves the API over a mocked Temporal client.
func newMockedServer(t *testing.T, c client.Client) *httptest.Server {
	t.Helper()
	return serveAPI(t, newServer(Options{Client: c}, newFakeSource(), fastSettings))
}

func postApproval(t *testing.T, ts *httptest.Server, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/chat/approval", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	return doJSON(t, req)
}

// postApprovalResult posts a decision that must be answered 200 and returns
// the body.
func postApprovalResult(t *testing.T, ts *httptest.Server, body string) string {
	t.Helper()
	resp, err := http.Post(ts.URL+"/chat/approval", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestApprovalsArePagedByWaitingTurns pauses four turns at their approvals
// and walks GET /approvals of an API without the ledger a turn a page:
// every request once, the last page without a token; a bad limit or token
// is refused naming it, and so is the principal filter, which needs the
// ledger.
func TestApprovalsArePagedByWaitingTurns(t *testing.T) {
	t.Parallel()
	st := newStack(t, withAPIWithoutLedger())
	want := map[string]bool{}
	for i := range 4 {
		_, msgs := st.chat(t, fmt.Sprintf(`{"query":"one","conversationId":"paged-%d"}`, i))
		seq := 0
		for _, e := range untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2) {
			if e.Type == protocol.EventApprovalRequest {
				want[e.RequestID] = true
			}
		}
	}
	// Visibility lists a turn once its attribute is indexed.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, st.approvalsPage(c, "").Approvals, 8)
	}, waitFor, 50*time.Millisecond)

	got := map[string]bool{}
	pages := 0
	for token := ""; ; pages++ {
		require.Less(t, pages, 10)
		q := "limit=1"
		if token != "" {
			q += "&pageToken=" + token
		}
		page := st.approvalsPage(t, q)
		if len(page.Approvals) == 0 {
			// Visibility gives a token after a full page: the page after
			// the last turn is empty, and has none.
			require.Empty(t, page.NextPageToken)
			require.Len(t, got, len(want), "an empty page only after the last turn")
			break
		}
		require.Len(t, page.Approvals, 2, "a turn a page, each with its two requests")
		for _, a := range page.Approvals {
			require.False(t, got[a.RequestID], "each request once")
			got[a.RequestID] = true
		}
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
	}
	require.Equal(t, want, got)
	require.GreaterOrEqual(t, pages, 3, "four turns, a page each")

	for query, msg := range map[string]string{
		"limit=0":              `limit \"0\" is not a whole number from 1 to 1000`,
		"pageToken=abc":        "pageToken needs the limit it was made with",
		"limit=1&pageToken=!!": "is not one GET /approvals made",
		"principal=ann":        "principal needs the audit ledger",
	} {
		resp, err := http.Get(st.api.URL + "/approvals?" + query)
		require.NoError(t, err)
		body := readAll(t, resp)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, query+": "+body)
		require.Contains(t, body, msg, query)
	}
}

type approvalsPageBody struct {
	Approvals     []protocol.PendingApproval `json:"approvals"`
	NextPageToken string                     `json:"nextPageToken"`
}

func (st *stack) approvalsPage(t require.TestingT, query string) approvalsPageBody {
	resp, err := http.Get(st.api.URL + "/approvals?" + query)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out approvalsPageBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}
