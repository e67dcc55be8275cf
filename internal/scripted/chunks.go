package scripted

import (
	"strconv"
	"strings"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"

	"github.com/tollgate/tollgate/protocol"
)

// ChunkStyle is how a streamed answer is cut into chunks, after the servers
// tollgate meets in practice.
type ChunkStyle int

const (
	// StyleOpenAI cuts the text into word-sized deltas and each tool call
	// into a first delta with index, id and name and then several argument
	// fragments with only the index; the calls are interleaved by index.
	StyleOpenAI ChunkStyle = iota
	// StyleVLLM cuts text and arguments into fragments of a few characters,
	// sends the calls one after another and repeats the index and the id on
	// every delta, while the name comes once.
	StyleVLLM
	// StyleOllama sends word-sized text deltas and then every tool call
	// whole, all in one chunk, without an index.
	StyleOllama
)

// String names the style.
func (s ChunkStyle) String() string {
	switch s {
	case StyleOpenAI:
		return "openai"
	case StyleVLLM:
		return "vllm"
	case StyleOllama:
		return "ollama"
	}
	return "ChunkStyle(" + strconv.Itoa(int(s)) + ")"
}

// completion holds what every chunk of one completion repeats.
type completion struct {
	id      string
	created int64
	model   string
	// usage, when set, is sent in a last chunk.
	usage map[string]int
}

// usageOf is the token usage a reply reports: its Tokens, or a quarter of
// the bytes of the request's messages (prompt) and of the reply
// (completion).
func usageOf(req openai.ChatCompletionRequest, reply Reply) map[string]int {
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(m.Content)
		for _, tc := range m.ToolCalls {
			prompt += len(tc.Function.Arguments)
		}
	}
	completion := len(reply.Content)
	for _, tc := range reply.ToolCalls {
		completion += len(tc.Arguments)
	}
	p, c := (prompt+3)/4, (completion+3)/4
	if reply.Tokens > 0 {
		p, c = reply.Tokens-reply.Tokens/2, reply.Tokens/2
	}
	return map[string]int{"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
}

// Wire types of a streamed chunk. They are tollgate's own rather than
// go-openai's so that each style controls exactly which fields are present,
// as the server it imitates does.
type (
	chunkJSON struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []choiceJSON `json:"choices"`
	}
	choiceJSON struct {
		Index        int       `json:"index"`
		Delta        deltaJSON `json:"delta"`
		FinishReason *string   `json:"finish_reason"`
	}
	deltaJSON struct {
		Role      string         `json:"role,omitempty"`
		Content   *string        `json:"content,omitempty"`
		ToolCalls []toolCallJSON `json:"tool_calls,omitempty"`
	}
	toolCallJSON struct {
		Index    *int         `json:"index,omitempty"`
		ID       string       `json:"id,omitempty"`
		Type     string       `json:"type,omitempty"`
		Function functionJSON `json:"function"`
	}
	functionJSON struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
)

// delta is one chunk's content before it is wrapped: a delta, or the end of
// the answer when finish is set.
type delta struct {
	delta  deltaJSON
	finish string
}

func (c completion) chunk(d delta) chunkJSON {
	choice := choiceJSON{Delta: d.delta}
	if d.finish != "" {
		choice.FinishReason = &d.finish
	}
	return chunkJSON{
		ID:      c.id,
		Object:  "chat.completion.chunk",
		Created: c.created,
		Model:   c.model,
		Choices: []choiceJSON{choice},
	}
}

// whole returns reply as a non-streamed completion.
func (c completion) whole(reply Reply) openai.ChatCompletionResponse {
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: reply.Content}
	for _, call := range reply.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{
			ID:       call.ID,
			Type:     openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: call.Name, Arguments: call.Arguments},
		})
	}
	return openai.ChatCompletionResponse{
		ID:      c.id,
		Object:  "chat.completion",
		Created: c.created,
		Model:   c.model,
		Choices: []openai.ChatCompletionChoice{{
			Message:      msg,
			FinishReason: openai.FinishReason(finishReason(reply)),
		}},
	}
}

func finishReason(reply Reply) string {
	if len(reply.ToolCalls) > 0 {
		return string(openai.FinishReasonToolCalls)
	}
	return string(openai.FinishReasonStop)
}

