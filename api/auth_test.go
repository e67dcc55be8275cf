package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/mocks"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// Bearer tokens of the tests' API, and the principals they name.
const (
	aliceToken = "alice-0123456789abcdef"
	bobToken   = "bob-fedcba9876543210"
)

var testTokens = []config.APIToken{
	{Token: aliceToken, Principal: "alice", Roles: config.DefaultRoles},
	{Token: bobToken, Principal: "bob", Roles: config.DefaultRoles},
}

// newAuthedServer serves the API with testTokens over c (nil when the test
// never reaches Temporal) and a fake event source.
func newAuthedServer(t *testing.T, c client.Client) *httptest.Server {
	t.Helper()
	return serveAPI(t, newServer(Options{Client: c, Tokens: testTokens}, newFakeSource(), fastSettings))
}

// send sends a request with body (none when "") and the Authorization
// header (none when ""), and returns the response, its body read.
func send(t *testing.T, method, url, authorization, body string) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func TestWithTokensEveryEndpointButHealthzAndThePagesAsksForOne(t *testing.T) {
	ts := newAuthedServer(t, nil) // no Temporal: nothing may reach it
	for _, route := range []string{
		"POST /chat/stream",
		"GET /chat/turns/" + testTurn + "/events",
		"POST /chat/approval",
		"POST /chat/tool-result",
		"GET /approvals",
		"GET /conversations/c1/grants",
		"DELETE /conversations/c1/grants/grant-1",
		"GET /metrics",
		"GET /no-such-endpoint",
		"POST /healthz",
	} {
		t.Run(route, func(t *testing.T) {
			method, path, _ := strings.Cut(route, " ")
			resp, body := send(t, method, ts.URL+path, "", `{"requestId":"x","decision":"approve"}`)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
			require.Equal(t, `Bearer realm="tollgate"`, resp.Header.Get("WWW-Authenticate"))
			require.Contains(t, resp.Header.Get("Content-Type"), "application/json")
			require.JSONEq(t, `{"error":"authorization required: send the header Authorization: Bearer <token>"}`, body)
		})
	}
}

