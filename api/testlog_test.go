package main

import (
	"io"
	"log/slog"
	"sync"
	"testing"
)

// testLog is the logger of a test's API and hub: warnings and errors go to
// the test's own output (shown when it fails, so a CI failure says what
// the hub saw), everything with -v. Lines written after the test has ended,
// by a poller that outlived it, are dropped: the testing package panics on
// them.
func testLog(t *testing.T) *slog.Logger {
	w := &endingWriter{w: t.Output()}
	t.Cleanup(w.end)
	level := slog.LevelWarn
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// endingWriter writes to w until end is called.
type endingWriter struct {
	mu    sync.Mutex
	w     io.Writer
	ended bool
}

func (e *endingWriter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return len(p), nil
	}
	return e.w.Write(p)
}

func (e *endingWriter) end() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ended = true
}