// chunks cuts reply into the deltas of a streamed answer in reply.Style: a
// first delta with the role, the text, the tool calls, and a last delta with
// the finish reason.
func chunks(reply Reply) []delta {
	empty := ""
	out := []delta{{delta: deltaJSON{Role: openai.ChatMessageRoleAssistant, Content: &empty}}}

	var pieces []string
	switch {
	case reply.ChunkBytes > 0:
		pieces = upTo(reply.Content, reply.ChunkBytes)
	case reply.Style == StyleVLLM:
		pieces = runs(reply.Content, 3)
	default:
		pieces = words(reply.Content)
	}
	for _, p := range pieces {
		out = append(out, delta{delta: deltaJSON{Content: &p}})
	}

	switch reply.Style {
	case StyleVLLM:
		out = append(out, vllmCalls(reply.ToolCalls)...)
	case StyleOllama:
		out = append(out, ollamaCalls(reply.ToolCalls)...)
	default:
		out = append(out, openaiCalls(reply.ToolCalls)...)
	}
	return append(out, delta{finish: finishReason(reply)})
}

// openaiCalls sends each call as a header delta (index, id, name) and four
// argument fragments, taking one piece of every call in turn.
func openaiCalls(calls []protocol.ToolCall) []delta {
	perCall := make([][]toolCallJSON, len(calls))
	for i, call := range calls {
		header := toolCallJSON{Index: &i, ID: call.ID, Type: "function", Function: functionJSON{Name: call.Name}}
		perCall[i] = append(perCall[i], header)
		for _, frag := range parts(call.Arguments, 4) {
			perCall[i] = append(perCall[i], toolCallJSON{Index: &i, Function: functionJSON{Arguments: frag}})
		}
	}
	var out []delta
	for round := 0; ; round++ {
		sent := false
		for i := range perCall {
			if round < len(perCall[i]) {
				out = append(out, delta{delta: deltaJSON{ToolCalls: []toolCallJSON{perCall[i][round]}}})
				sent = true
			}
		}
		if !sent {
			return out
		}
	}
}

// vllmCalls sends the calls one after another in fragments of two
// characters, each with the index, id and type, and the name only on the
// first.
func vllmCalls(calls []protocol.ToolCall) []delta {
	var out []delta
	for i, call := range calls {
		frags := runs(call.Arguments, 2)
		if len(frags) == 0 {
			frags = []string{""}
		}
		for j, frag := range frags {
			tc := toolCallJSON{Index: &i, ID: call.ID, Type: "function", Function: functionJSON{Arguments: frag}}
			if j == 0 {
				tc.Function.Name = call.Name
			}
			out = append(out, delta{delta: deltaJSON{ToolCalls: []toolCallJSON{tc}}})
		}
	}
	return out
}

// ollamaCalls sends every call whole, without an index, in a single chunk.
func ollamaCalls(calls []protocol.ToolCall) []delta {
	if len(calls) == 0 {
		return nil
	}
	var tcs []toolCallJSON
	for _, call := range calls {
		tcs = append(tcs, toolCallJSON{
			ID:       call.ID,
			Type:     "function",
			Function: functionJSON{Name: call.Name, Arguments: call.Arguments},
		})
	}
	return []delta{{delta: deltaJSON{ToolCalls: tcs}}}
}

// words cuts s after each space, so every piece but the last ends with one.
func words(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// upTo cuts s after spaces into pieces of at most n bytes: as many whole
// words as fit, or one word alone when it is longer than n.
func upTo(s string, n int) []string {
	var out []string
	for s != "" {
		end := 0
		for end < len(s) {
			next := len(s)
			if i := strings.IndexByte(s[end:], ' '); i >= 0 {
				next = end + i + 1
			}
			if end > 0 && next > n {
				break
			}
			end = next
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

// runs cuts s into pieces of n runes.
func runs(s string, n int) []string {
	var out []string
	for s != "" {
		end, count := 0, 0
		for end < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[end:])
			end += size
			count++
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

// parts cuts s into at most n pieces of about equal length in runes.
func parts(s string, n int) []string {
	size := (utf8.RuneCountInString(s) + n - 1) / n
	if size == 0 {
		return nil
	}
	return runs(s, size)
}
