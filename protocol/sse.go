package protocol

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// SSEKeepAlive is the message an idle stream sends now and then: a
// heartbeat event without an id.
const SSEKeepAlive = `data: {"type":"` + EventHeartbeat + `"}` + "\n\n"

// WriteSSE encodes e as one Server-Sent Events message: "id: <seq>" when
// numbered, then "data: <json>". JSON escapes newlines, so data is always
// one line.
func WriteSSE(w io.Writer, e Event, numbered bool) error {
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode %s event %d: %w", e.Type, e.Seq, err)
	}
	if numbered {
		_, err = fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Seq, data)
	} else {
		_, err = fmt.Fprintf(w, "data: %s\n\n", data)
	}
	return err
}

// SSEMessage is one Server-Sent Events message.
type SSEMessage struct {
	// ID is the message's id line, "" when it had none (the API's
	// keep-alives and its own errors carry none).
	ID   string
	Data string
}

// ReadSSE reads messages from r and hands each to fn until r ends or fn
// fails. It follows the SSE format: "field: value" lines, data lines joined
// with newlines, comments starting with ':', a blank line ending a message.
// A message cut off by the end of r is not handed on: it may be partial.
func ReadSSE(r io.Reader, fn func(SSEMessage) error) error {
	br := bufio.NewReader(r)
	var (
		msg  SSEMessage
		data []string
	)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err // io.EOF at the end of r
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if len(data) > 0 {
				msg.Data = strings.Join(data, "\n")
				if err := fn(msg); err != nil {
					return err
				}
			}
			msg, data = SSEMessage{}, nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			data = append(data, value)
		case "id":
			msg.ID = value
		}
	}
}
