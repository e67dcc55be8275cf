// Package scripted is an OpenAI-compatible chat completions server whose
// answers come from a script instead of a model. Tests use it as a fake
// model server; `make dev` runs it (cmd/scripted-model, with Demo) as the
// model when no OPENAI_API_KEY is set.
package scripted

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/tollgate/tollgate/protocol"
)

// Reply is the server's answer to one chat completion request.
type Reply struct {
	// Content is the answer's text. With Status set, it is the error message.
	Content string
	// ToolCalls are the calls the answer asks for, in order. A call with an
	// empty ID is sent without one.
	ToolCalls []protocol.ToolCall
	// Status, when not zero, makes the server answer with this HTTP status
	// and an OpenAI-style JSON error body instead of a completion.
	Status int
	// Header holds extra response headers, such as Retry-After.
	Header map[string]string
	// Style is how a streamed answer is cut into chunks.
	Style ChunkStyle
	// ChunkBytes, when not zero, cuts a streamed answer's text into pieces
	// of at most ChunkBytes bytes, each ending after a space (a word longer
	// than that is a piece of its own), in place of Style's word- or
	// character-sized ones; tool calls are cut as Style says. Real servers
	// vary the size of their chunks, from a few characters to many words;
	// a test whose subject is an answer's size rather than how it streams
	// uses large pieces, so that megabytes take hundreds of chunks and not
	// hundreds of thousands.
	ChunkBytes int
	// Hold, when not nil, keeps the answer back until Hold is closed or the
	// client goes away: a model that thinks for long, or, with a channel
	// that is never closed, a connection that hangs. A streamed answer
	// sends HoldAfter chunks first (all of them when HoldAfter is larger,
	// holding back only the end); with HoldAfter 0, and for any other
	// answer, not even the status line goes out before Hold is closed.
	Hold <-chan struct{}
	// HoldAfter is how many chunks of a streamed answer Hold lets out.
	HoldAfter int
	// Corrupt, when not empty, is sent as the data of one more event right
	// after the first chunk of a streamed answer: a server that breaks its
	// wire format mid-answer. The rest of the answer follows it.
	Corrupt string
	// Tokens is the total token usage a streamed answer reports when the
	// request asks for it (stream_options.include_usage); 0 estimates it
	// as a quarter of the bytes of the request's messages and the answer.
	Tokens int
}

// Script decides the reply to a request. It is called once per request, from
// the request's goroutine.
type Script func(req openai.ChatCompletionRequest) Reply

// Always returns a Script that answers every request with r.
func Always(r Reply) Script {
	return func(openai.ChatCompletionRequest) Reply { return r }
}

// Option configures a Server.
type Option func(*Server)

// ChunkDelay makes the server pause for d between the chunks of a streamed
// answer, as a model that writes at a finite speed does.
func ChunkDelay(d time.Duration) Option {
	return func(s *Server) { s.chunkDelay = d }
}

// Window gives the server a context window of tokens: a request longer
// than that is answered 400 with OpenAI's context_length_exceeded body,
// which states the window and the request's length, as OpenAI does. A
// request's length is RequestTokens of its body.
func Window(tokens int) Option {
	return func(s *Server) { s.window = tokens }
}

// KeepNoRequests makes the server keep no record of the requests it
// takes: Requests and RequestTimes return none. A test of a long
// conversation, whose requests would take gigabytes (a thousand turns
// of a 150,000-token window), keeps what it needs from its Script.
func KeepNoRequests() Option {
	return func(s *Server) { s.keepNone = true }
}

// BytesPerToken is how many bytes of a request's JSON body the server
// counts as one token: about what OpenAI's tokenizers make of English
// text and JSON (150,000 tokens are about 600 KB of request).
const BytesPerToken = 4

// RequestTokens is the length in tokens that a Window counts for a request
// whose JSON body has n bytes.
func RequestTokens(n int) int {
	return (n + BytesPerToken - 1) / BytesPerToken
}

// ModelName is the model the server lists and answers as when a request
// names none.
const ModelName = "tollgate-scripted"

// Server is an http.Handler that serves POST /v1/chat/completions (streamed
// as server-sent events or not, as the request asks) and GET /v1/models. It
// records every request it could decode (unless KeepNoRequests).
type Server struct {
	script     Script
	chunkDelay time.Duration
	window     int // tokens; 0 is no limit
	keepNone   bool
	mux        *http.ServeMux
	completion atomic.Int64 // numbers the completions

	mu       sync.Mutex
	requests []openai.ChatCompletionRequest
	times    []time.Time // when each of requests arrived
}

// New returns a Server that answers with script.
func New(script Script, opts ...Option) *Server {
	s := &Server{script: script, mux: http.NewServeMux()}
	for _, opt := range opts {
		opt(s)
	}
	s.mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	s.mux.HandleFunc("GET /v1/models", s.models)
	return s
}

