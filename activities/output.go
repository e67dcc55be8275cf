package activities

import (
	"fmt"
	"unicode/utf8"
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
	kept := string(trimPartialRune(w.buf))
	return fmt.Sprintf("%s\n... [output truncated: %d more bytes]", kept, w.Len()-int64(len(kept)))
}

func cutUTF8(b []byte, n int) string {
	return string(trimPartialRune(b[:min(max(n, 0), len(b))]))
}

// trimPartialRune drops the incomplete character a cut left at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
