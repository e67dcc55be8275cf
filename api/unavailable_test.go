package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/protocol"
)

// answer is one HTTP answer of the API: its status, Retry-After and the
// error it gave, if any.
type answer struct {
	status     int
	retryAfter string
	error      string
}

// ask sends a request to the API and reads its answer; a stream that
// opened is left after its headers.
func ask(t *testing.T, method, url, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		b, _ := io.ReadAll(resp.Body)
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		a.error = e.Error
	}
	return a
}

// TestTemporalUnavailableAnswers503WithRetryAfterNamingIt pauses the real
// dev server (SIGSTOP: connections stay open, nothing answers) under a
// real API and worker, and asks the API for every kind of Temporal call it
// makes: a turn started in a new conversation and in one that runs, a
// decision (an Update), queries, the description of a conversation's turns
// and the opening of a stream this API process does not stream yet. Each
// answers 503 with Retry-After and names the server that did not answer,
// where it answered 500 or opened a stream that waited blind before. With
// the server healthy, a turn or conversation that does not exist still
// answers 404, and once it runs again the waiting decision is taken.
func TestTemporalUnavailableAnswers503WithRetryAfterNamingIt(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	opts := st.apiOptions()
	opts.TemporalAddress = st.temporal.HostPort
	api := serveAPI(t, NewServer(opts))
	// fresh streams no turn: its stream opens ask Temporal.
	fresh := serveAPI(t, NewServer(opts))

	_, msgs := chatAt(t, api.URL, `{"query":"one","conversationId":"unavailable"}`)
	seq := 0
	var request protocol.Event
	for _, e := range untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1) {
		if e.Type == protocol.EventApprovalRequest {
			request = e
		}
	}
	turnID := request.WorkflowID

	// Healthy: what does not exist is 404.
	for _, path := range []string{
		"/chat/turns/tollgate-conv-nosuch-turn-1/events",
		"/conversations/nosuch/messages",
		"/conversations/nosuch/turns",
	} {
		a := ask(t, http.MethodGet, fresh.URL+path, "")
		require.Equal(t, http.StatusNotFound, a.status, "GET %s with Temporal healthy: %+v", path, a)
	}

	require.NoError(t, st.temporal.Pause())
	t.Cleanup(func() { _ = st.temporal.Resume() })
	paused := time.Now()
	calls := []struct{ method, url, body string }{
		{http.MethodPost, api.URL + "/chat/stream", `{"query":"hello"}`},
		{http.MethodPost, api.URL + "/chat/stream", `{"query":"hello","conversationId":"unavailable"}`},
		{http.MethodPost, api.URL + "/chat/approval", fmt.Sprintf(`{"requestId":%q,"decision":"approve"}`, request.RequestID)},
		{http.MethodGet, api.URL + "/conversations/unavailable/messages", ""},
		{http.MethodGet, api.URL + "/conversations/unavailable/grants", ""},
		{http.MethodGet, api.URL + "/conversations/unavailable/turns", ""},
		{http.MethodGet, fresh.URL + "/chat/turns/" + turnID + "/events", ""},
	}
	answers := make([]answer, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = ask(t, c.method, c.url, c.body)
		}()
	}
	wg.Wait()
	t.Logf("every call answered within %s of the pause", time.Since(paused).Round(time.Millisecond))
	for i, c := range calls {
		a := answers[i]
		what := c.method + " " + strings.TrimPrefix(strings.TrimPrefix(c.url, api.URL), fresh.URL)
		assert.Equal(t, http.StatusServiceUnavailable, a.status, "%s with Temporal paused: %+v", what, a)
		assert.Equal(t, retryAfter, a.retryAfter, "%s: every 503 says when to try again", what)
		assert.Contains(t, a.error, "Temporal at "+st.temporal.HostPort+" did not answer in time; try again", "%s names what did not answer", what)
	}

	require.NoError(t, st.temporal.Resume())
	// Answering again, the waiting turn takes the decision.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		a := ask(t, http.MethodPost, api.URL+"/chat/approval", fmt.Sprintf(`{"requestId":%q,"decision":"approve"}`, request.RequestID))
		assert.Equal(c, http.StatusOK, a.status, "%+v", a)
	}, time.Minute, time.Second)
}

// TestUnknownNamespaceAnswers503NamingIt: a server that says it does not
// know the namespace (an overloaded dev server says so of the one it
// serves) answers 503 naming the namespace, not 500.
func TestUnknownNamespaceAnswers503NamingIt(t *testing.T) {
	t.Parallel()
	st := newStack(t, withoutWorker())
	co := st.temporal.ClientOptions()
	co.Namespace = "nosuch"
	c, err := client.Dial(co)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	opts := st.apiOptions()
	opts.Client, opts.TemporalAddress = c, st.temporal.HostPort
	api := serveAPI(t, NewServer(opts))

	a := ask(t, http.MethodPost, api.URL+"/chat/stream", `{"query":"hello"}`)
	require.Equal(t, http.StatusServiceUnavailable, a.status, "%+v", a)
	require.Equal(t, retryAfter, a.retryAfter)
	require.Contains(t, a.error, `Temporal at `+st.temporal.HostPort+` does not serve namespace "nosuch" now`)
}

