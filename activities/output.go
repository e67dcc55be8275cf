package activities

import (
	"fmt"
	"unicode/utf8"

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

// endsWriter keeps the first and the last max/2 bytes written to it and
// counts what lies between, so that a command's output shows how it began
// and how it ended (its error, its summary) at the cost of the cap.
type endsWriter struct {
	max     int
	head    []byte
	tail    []byte // a ring of the last bytes, oldest at next once full
	next    int
	written int64
}

func (w *endsWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.written += int64(n)
	if room := w.max/2 - len(w.head); room > 0 {
		k := min(room, len(p))
		w.head = append(w.head, p[:k]...)
		p = p[k:]
	}
	size := w.max - w.max/2
	if len(p) >= size {
		w.tail, w.next = append(w.tail[:0], p[len(p)-size:]...), 0
		return n, nil
	}
	for len(p) > 0 {
		if len(w.tail) < size {
			k := min(size-len(w.tail), len(p))
			w.tail = append(w.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(w.tail[w.next:], p)
		w.next = (w.next + k) % size
		p = p[k:]
	}
	return n, nil
}

// Len is the number of bytes written, kept or not.
func (w *endsWriter) Len() int64 { return w.written }

// String is the kept output, with a note of how much was cut from its
// middle when it was.
func (w *endsWriter) String() string {
	tail := append(append([]byte{}, w.tail[w.next:]...), w.tail[:w.next]...)
	cut := w.written - int64(len(w.head)) - int64(len(tail))
	if cut == 0 {
		return string(w.head) + string(tail)
	}
	head := text.TrimPartialRune(w.head)
	tail = trimLeadingPartialRune(tail)
	cut = w.written - int64(len(head)) - int64(len(tail))
	return fmt.Sprintf("%s\n... [output truncated: %d bytes]\n%s", head, cut, tail)
}

// trimLeadingPartialRune drops the bytes at the start of b that continue a
// character cut off before it.
func trimLeadingPartialRune(b []byte) []byte {
	for i := 0; i < len(b) && i < utf8.UTFMax; i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b
}
