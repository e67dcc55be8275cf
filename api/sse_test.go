package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

func TestEventIsWrittenWithItsSequenceAsIDAndOneDataLine(t *testing.T) {
	var b strings.Builder
	e := protocol.Event{Seq: 7, Type: protocol.EventToken, Data: "two\nlines"}
	require.NoError(t, protocol.WriteSSE(&b, e, true))
	require.Equal(t, "id: 7\ndata: {\"seq\":7,\"type\":\"token\",\"data\":\"two\\nlines\"}\n\n", b.String())
}

func TestUnnumberedEventHasNoIDLine(t *testing.T) {
	var b strings.Builder
	require.NoError(t, protocol.WriteSSE(&b, protocol.Event{Type: protocol.EventError, Message: "boom"}, false))
	require.Equal(t, "data: {\"seq\":0,\"type\":\"error\",\"message\":\"boom\"}\n\n", b.String())
}

func TestKeepAliveIsAHeartbeatWithoutID(t *testing.T) {
	rec := httptest.NewRecorder()
	out, err := startSSE(rec)
	require.NoError(t, err)
	rec.Flushed = false // startSSE flushed the headers
	require.NoError(t, out.keepAlive())
	require.Equal(t, "data: {\"type\":\"heartbeat\"}\n\n", rec.Body.String())
	require.True(t, rec.Flushed)
}

func TestStreamHeadersDisableCachingAndProxyBuffering(t *testing.T) {
	rec := httptest.NewRecorder()
	_, err := startSSE(rec)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
	require.Equal(t, "no-cache", rec.Header().Get("Cache-Control"))
	require.Equal(t, "no", rec.Header().Get("X-Accel-Buffering"))
	require.True(t, rec.Flushed, "headers go out before the first event")
}

func TestEventsAreFlushedTogether(t *testing.T) {
	rec := httptest.NewRecorder()
	out, err := startSSE(rec)
	require.NoError(t, err)
	rec.Flushed = false
	require.NoError(t, out.events([]protocol.Event{{Seq: 1, Type: protocol.EventTurnStart}, {Seq: 2, Type: protocol.EventFinish}}))
	require.True(t, rec.Flushed)
	msgs := drainString(t, rec.Body.String())
	require.Len(t, msgs, 2)
	require.Equal(t, "1", msgs[0].ID)
	require.Equal(t, "2", msgs[1].ID)
}

func drainString(t *testing.T, s string) []sseMessage {
	t.Helper()
	return drain(t, readSSE(strings.NewReader(s)))
}
