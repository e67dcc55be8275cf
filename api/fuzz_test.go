package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/; `go test` runs them, and
// `go test -run '^$' -fuzz FuzzApprovalBody ./api/` searches for more.

// FuzzApprovalBody proves that whatever bytes arrive as POST /chat/approval's
// body, parseApproval does not panic and either returns a decision a turn's
// validator can take (a request id, approve or decline, arguments empty or a
// JSON object, remember empty or "conversation") or a bad-request error whose message says what is wrong.
func FuzzApprovalBody(f *testing.F) {
	for _, body := range []string{
		`{"requestId":"tollgate-conv-c-turn-1/apr-00","decision":"approve"}`,
		`{"requestId":"r","decision":"decline","reason":"not now"}`,
		`{"requestId":"r","decision":"approve","remember":"conversation","sameArguments":true}`,
		`{"requestId":"r","decision":"approve","remember":"forever"}`,
		`{"requestId":"r","decision":"approve","arguments":{"file_path":"a.txt"}}`,
		`{"requestId":"r","decision":"approve","arguments":" {\"command\": \"ls\"} "}`,
		`{"requestId":"r","decision":"approve","arguments":"\ud800"}`,
		`{"requestId":"r","decision":"approve","arguments":null}`,
		`{"requestId":"r","decision":"approve","arguments":[1]}`,
		`{"REQUESTID":"r","Decision":"approve"}`,
		`{"requestId":"r","decision":"approve"} {}`,
		`{"requestId":7}`,
		`[]`,
		``,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := parseApproval(bytes.NewReader(body))
		checkParsedApproval(t, body, d, err)

		// Behind the size limit the handler uses, cut short: the limit's
		// error is a bad request or a 413, never a panic or an accepted
		// decision made from half a body.
		limit := int64(len(body) / 2)
		d, err = parseApproval(http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(body)), limit))
		checkParsedApproval(t, body[:limit], d, err)
	})
}

func checkParsedApproval(t *testing.T, body []byte, d protocol.ApprovalDecision, err error) {
	t.Helper()
	if err != nil {
		var bad *badRequestError
		require.True(t, errors.As(err, &bad) || errors.Is(err, errBodyTooLarge), "error %T is not a bad request: %v", err, err)
		require.NotEmpty(t, strings.TrimSpace(err.Error()))
		require.Equal(t, protocol.ApprovalDecision{}, d)
		return
	}
	require.True(t, json.Valid(body), "accepted a body that is not one JSON value: %q", body)
	require.NotEmpty(t, d.RequestID)
	require.Contains(t, []string{protocol.DecisionApprove, protocol.DecisionDecline}, d.Decision)
	require.Contains(t, []string{"", protocol.RememberConversation}, d.Remember)
	if d.Arguments != "" {
		var obj map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(d.Arguments), &obj), "arguments %q", d.Arguments)
		require.NotNil(t, obj, "arguments %q are not an object", d.Arguments)
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, []byte(d.Arguments)))
		require.Equal(t, compact.String(), d.Arguments, "arguments are compact")
	}
}

