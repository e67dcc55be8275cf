package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// testTurn is a turn id of tollgate's form.
var testTurn = contract.TurnWorkflowID("c1", 1)

// serveAPI serves s over HTTP until the test ends.
func serveAPI(t testing.TB, s *Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		s.Close()
		ts.Close()
	})
	return ts
}

// newTestServer serves the API over a fake event source, with no Temporal.
func newTestServer(t *testing.T, src eventSource, heartbeat time.Duration) (*Server, *httptest.Server) {
	t.Helper()
	s := newServer(Options{HeartbeatInterval: heartbeat}, src, fastSettings)
	return s, serveAPI(t, s)
}

func eventsURL(ts *httptest.Server, turnID string) string {
	return ts.URL + "/chat/turns/" + turnID + "/events"
}

// metric reads a gauge or counter from the API's /metrics. t may be an
// Eventually's *assert.CollectT.
func metric(t require.TestingT, ts *httptest.Server, name string) int64 {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	resp, err := http.Get(ts.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + name + ` (\d+)$`).FindStringSubmatch(string(body))
	require.NotNil(t, m, "metric %s in:\n%s", name, body)
	n, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return n
}

func decodeEvent(t *testing.T, m sseMessage) protocol.Event {
	t.Helper()
	var e protocol.Event
	require.NoError(t, json.Unmarshal([]byte(m.Data), &e), m.Data)
	return e
}

func TestStreamSendsNumberedEventsAndEndsAfterFinish(t *testing.T) {
	src := newFakeSource()
	src.publish(testTurn, protocol.EventTurnStart, protocol.EventToken, protocol.EventFinish)
	_, ts := newTestServer(t, src, time.Hour)

	resp, msgs, _ := openStream(t, eventsURL(ts, testTurn), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
	require.Equal(t, "no", resp.Header.Get("X-Accel-Buffering"))

	all := drain(t, msgs) // ends: the server closed the stream after finish
	require.Len(t, all, 3)
	for i, m := range all {
		require.True(t, m.HasID)
		require.Equal(t, strconv.Itoa(i+1), m.ID)
		require.Equal(t, i+1, decodeEvent(t, m).Seq)
	}
	require.Equal(t, protocol.EventFinish, decodeEvent(t, all[2]).Type)
}

func TestIdleStreamGetsKeepAlivesWithoutID(t *testing.T) {
	src := newFakeSource()
	src.publish(testTurn, protocol.EventTurnStart)
	_, ts := newTestServer(t, src, 10*time.Millisecond)

	_, msgs, _ := openStream(t, eventsURL(ts, testTurn), nil)
	first, ok := nextMessage(t, msgs)
	require.True(t, ok)
	require.Equal(t, "1", first.ID)
	for range 2 {
		m, ok := nextMessage(t, msgs)
		require.True(t, ok)
		require.False(t, m.HasID, "a keep-alive must not move Last-Event-ID")
		require.JSONEq(t, `{"type":"heartbeat"}`, m.Data)
	}

	src.publish(testTurn, protocol.EventFinish)
	var ids []string
	for _, m := range drain(t, msgs) {
		if m.HasID {
			ids = append(ids, m.ID)
		}
	}
	require.Equal(t, []string{"2"}, ids)
}

func TestStreamResumesAfterLastEventID(t *testing.T) {
	src := newFakeSource()
	src.publish(testTurn, protocol.EventTurnStart, protocol.EventToken, protocol.EventToken, protocol.EventFinish)
	_, ts := newTestServer(t, src, time.Hour)

	for name, open := range map[string]func() <-chan sseMessage{
		"header": func() <-chan sseMessage {
			_, msgs, _ := openStream(t, eventsURL(ts, testTurn), http.Header{"Last-Event-ID": {"2"}})
			return msgs
		},
		"query": func() <-chan sseMessage {
			_, msgs, _ := openStream(t, eventsURL(ts, testTurn)+"?after=2", nil)
			return msgs
		},
	} {
		t.Run(name, func(t *testing.T) {
			var ids []string
			for _, m := range drain(t, open()) {
				ids = append(ids, m.ID)
			}
			require.Equal(t, []string{"3", "4"}, ids)
		})
	}
}

func TestStreamRejectsABadCursor(t *testing.T) {
	_, ts := newTestServer(t, newFakeSource(), time.Hour)
	for _, tc := range []struct {
		name, query, lastEventID, want string
	}{
		{"not a number", "?after=abc", "", "after must be a whole number"},
		{"negative", "?after=-1", "", "after must be a whole number"},
		{"bad header", "", "x", "Last-Event-ID header must be a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, eventsURL(ts, testTurn)+tc.query, nil)
			require.NoError(t, err)
			if tc.lastEventID != "" {
				req.Header.Set("Last-Event-ID", tc.lastEventID)
			}
			status, msg := doJSON(t, req)
			require.Equal(t, http.StatusBadRequest, status)
			require.Contains(t, msg, tc.want)
		})
	}
}

func TestStreamOfAForeignTurnIDIsNotFound(t *testing.T) {
	_, ts := newTestServer(t, newFakeSource(), time.Hour)
	req, err := http.NewRequest(http.MethodGet, eventsURL(ts, "someone-elses-workflow"), nil)
	require.NoError(t, err)
	status, msg := doJSON(t, req)
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, msg, "unknown turn")
}

