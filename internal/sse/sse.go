// Package sse reads Server-Sent Events streams, as the API writes them: the
// terminal client and the tests that watch a turn over HTTP read with it.
package sse

import (
	"bufio"
	"io"
	"strings"
)

// Message is one Server-Sent Events message.
type Message struct {
	// ID is the message's id line, "" when it had none (the API's
	// keep-alives and its own errors carry none).
	ID   string
	Data string
}

// Read reads messages from r and hands each to fn until r ends or fn
// fails. It follows the SSE format: "field: value" lines, data lines joined
// with newlines, comments starting with ':', a blank line ending a message.
// A message cut off by the end of r is not handed on: it may be partial.
func Read(r io.Reader, fn func(Message) error) error {
	br := bufio.NewReader(r)
	var (
		msg  Message
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
			msg, data = Message{}, nil
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
