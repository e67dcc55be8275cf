package protocol

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadSSEFollowsTheFormat(t *testing.T) {
	stream := "id: 1\ndata: {\"type\":\"turn_start\"}\n\n" +
		": a comment\n" +
		"data: {\"type\":\"heartbeat\"}\n\n" + // a keep-alive: no id
		"id:2\r\ndata: first\r\ndata: second\r\n\r\n" +
		"event: ignored\n\n" + // no data: nothing to hand on
		"id: 3\ndata: cut off" // the connection dropped mid-message
	var got []SSEMessage
	err := ReadSSE(strings.NewReader(stream), func(m SSEMessage) error {
		got = append(got, m)
		return nil
	})
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, []SSEMessage{
		{ID: "1", Data: `{"type":"turn_start"}`},
		{Data: `{"type":"heartbeat"}`},
		{ID: "2", Data: "first\nsecond"},
	}, got)
}

func TestReadSSEStopsWhenTheHandlerFails(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	err := ReadSSE(strings.NewReader("data: a\n\ndata: b\n\n"), func(SSEMessage) error {
		n++
		return stop
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, n)
}