// ServeHTTP serves the OpenAI-compatible routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// Requests returns a copy of the requests received so far, oldest first.
func (s *Server) Requests() []openai.ChatCompletionRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// RequestTimes returns when each of the requests that Requests returns
// arrived, in the same order. Tests measure retry delays with them.
func (s *Server) RequestTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.times)
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req openai.ChatCompletionRequest
	body, err := io.ReadAll(r.Body)
	if err == nil {
		req, err = decodeRequest(body)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if !s.keepNone {
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.times = append(s.times, time.Now())
		s.mu.Unlock()
	}

	if used := RequestTokens(len(body)); s.window > 0 && used > s.window {
		// OpenAI's words and code for it.
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. "+
				"Please reduce the length of the messages.", s.window, used),
			"type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
		}})
		return
	}

	reply := s.script(req)
	if (reply.HoldAfter <= 0 || reply.Status != 0 || !req.Stream) && !held(r, reply.Hold) {
		return
	}
	for k, v := range reply.Header {
		w.Header().Set(k, v)
	}
	if reply.Status != 0 {
		writeError(w, reply.Status, cmp.Or(reply.Content, http.StatusText(reply.Status)))
		return
	}

	c := completion{
		id:      fmt.Sprintf("chatcmpl-scripted-%d", s.completion.Add(1)),
		created: time.Now().Unix(),
		model:   cmp.Or(req.Model, ModelName),
	}
	if req.Stream {
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			c.usage = usageOf(req, reply)
		}
		s.stream(w, r, c, reply)
		return
	}
	writeJSON(w, http.StatusOK, c.whole(reply))
}

// message is the first form in which go-openai's ChatCompletionMessage
// reads itself (content as a string), without its UnmarshalJSON.
type message struct {
	Role             string `json:"role"`
	Content          string `json:"content"`
	Refusal          string `json:"refusal,omitempty"`
	MultiContent     []openai.ChatMessagePart
	Name             string               `json:"name,omitempty"`
	ReasoningContent string               `json:"reasoning_content,omitempty"`
	FunctionCall     *openai.FunctionCall `json:"function_call,omitempty"`
	ToolCalls        []openai.ToolCall    `json:"tool_calls,omitempty"`
	ToolCallID       string               `json:"tool_call_id,omitempty"`
}

// decodeRequest reads body as go-openai reads a request, in one pass where
// it can: ChatCompletionMessage's UnmarshalJSON decodes its bytes anew,
// after the request's decoder has scanned them, which made decoding a
// long conversation's requests twice as slow (a third of a 1,000-turn
// test's time under -race). Content as a list of parts, and a body that
// is not valid, take go-openai's own way, and its error.
func decodeRequest(body []byte) (openai.ChatCompletionRequest, error) {
	var plain struct {
		openai.ChatCompletionRequest
		Messages []message `json:"messages"` // in place of the embedded field's
	}
	if json.Unmarshal(body, &plain) == nil {
		req := plain.ChatCompletionRequest
		if plain.Messages != nil {
			req.Messages = make([]openai.ChatCompletionMessage, len(plain.Messages))
			for i, m := range plain.Messages {
				req.Messages[i] = openai.ChatCompletionMessage(m)
			}
		}
		return req, nil
	}
	var req openai.ChatCompletionRequest
	err := json.Unmarshal(body, &req)
	return req, err
}

// held waits until hold is closed, or at once when hold is nil. It reports
// false when the client went away first.
func held(r *http.Request, hold <-chan struct{}) bool {
	if hold == nil {
		return true
	}
	select {
	case <-hold:
		return true
	case <-r.Context().Done():
		return false
	}
}

// stream writes reply as server-sent events, one chunk per event, pausing
// ChunkDelay between them, and ends with data: [DONE]. It holds the answer
// after reply.HoldAfter chunks and sends reply.Corrupt after the first.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c completion, reply Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w) // finds Flush also behind wrappers

	deltas := chunks(reply)
	holdAt := min(reply.HoldAfter, len(deltas))
	var timer *time.Timer
	for i, delta := range deltas {
		if i > 0 && i == holdAt && !held(r, reply.Hold) {
			return
		}
		if i == 1 && reply.Corrupt != "" {
			if _, err := fmt.Fprintf(w, "data: %s\n\n", reply.Corrupt); err != nil {
				return
			}
		}
		if i > 0 && s.chunkDelay > 0 {
			if timer == nil {
				timer = time.NewTimer(s.chunkDelay)
				defer timer.Stop()
			} else {
				timer.Reset(s.chunkDelay)
			}
			select {
			case <-timer.C:
			case <-r.Context().Done():
				return
			}
		}
		data, err := json.Marshal(c.chunk(delta))
		if err != nil {
			panic(err) // the wire types always marshal
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	if holdAt == len(deltas) && !held(r, reply.Hold) {
		return
	}
	if c.usage != nil {
		// As OpenAI sends it: a last chunk with no choices.
		data, err := json.Marshal(map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
			"choices": []any{}, "usage": c.usage})
		if err != nil {
			panic(err) // maps of plain values always marshal
		}
		fmt.Fprintf(w, "data: %s\n\n", data)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{
			{"id": ModelName, "object": "model", "created": 0, "owned_by": "tollgate"},
		},
	})
}

// writeError answers with status and an OpenAI-style error body.
func writeError(w http.ResponseWriter, status int, message string) {
	kind := "invalid_request_error"
	switch {
	case status == http.StatusTooManyRequests:
		kind = "rate_limit_error"
	case status >= 500:
		kind = "server_error"
	}
	writeJSON(w, status, map[string]any{
		"error": map[string]any{"message": message, "type": kind, "param": nil, "code": nil},
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
