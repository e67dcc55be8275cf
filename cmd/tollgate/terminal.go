package main

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// terminal is what the client prints to: a person's terminal. Everything
// it shows may come from elsewhere (a model's text, a command's output in a
// sandboxed preview, a file's name), and a terminal takes control
// characters in it as orders: an escape sequence can move the cursor, clear
// what was printed, or redraw the approval prompt, so the approver would
// read what the sender chose. terminal writes every control character but
// newline and tab as a visible escape (\x1b, \r, \u009b) instead.
//
// Written here rather than taken from a library: the golang.org/x/term
// package the module already has offers no such filter, and a whole
// terminal library would be more than this needs.
type terminal struct {
	w io.Writer
	// carry holds the start of a UTF-8 sequence a write split.
	carry []byte
}

func (t *terminal) Write(p []byte) (int, error) {
	n := len(p)
	if len(t.carry) > 0 {
		p = append(t.carry, p...)
		t.carry = nil
	}
	out := make([]byte, 0, len(p))
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		if r == utf8.RuneError && size <= 1 && !utf8.FullRune(p) {
			t.carry = append([]byte(nil), p...) // the rest comes with the next write
			break
		}
		switch {
		case r == '\n' || r == '\t':
			out = append(out, byte(r))
		case r < 0x20 || r == 0x7f:
			out = fmt.Appendf(out, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0:
			out = fmt.Appendf(out, `\u%04x`, r)
		case r == utf8.RuneError && size == 1:
			out = fmt.Appendf(out, `\x%02x`, p[0])
		default:
			out = append(out, p[:size]...)
		}
		p = p[size:]
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}
