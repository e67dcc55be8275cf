package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTheTerminalShowsControlCharactersInsteadOfObeyingThem(t *testing.T) {
	var b bytes.Buffer
	term := &terminal{w: &b}
	// A sandboxed command's output that would clear the screen, move the
	// cursor up and print a fake "approved" line; a C1 CSI; a carriage
	// return; a name split across two writes inside a UTF-8 sequence.
	for _, s := range []string{"ok\x1b[2J\x1b[1A\rall clear: approve\n", "csi \u009b31m red\tx\n", "caf\xc3", "\xa9 \x7f\xff\n"} {
		n, err := term.Write([]byte(s))
		require.NoError(t, err)
		require.Equal(t, len(s), n)
	}
	require.Equal(t, "ok\\x1b[2J\\x1b[1A\\x0dall clear: approve\ncsi \\u009b31m red\tx\ncafé \\x7f\\xff\n", b.String())
}