// TestTemporalCallsPastTheLimitAnswer503AtOnce holds the API's only place
// for a Temporal call with a query the paused server does not answer:
// every further call is refused at once with 503 and Retry-After, saying
// why, and once the place is free again calls go through.
func TestTemporalCallsPastTheLimitAnswer503AtOnce(t *testing.T) {
	t.Parallel()
	st := newStack(t, withoutWorker())
	opts := st.apiOptions()
	opts.TemporalAddress, opts.MaxTemporalCalls = st.temporal.HostPort, 1
	srv := NewServer(opts)
	api := serveAPI(t, srv)

	require.NoError(t, st.temporal.Pause())
	t.Cleanup(func() { _ = st.temporal.Resume() })
	held := make(chan answer, 1)
	go func() { held <- ask(t, http.MethodGet, api.URL+"/conversations/limited/messages", "") }()
	require.Eventually(t, func() bool { return len(srv.calls) == 1 }, waitFor, time.Millisecond, "the query holds the place")

	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/chat/stream", `{"query":"hello"}`},
		{http.MethodGet, "/conversations/limited/grants", ""},
		{http.MethodPost, "/chat/approval", `{"requestId":"tollgate-conv-limited-turn-1/call_1/x","decision":"approve"}`},
	} {
		a := ask(t, c.method, api.URL+c.path, c.body)
		require.Equal(t, http.StatusServiceUnavailable, a.status, "%s %s past the limit: %+v", c.method, c.path, a)
		require.Equal(t, retryAfter, a.retryAfter)
		require.Contains(t, a.error, "Temporal at "+st.temporal.HostPort+" is busy: this API has as many calls to it in flight as it allows")
		require.Contains(t, a.error, "TOLLGATE_MAX_TEMPORAL_CALLS=1", "and names the setting")
	}

	// A decision link's page says so too.
	resp, err := http.PostForm(api.URL+links.Path, url.Values{})
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", page)
	require.Equal(t, retryAfter, resp.Header.Get("Retry-After"))
	require.Contains(t, string(page), "as many calls to it in flight as it allows")

	require.Equal(t, http.StatusServiceUnavailable, (<-held).status, "the held query ran out of time while the server was paused")
	require.NoError(t, st.temporal.Resume())
	require.Equal(t, http.StatusNotFound, ask(t, http.MethodGet, api.URL+"/conversations/limited/messages", "").status,
		"its place is free again: the query reaches Temporal, which knows no such conversation")
}

// TestEveryTemporalUnavailabilityMapsTo503 walks the mapping itself for
// the unavailabilities a paused or unknown-namespace server does not
// produce (a server that refuses for load, or cancels a call), beside the
// ones the tests above meet for real: each is a 503 naming the server,
// and a missing workflow stays a 404, a client that left a 499.
func TestEveryTemporalUnavailabilityMapsTo503(t *testing.T) {
	const server = "Temporal at 127.0.0.1:7233"
	for _, tc := range []struct {
		err    error
		status int
		says   string
	}{
		{serviceerror.NewUnavailable("connection refused"), http.StatusServiceUnavailable, server + " is unavailable"},
		{serviceerror.NewDeadlineExceeded("deadline"), http.StatusServiceUnavailable, server + " did not answer in time"},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, server + " did not answer in time"},
		{serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, "rps"), http.StatusServiceUnavailable, server + " is overloaded and refused the call"},
		{serviceerror.NewCanceled("shutting down"), http.StatusServiceUnavailable, server + " cancelled the call"},
		{serviceerror.NewNamespaceNotFound("default"), http.StatusServiceUnavailable, server + ` does not serve namespace "default" now`},
		{serviceerror.NewNamespaceUnavailable("default"), http.StatusServiceUnavailable, server + " is unavailable"},
		{serviceerror.NewNotFound("workflow not found"), http.StatusNotFound, "workflow not found"},
		{fmt.Errorf("query: %w", context.Canceled), statusClientClosedRequest, "request cancelled"},
	} {
		status, msg := errorStatus(server, tc.err)
		require.Equal(t, tc.status, status, "%v", tc.err)
		require.Contains(t, msg, tc.says, "%v", tc.err)
	}
}

// TestACallCancelledWhileTheClientWaitsIs503: a Temporal call that ends
// with context.Canceled while its client is still there was cancelled on
// the server's side (a shutdown, say): 503 with Retry-After, not the 499
// of a client that left.
func TestACallCancelledWhileTheClientWaitsIs503(t *testing.T) {
	w := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(w)
	c.Request = httptest.NewRequest(http.MethodGet, "/conversations/c1/grants", nil)
	c.Set(temporalKey, "Temporal at 127.0.0.1:7233")
	writeError(c, slog.New(slog.DiscardHandler), fmt.Errorf("grants of conversation c1: %w", context.Canceled))
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	require.Equal(t, retryAfter, w.Header().Get("Retry-After"))
	require.Contains(t, w.Body.String(), "Temporal at 127.0.0.1:7233 cancelled the call; try again in 1s: grants of conversation c1")
}