func TestStreamOfATurnNobodyPromisedIsNotFoundAndOfAStartingTurnStreams(t *testing.T) {
	src := newFakeSource()
	absent, starting := contract.TurnWorkflowID("c1", 9), contract.TurnWorkflowID("c1", 2)
	src.setAbsent(absent)
	src.setMissing(starting, true)
	_, ts := newTestServer(t, src, time.Hour)

	req, err := http.NewRequest(http.MethodGet, eventsURL(ts, absent), nil)
	require.NoError(t, err)
	status, msg := doJSON(t, req)
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, msg, "turn not found: no turn "+absent)

	resp, msgs, _ := openStream(t, eventsURL(ts, starting), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	src.publish(starting, protocol.EventTurnStart, protocol.EventFinish)
	src.setMissing(starting, false)
	require.Len(t, drain(t, msgs), 2)
}

func TestStreamOfATurnThatNeverStartsEndsWithAnErrorEvent(t *testing.T) {
	src := newFakeSource()
	src.setMissing(testTurn, true)
	_, ts := newTestServer(t, src, time.Hour)

	_, msgs, _ := openStream(t, eventsURL(ts, testTurn), nil)
	all := drain(t, msgs)
	require.Len(t, all, 1)
	require.False(t, all[0].HasID, "the API's own error is not part of the turn's log")
	e := decodeEvent(t, all[0])
	require.Equal(t, protocol.EventError, e.Type)
	require.Contains(t, e.Message, "did not start")
}

func TestTwoClientsOnOneTurnCauseOnePollerThatStopsWhenBothLeave(t *testing.T) {
	src := newFakeSource()
	src.publish(testTurn, protocol.EventTurnStart)
	_, ts := newTestServer(t, src, time.Hour)

	_, a, cancelA := openStream(t, eventsURL(ts, testTurn), nil)
	_, b, cancelB := openStream(t, eventsURL(ts, testTurn), nil)
	for _, msgs := range []<-chan sseMessage{a, b} {
		m, ok := nextMessage(t, msgs)
		require.True(t, ok)
		require.Equal(t, "1", m.ID)
	}
	require.EqualValues(t, 1, metric(t, ts, "tollgate_api_pollers_started_total"))
	require.EqualValues(t, 1, metric(t, ts, "tollgate_api_pollers_running"))
	require.EqualValues(t, 2, metric(t, ts, "tollgate_api_open_streams"))

	cancelA()
	require.EventuallyWithT(t, func(c *assert.CollectT) { require.EqualValues(c, 1, metric(c, ts, "tollgate_api_open_streams")) }, waitFor, 5*time.Millisecond)
	src.publish(testTurn, protocol.EventToken)
	m, ok := nextMessage(t, b)
	require.True(t, ok)
	require.Equal(t, "2", m.ID, "b still gets events")
	require.EqualValues(t, 1, metric(t, ts, "tollgate_api_pollers_running"), "b still watches")
	cancelB()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Zero(c, metric(c, ts, "tollgate_api_open_streams"))
		require.Zero(c, metric(c, ts, "tollgate_api_pollers_running"))
		require.Zero(c, src.watching.Load())
	}, waitFor, 5*time.Millisecond, "a client that leaves stops costing anything")
}

func TestClosingTheServerEndsOpenStreams(t *testing.T) {
	src := newFakeSource()
	src.publish(testTurn, protocol.EventTurnStart)
	s, ts := newTestServer(t, src, time.Hour)
	_, msgs, _ := openStream(t, eventsURL(ts, testTurn), nil)
	_, ok := nextMessage(t, msgs)
	require.True(t, ok)

	s.Close()
	require.Empty(t, drain(t, msgs))
}

func TestMetricsAreInPrometheusTextFormat(t *testing.T) {
	_, ts := newTestServer(t, newFakeSource(), time.Hour)
	resp, err := http.Get(ts.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, expfmt.TypeTextPlain, expfmt.ResponseFormat(resp.Header).FormatType())
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, name := range []string{"tollgate_api_pollers_started_total", "tollgate_api_event_queries_total", "tollgate_api_open_streams"} {
		require.Contains(t, string(body), "# TYPE "+name+" ")
		require.Regexp(t, `(?m)^`+name+` 0$`, string(body))
	}
}

func TestChatStreamRejectsBadBodies(t *testing.T) {
	_, ts := newTestServer(t, newFakeSource(), time.Hour)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"empty body", "", "body is empty"},
		{"not JSON", "{query", "not valid JSON"},
		{"not an object", `["hi"]`, "body must be a JSON object"},
		{"query missing", `{}`, "query is empty"},
		{"query blank", `{"query": "  "}`, "query is empty"},
		{"query not a string", `{"query": 3}`, "query must be a string"},
		{"bypass not a boolean", `{"query": "hi", "bypassApproval": "yes"}`, "bypassApproval must be true or false"},
		{"bad conversation id", `{"query": "hi", "conversationId": "a'b"}`, "conversationId"},
		{"two values", `{"query": "hi"} {}`, "more than one JSON value"},
		{"too large", `{"query": "` + strings.Repeat("x", maxBodyBytes) + `"}`, "body larger than the API's limit of 64 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, ts.URL+"/chat/stream", strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			status, msg := doJSON(t, req)
			want := http.StatusBadRequest
			if tc.name == "too large" {
				want = http.StatusRequestEntityTooLarge
			}
			require.Equal(t, want, status, msg)
			require.Contains(t, msg, tc.want)
		})
	}
}

func TestUnknownPathAnswersJSON404(t *testing.T) {
	_, ts := newTestServer(t, newFakeSource(), time.Hour)
	req, err := http.NewRequest(http.MethodGet, ts.URL+"/nope", nil)
	require.NoError(t, err)
	status, msg := doJSON(t, req)
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, msg, "no such endpoint")
}

// doJSON sends req and returns the status and the "error" of its JSON body.
func doJSON(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Contains(t, resp.Header.Get("Content-Type"), "application/json")
	var body struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body.Error
}
