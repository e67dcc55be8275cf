package protocol

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestArgumentLinesShowAKeyALineAndMultiLineStringsWhole(t *testing.T) {
	for _, tc := range []struct{ name, args, want string }{
		{"keys sorted, values as JSON", `{"path":"a.txt","limit":3,"<b>":true}`, "<b>: true\nlimit: 3\npath: \"a.txt\""},
		{"a multi-line string keeps its lines, indented", `{"command":"set -e\nmake test\n"}`, "command:\n  set -e\n  make test"},
		{"not an object comes back as it is", `["a","b"]`, `["a","b"]`},
		{"not JSON comes back as it is", `rm -rf /`, `rm -rf /`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, ArgumentLines(tc.args))
		})
	}
}