func TestWithTokensHealthzAndTheConsolePagesNeedNone(t *testing.T) {
	c := mocks.NewClient(t)
	c.On("CheckHealth", mock.Anything, mock.Anything).Return(&client.CheckHealthResponse{}, nil)
	ts := newAuthedServer(t, c)
	for _, path := range []string{"/healthz", "/", "/inbox", "/web/common.js", "/web/style.css"} {
		resp, body := send(t, http.MethodGet, ts.URL+path, "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	}
	// A page served without a token holds no data: only its own files.
	_, page := send(t, http.MethodGet, ts.URL+"/inbox", "", "")
	require.Contains(t, page, `id="api-token"`, "the page has a field for the token")
}

func TestWrongCredentialsAreRefusedSayingWhatIsWrongWithoutRepeatingThem(t *testing.T) {
	ts := newAuthedServer(t, nil)
	for _, tc := range []struct {
		name, authorization, want, challenge string
	}{
		{"another scheme", "Basic " + aliceToken, "the Authorization header is not a bearer token: send Authorization: Bearer <token>", `Bearer realm="tollgate"`},
		{"no token", "Bearer ", "the Authorization header holds no token after Bearer", `Bearer realm="tollgate"`},
		{"unknown token", "Bearer not-" + aliceToken, "the bearer token is not valid", `Bearer realm="tollgate", error="invalid_token"`},
		{"a prefix of a token", "Bearer " + aliceToken[:len(aliceToken)-1], "the bearer token is not valid", `Bearer realm="tollgate", error="invalid_token"`},
		{"a token with more", "Bearer " + aliceToken + "0", "the bearer token is not valid", `Bearer realm="tollgate", error="invalid_token"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := send(t, http.MethodGet, ts.URL+"/approvals", tc.authorization, "")
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			require.Equal(t, tc.challenge, resp.Header.Get("WWW-Authenticate"))
			var out map[string]string
			require.NoError(t, json.Unmarshal([]byte(body), &out))
			require.Equal(t, tc.want, out["error"])
			require.NotContains(t, body, aliceToken[:10], "the answer never repeats a token")
		})
	}
}

func TestAKnownTokenIsLetThrough(t *testing.T) {
	ts := newAuthedServer(t, nil)
	for _, authorization := range []string{"Bearer " + aliceToken, "bearer " + bobToken, "Bearer   " + aliceToken + " "} {
		resp, body := send(t, http.MethodGet, ts.URL+"/metrics", authorization, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%q: %s", authorization, body)
		// Past the token, the handler answers as it would without auth.
		resp, body = send(t, http.MethodPost, ts.URL+"/chat/approval", authorization, `{"decision":"approve"}`)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, body, "requestId is missing")
	}
}

func TestTheDecisionsPrincipalIsTheTokensNeverTheBodys(t *testing.T) {
	for _, tc := range []struct {
		name          string
		tokens        bool
		authorization string
		want          string
	}{
		{"bob's token", true, "Bearer " + bobToken, "bob"},
		{"no tokens configured", false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mocks.NewClient(t)
			h := mocks.NewWorkflowUpdateHandle(t)
			var sent protocol.ApprovalDecision
			c.On("UpdateWorkflow", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
				sent = args.Get(1).(client.UpdateWorkflowOptions).Args[0].(protocol.ApprovalDecision)
			}).Return(h, nil)
			h.On("Get", mock.Anything, mock.Anything).Return(nil)
			var ts *httptest.Server
			if tc.tokens {
				ts = newAuthedServer(t, c)
			} else {
				ts = newMockedServer(t, c)
			}

			resp, body := send(t, http.MethodPost, ts.URL+"/chat/approval", tc.authorization,
				`{"requestId":"`+testRequestID+`","decision":"approve","principal":"alice","Principal":"root"}`)

			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.Equal(t, tc.want, sent.Principal, "a principal in the body is ignored")
		})
	}
}

// newAuthedAPI starts another API instance on the stack's Temporal that
// asks for testTokens.
func (st *stack) newAuthedAPI(t *testing.T) *httptest.Server {
	t.Helper()
	o := st.apiOptions()
	o.Tokens = testTokens
	return serveAPI(t, NewServer(o))
}

// chatAs posts a message with token and returns the turn id and stream.
func chatAs(t *testing.T, api *httptest.Server, token, body string) (string, <-chan sseMessage) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, api.URL+"/chat/stream", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return resp.Header.Get(protocol.HeaderTurnID), readSSE(resp.Body)
}

// requestsByTool maps each tool to the approval_request events for it.
func requestsByTool(events []protocol.Event) map[string]protocol.Event {
	out := map[string]protocol.Event{}
	for _, e := range events {
		if e.Type == protocol.EventApprovalRequest {
			out[e.ToolName] = e
		}
	}
	return out
}

func TestDecisionRecordsWhoDecidedInTheEventAndTheWorkflowHistory(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	api := st.newAuthedAPI(t)
	turnID, msgs := chatAs(t, api, bobToken, `{"query":"tidy up","conversationId":"auth-1"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	write, bash := asked[protocol.ToolWrite], asked[protocol.ToolBash]

	// Without a token nothing is decided, not even with a genuine id.
	resp, body := send(t, http.MethodPost, api.URL+"/chat/approval", "", `{"requestId":"`+write.RequestID+`","decision":"approve"}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
	resp, body = send(t, http.MethodGet, api.URL+"/chat/turns/"+turnID+"/events", "Bearer wrong-token-0123456789", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)

	// alice approves the Write, claiming in the body to be someone else; the
	// Bash is declined by signal, as with the Temporal CLI.
	resp, body = send(t, http.MethodPost, api.URL+"/chat/approval", "Bearer "+aliceToken,
		`{"requestId":"`+write.RequestID+`","decision":"approve","principal":"mallory"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"accepted":true}`, body)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, st.client.SignalWorkflow(ctx, turnID, "", contract.ApprovalSignal,
		protocol.ApprovalDecision{RequestID: bash.RequestID, Decision: protocol.DecisionDecline}))

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	by := map[string]string{}
	for _, e := range rest {
		if e.Type == protocol.EventApprovalDecision {
			by[e.ToolCallID] = e.By
		}
	}
	require.Equal(t, map[string]string{write.ToolCallID: "alice", bash.ToolCallID: protocol.PrincipalTemporal}, by)

	// The history holds who decided: the Update's input, as the API sent it.
	var principals []string
	iter := st.client.GetWorkflowHistory(ctx, turnID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		if a := e.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil {
			var d protocol.ApprovalDecision
			require.NoError(t, converter.GetDefaultDataConverter().FromPayload(a.GetAcceptedRequest().GetInput().GetArgs().GetPayloads()[0], &d))
			principals = append(principals, d.Principal)
		}
	}
	require.Equal(t, []string{"alice"}, principals)
}

func TestConsoleAndInboxSendTheTokenTypedIntoThem(t *testing.T) {
	st := newStack(t)
	api := st.newAuthedAPI(t)
	b := newBrowser(t)
	b.do(chromedp.Navigate(api.URL + "/"))

	// Without a token the API's answer says what is missing.
	sendFromConsole(b, "tidy up")
	b.waitUntil(`document.querySelector('[data-testid="composer-error"]').textContent.includes('authorization required')`)

	b.do(
		chromedp.SendKeys(chromedp.CSS(`[data-testid="api-token"]`), aliceToken),
		chromedp.Blur(chromedp.CSS(`[data-testid="api-token"]`)),
		chromedp.Click(chromedp.CSS(`[data-testid="send"]`)),
	)
	turn := nthTurn(1)
	b.do(chromedp.WaitVisible(chromedp.CSS(callIn(turn, "Bash") + ` [data-testid="approve"]`)))
	b.do(chromedp.Click(chromedp.CSS(callIn(turn, "Write") + ` [data-testid="approve"]`)))
	b.waitUntil(fmt.Sprintf(`document.querySelector(%s).textContent.startsWith('approved')`,
		jsQuote(callIn(turn, "Write")+` [data-testid="approval-status"]`)))

	// The inbox, in the same browser, has the token already and decides the
	// Bash.
	b.do(chromedp.Navigate(api.URL + "/inbox"))
	b.waitUntil(count(`[data-testid="approval-actions"]`) + ` === 1`)
	b.do(chromedp.Click(chromedp.CSS(`[data-testid="approval-actions"] [data-testid="decline"]`)))
	b.waitUntil(`document.querySelector('[data-testid="inbox-empty"]') && !document.querySelector('[data-testid="inbox-empty"]').hidden`)

	conv := eval[string](b, `JSON.parse(localStorage.getItem('tollgate.console.v1')).conversationId`)
	turnID := contract.TurnWorkflowID(conv, 1)
	_, msgs, _ := openStream(t, eventsURL(api, turnID)+"?after=0", http.Header{"Authorization": {"Bearer " + bobToken}})
	var by []string
	for _, e := range ofType(streamToEnd(t, msgs), protocol.EventApprovalDecision) {
		by = append(by, e.Decision+" by "+e.By)
	}
	require.ElementsMatch(t, []string{"approve by alice", "decline by alice"}, by)
}
