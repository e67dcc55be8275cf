package main

import (
	"fmt"
	"io"
	"net/http"

	"github.com/tollgate/tollgate/protocol"
)

// flushWriter is a response that can push what was written to the client.
type flushWriter interface {
	io.Writer
	http.Flusher
}

// sseStream writes one client's Server-Sent Events.
type sseStream struct {
	w flushWriter
}

// startSSE sends the stream's headers at once, so the client sees the
// stream open before the first event.
func startSSE(w http.ResponseWriter) (*sseStream, error) {
	fw, ok := w.(flushWriter)
	if !ok {
		return nil, fmt.Errorf("response writer %T cannot flush", w)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	// Tell nginx and friends not to buffer the stream.
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fw.Flush()
	return &sseStream{w: fw}, nil
}

// events writes numbered events, each with its sequence number as the id,
// and flushes once.
func (s *sseStream) events(evs []protocol.Event) error {
	for _, e := range evs {
		if err := protocol.WriteSSE(s.w, e, true); err != nil {
			return err
		}
	}
	s.w.Flush()
	return nil
}

// unnumbered writes an event that is not part of the turn's log (the API's
// own error), without an id line, and flushes.
func (s *sseStream) unnumbered(e protocol.Event) error {
	if err := protocol.WriteSSE(s.w, e, false); err != nil {
		return err
	}
	s.w.Flush()
	return nil
}

// keepAlive writes a keep-alive and flushes.
func (s *sseStream) keepAlive() error {
	if _, err := io.WriteString(s.w, protocol.SSEKeepAlive); err != nil {
		return err
	}
	s.w.Flush()
	return nil
}
