package activities

import (
	"fmt"

	"github.com/tollgate/tollgate/internal/text"
)

// capWriter keeps the first max bytes written to it and counts the rest, so
// a command that floods its output costs no more memory than the cap.
type capWriter struct {
	max     int
	buf     []byte
	dropped int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	n := len(p)
	if room := w.max - len(w.buf); room > 0 {
		k := min(room, len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
	}
	w.dropped += int64(len(p))
	return n, nil
}

// Len is the number of bytes written, kept or not.
func (w *capWriter) Len() int64 { return int64(len(w.buf)) + w.dropped }

// String is the kept output, with a note of how much was cut when it was.
func (w *capWriter) String() string {
	if w.dropped == 0 {
		return string(w.buf)
	}
	kept := string(text.TrimPartialRune(w.buf))
	return fmt.Sprintf("%s\n... [output truncated: %d more bytes]", kept, w.Len()-int64(len(kept)))
}