// FuzzSSEEncoder proves that any event, whatever its strings hold (newlines,
// carriage returns, NULs, invalid UTF-8), is written as exactly one SSE
// message with one id line and data that a client parsing by the spec (lines
// end at \n, \r\n or \r) decodes back to the same event.
func FuzzSSEEncoder(f *testing.F) {
	f.Add(7, "token", "two\nlines", "", "", "", "", "", int64(0))
	f.Add(1, "finish", "", "", "a\rb", "c\r\nd", "", "", int64(1700000000123456789))
	f.Add(3, "approval_request", "", "tollgate-conv-x-turn-1/apr-1", "", "", "Write", `{"content":"l1\nl2\r"}`, int64(-1))
	f.Add(-4, "error", "\x00\x1b[31m", "", "", "\u2028\u2029", "\xff\xfe", "data: x\n\nid: 9", int64(42))
	f.Add(0, "subagent_token", ":comment\n", "id: 1", "\n\n", "retry: 0", "名前", "é\u0301", int64(253402300799))
	f.Fuzz(func(t *testing.T, seq int, typ, data, requestID, reason, message, name, args string, at int64) {
		expires := time.Unix(0, at).UTC()
		e := protocol.Event{
			Seq: seq, Type: typ, Name: name, Data: data,
			RequestID: requestID, ToolCallID: name, ToolName: name, Arguments: args, ExpiresAt: &expires,
			Reason: reason, Text: data, Message: message,
			ToolCalls:   []protocol.ToolCall{{ID: requestID, Name: name, Arguments: args}},
			ToolResults: []protocol.ToolResult{{ID: requestID, Name: name, Result: message, Status: reason}},
		}
		var out strings.Builder
		require.NoError(t, protocol.WriteSSE(&out, e, true))

		msgs, rest := parseSSESpec(out.String())
		require.Len(t, msgs, 1, "one event is one message: %q", out.String())
		require.Empty(t, rest, "nothing after the message's blank line")
		m := msgs[0]
		require.Equal(t, []string{strconv.Itoa(seq)}, m.ids, "exactly one id line")
		require.Len(t, m.data, 1, "exactly one data line")

		var got protocol.Event
		require.NoError(t, json.Unmarshal([]byte(m.data[0]), &got))
		require.NotNil(t, got.ExpiresAt)
		require.True(t, expires.Equal(*got.ExpiresAt), "expiresAt %s came back as %s", expires, got.ExpiresAt)
		got.ExpiresAt, e.ExpiresAt = nil, nil
		require.Equal(t, asJSONStrings(e), got)

		out.Reset()
		require.NoError(t, protocol.WriteSSE(&out, e, false))
		msgs, rest = parseSSESpec(out.String())
		require.Len(t, msgs, 1)
		require.Empty(t, rest)
		require.Empty(t, msgs[0].ids, "an unnumbered event has no id line")
		require.Len(t, msgs[0].data, 1)
	})
}

// specMessage is one SSE message as the WHATWG spec's parser sees it: every
// id and data field, in order, before the message is dispatched.
type specMessage struct {
	ids  []string
	data []string
}

// parseSSESpec parses an event stream the way the HTML standard says a
// browser does: lines end at CRLF, LF or CR; an empty line dispatches the
// message; a line's field name runs to the first colon, and one space after
// the colon is dropped; a line starting with a colon is a comment. rest is
// any text after the last dispatched message.
func parseSSESpec(stream string) (msgs []specMessage, rest string) {
	var cur specMessage
	pending := false
	for stream != "" {
		i := strings.IndexAny(stream, "\r\n")
		if i < 0 {
			return msgs, stream // a last line without an end is never dispatched
		}
		line := stream[:i]
		if stream[i] == '\r' && i+1 < len(stream) && stream[i+1] == '\n' {
			i++
		}
		stream = stream[i+1:]
		if line == "" {
			if pending {
				msgs = append(msgs, cur)
			}
			cur, pending = specMessage{}, false
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			cur.ids = append(cur.ids, value)
		case "data":
			cur.data = append(cur.data, value)
		}
		pending = true
	}
	if pending {
		return msgs, "unterminated message"
	}
	return msgs, ""
}

// asJSONStrings returns e with every string as JSON carries it: encoding/json
// replaces each byte of invalid UTF-8 with U+FFFD.
func asJSONStrings(e protocol.Event) protocol.Event {
	fix := func(s *string) { *s = validUTF8PerByte(*s) }
	for _, s := range []*string{&e.Type, &e.Name, &e.ConversationID, &e.TurnID, &e.WorkflowID, &e.RunID,
		&e.Data, &e.RequestID, &e.ToolCallID, &e.ToolName, &e.Arguments, &e.Decision, &e.Reason, &e.Text, &e.Message} {
		fix(s)
	}
	for i := range e.ToolCalls {
		fix(&e.ToolCalls[i].ID)
		fix(&e.ToolCalls[i].Name)
		fix(&e.ToolCalls[i].Arguments)
	}
	for i := range e.ToolResults {
		fix(&e.ToolResults[i].ID)
		fix(&e.ToolResults[i].Name)
		fix(&e.ToolResults[i].Result)
		fix(&e.ToolResults[i].Status)
	}
	return e
}

func validUTF8PerByte(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func TestSpecParserSplitsLinesOnCRLFAndCR(t *testing.T) {
	msgs, rest := parseSSESpec("id: 1\r\ndata: a\rdata:b\n\r\n: comment\n\ndata: c\n")
	require.Equal(t, []specMessage{{ids: []string{"1"}, data: []string{"a", "b"}}}, msgs)
	require.Equal(t, "unterminated message", rest)
}
