package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// ModelActivity is the name the worker registers Model.Chat under and the
// turn workflow calls it by.
const ModelActivity = "Model"

// Application error types of the model activity.
const (
	// ModelRequestRejectedError marks a request the model server answered
	// with a 4xx other than 408, 409 and 429, or one the client refused to
	// send. It is non-retryable: the same request would be rejected again.
	ModelRequestRejectedError = "ModelRequestRejected"
	// ModelRateLimitedError marks a 429 that said when to come back
	// (Retry-After); it is retried after that delay.
	ModelRateLimitedError = "ModelRateLimited"
	// ModelContextTooLongError marks a 400 that says the request does not
	// fit the model's context window. It is not retried as it is: the turn
	// compacts the conversation and asks once more.
	ModelContextTooLongError = "ModelContextTooLong"
)

// contextTooLong reports whether a model server's rejection says the
// request is longer than the model's context: OpenAI's code
// context_length_exceeded, and the words other servers use for it.
func contextTooLong(detail string) bool {
	d := strings.ToLower(detail)
	for _, w := range []string{"context_length_exceeded", "maximum context length", "context length", "context window", "too many tokens", "prompt is too long"} {
		if strings.Contains(d, w) {
			return true
		}
	}
	return false
}

// Defaults of Model's token streaming.
const DefaultMaxBatches = 16

// emptyParameters is the schema sent for a tool that declares none: servers
// reject a function without parameters.
const emptyParameters = `{"type":"object","properties":{}}`

// emptyToolResult stands in for a tool result with no text, which servers
// reject because go-openai leaves out an empty content.
const emptyToolResult = "(empty result)"

// TokenSink delivers batches of answer text to the workflow that asked for
// them while the model is still answering. The worker implements it with a
// signal to the turn workflow.
type TokenSink interface {
	SendTokens(ctx context.Context, target TokenTarget, batch TokenBatch) error
}

// Model calls an OpenAI-compatible chat completions server. Its Chat method is
// the model activity.
//
// The client must not retry on its own: Temporal's retry policy does. Build
// it with NewModel, which also lets Chat honour a 429's Retry-After and tell a
// request the client refused to send from one the network lost.
type Model struct {
	Client *openai.Client
	// DefaultModel is the model name used when ModelInput.Model is empty.
	DefaultModel string
	// Tokens receives the answer's text while it streams; nil disables
	// streaming of tokens.
	Tokens TokenSink
	// FlushInterval is the least time between two token batches
	// (protocol.DefaultFlushInterval when zero).
	FlushInterval time.Duration
	// MaxBatches bounds the token batches, and so the signals in the turn's
	// history, of one model call (DefaultMaxBatches when zero). The workflow
	// takes the rest of the text from the activity's result.
	MaxBatches int
	// Ledger, when set, takes the audit ledger's rows that a turn hands a
	// model call (ModelInput.Ledger) while the model answers.
	Ledger audit.Writer

	// tracked is set when Client sends through a requestTracker.
	tracked bool
}

// NewModel returns a Model that calls the OpenAI-compatible server at baseURL
// (for example http://127.0.0.1:11434/v1; OpenAI's when empty) with model as
// its default model. apiKey may be empty for local servers; no Authorization
// header is sent then.
func NewModel(baseURL, apiKey, model string, sink TokenSink) *Model {
	cfg := openai.DefaultConfig(apiKey)
	if baseURL != "" {
		cfg.BaseURL = baseURL
	}
	// No http.Client timeout: an answer streams for as long as the model
	// writes, and the activity's context bounds the call. The transport
	// traces each request as a client span of the activity's span, with
	// that span's tracer provider (none without tracing), and sends its
	// trace context to the model server.
	cfg.HTTPClient = requestTracker{next: &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport)}}
	return &Model{
		Client:       openai.NewClientWithConfig(cfg),
		DefaultModel: model,
		Tokens:       sink,
		tracked:      true,
	}
}

// Chat sends the conversation to the model, streams the answer and returns it
// whole: its text, its tool calls in the order the model made them, and why
// it finished. While the answer streams, Chat heartbeats and, when in.Tokens
// is set, sends the text to the turn workflow in at most MaxBatches batches.
//
// A 5xx, a 408 or 409, a 429 without Retry-After, or a connection that
// fails is a plain error that Temporal retries; a 429 with Retry-After is a
// ModelRateLimitedError that tells Temporal when to retry; any other 4xx,
// and a request the client refuses to send, is a non-retryable application
// error of type ModelRequestRejectedError.
func (m *Model) Chat(ctx context.Context, in ModelInput) (out ModelOutput, err error) {
	n := Carry(ctx, m.Ledger, in.Ledger, true, func() { out, err = m.chat(ctx, in) })
	out.LedgerRows = n
	return out, err
}

// chat is Chat without the ledger's rows.
func (m *Model) chat(ctx context.Context, in ModelInput) (ModelOutput, error) {
	req, err := chatRequest(in, cmp.Or(in.Model, m.DefaultModel))
	if err != nil {
		return ModelOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), ModelRequestRejectedError, err)
	}

	inActivity := activity.IsActivity(ctx)
	state := &requestState{}
	beats := m.heartbeatStream(ctx, in.Tokens, inActivity)
	stream, err := m.Client.CreateChatCompletionStream(context.WithValue(ctx, requestStateKey{}, state), req)
	if err != nil {
		return ModelOutput{}, beats.withProgress(ctx, m.classify(ctx, req.Model, err, state))
	}
	defer stream.Close()

	tokens := m.tokenStream(ctx, in.Tokens, inActivity)
	var (
		content strings.Builder
		calls   ToolCallAssembler
		finish  string
		used    int
		beat    time.Time
	)
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ModelOutput{}, beats.withProgress(ctx, m.classify(ctx, req.Model, err, state))
		}
		if inActivity && beats == nil && time.Since(beat) >= heartbeatLiveness {
			// The worker sends heartbeats often (for heartbeatStream); a
			// call that only proves it is alive needs one a second.
			activity.RecordHeartbeat(ctx)
			beat = time.Now()
		}
		if chunk.Usage != nil {
			used = chunk.Usage.TotalTokens
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue // Chat asks for one choice; ignore any others.
			}
			content.WriteString(choice.Delta.Content)
			content.WriteString(choice.Delta.Refusal)
			calls.Add(choice.Delta.ToolCalls)
			if r := string(choice.FinishReason); r != "" && choice.FinishReason != openai.FinishReasonNull {
				finish = r
			}
		}
		tokens.offer(ctx, content.String())
		beats.offer(ctx, content.String())
	}
	return ModelOutput{Content: content.String(), ToolCalls: calls.Calls(), FinishReason: finish, Tokens: used,
		Pieces: beats.finish(content.String())}, nil
}

// chatRequest converts the activity's input to go-openai's request.
func chatRequest(in ModelInput, model string) (openai.ChatCompletionRequest, error) {
	req := openai.ChatCompletionRequest{Model: model, Stream: true}
	if in.WantUsage {
		req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	for _, msg := range in.Messages {
		if msg.Role == protocol.RoleAssistant && msg.Content == "" && len(msg.ToolCalls) == 0 {
			// An empty answer tells the model nothing, and servers reject an
			// assistant message with neither content nor tool calls.
			continue
		}
		cm := openai.ChatCompletionMessage{
			Role:       msg.Role,
			Content:    msg.Content,
			Name:       msg.Name,
			ToolCallID: msg.ToolCallID,
		}
		if msg.Role == protocol.RoleTool && cm.Content == "" {
			cm.Content = emptyToolResult
		}
		for _, c := range msg.ToolCalls {
			cm.ToolCalls = append(cm.ToolCalls, openai.ToolCall{
				ID:       c.ID,
				Type:     openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: c.Name, Arguments: cmp.Or(c.Arguments, "{}")},
			})
		}
		req.Messages = append(req.Messages, cm)
	}
	for _, t := range in.Tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(emptyParameters)
		}
		if !json.Valid(params) {
			return req, fmt.Errorf("tool %s: parameters are not valid JSON", t.Name)
		}
		req.Tools = append(req.Tools, openai.Tool{
			Type: openai.ToolTypeFunction,
			Function: &openai.FunctionDefinition{
				Name:        t.Name,
				Description: t.Description,
				Parameters:  params,
			},
		})
	}
	return req, nil
}

// classify turns an error of the model call into what Temporal should do
// with it: retry it (a plain error), retry it after a delay the server asked
// for, or give up (a non-retryable application error).
func (m *Model) classify(ctx context.Context, model string, err error, state *requestState) error {
	var (
		apiErr *openai.APIError
		reqErr *openai.RequestError
		status int
		detail string
	)
	switch {
	case errors.As(err, &apiErr):
		status, detail = apiErr.HTTPStatusCode, apiErr.Message
	case errors.As(err, &reqErr):
		status, detail = reqErr.HTTPStatusCode, text.Truncate(strings.TrimSpace(string(reqErr.Body)), 500)
		// The raw body goes no further, in any failure made from err: it
		// may be long, and need not be UTF-8.
		clean := *reqErr
		clean.Body = []byte(detail)
		if reqErr.Err != nil {
			clean.Err = errors.New(text.Truncate(reqErr.Err.Error(), 500))
		}
		err = &clean
	}

	switch {
	case status == 0:
		if m.tracked && !state.sent && ctx.Err() == nil {
			// The client refused the request before sending it (an invalid
			// model name for this endpoint, unsupported parameters): the
			// same input fails the same way every time.
			msg := fmt.Sprintf("model %s: request not sent: %v", model, err)
			return temporal.NewNonRetryableApplicationError(msg, ModelRequestRejectedError, err)
		}
		// The connection failed or the stream broke (or carried an error
		// event, which has no status): try again.
		return fmt.Errorf("model %s: %w", model, err)
	case status == http.StatusTooManyRequests:
		if state.retryAfter > 0 {
			msg := fmt.Sprintf("model %s: rate limited (429), retry after %s: %s", model, state.retryAfter, detail)
			return temporal.NewApplicationErrorWithOptions(msg, ModelRateLimitedError, temporal.ApplicationErrorOptions{
				Cause:          err,
				NextRetryDelay: state.retryAfter,
			})
		}
		return fmt.Errorf("model %s: rate limited (429): %w", model, err)
	case status >= 500, status == http.StatusRequestTimeout, status == http.StatusConflict:
		// 408 and 409 are transient too; OpenAI's own SDKs retry them.
		return fmt.Errorf("model %s: server answered %d: %w", model, status, err)
	case status >= 400:
		msg := fmt.Sprintf("model %s: server rejected the request with %d %s: %s",
			model, status, http.StatusText(status), detail)
		if status == http.StatusBadRequest && (contextTooLong(detail) || contextTooLong(apiErrorCode(err))) {
			return temporal.NewNonRetryableApplicationError(msg, ModelContextTooLongError, err)
		}
		return temporal.NewNonRetryableApplicationError(msg, ModelRequestRejectedError, err)
	default:
		return fmt.Errorf("model %s: unexpected status %d: %w", model, status, err)
	}
}

// tokenStream returns the batcher of one call's answer text, or nil when
// nobody asked for tokens by signal or nobody can deliver them.
func (m *Model) tokenStream(ctx context.Context, target *TokenTarget, inActivity bool) *tokenStream {
	if target == nil || target.Heartbeat || m.Tokens == nil {
		return nil
	}
	t := &tokenStream{
		sink:       m.Tokens,
		target:     *target,
		attempt:    1,
		interval:   cmp.Or(m.FlushInterval, protocol.DefaultFlushInterval),
		maxBatches: cmp.Or(m.MaxBatches, DefaultMaxBatches),
	}
	if inActivity {
		t.attempt = activity.GetInfo(ctx).Attempt
	}
	return t
}

// tokenStream sends the text of one model call to a TokenSink in batches: the
// first as soon as there is text, each next one when FlushInterval has passed
// since the previous and there is new text, and none after MaxBatches. It
// sends no final batch: the activity's result carries the whole text.
type tokenStream struct {
	sink       TokenSink
	target     TokenTarget
	attempt    int32
	interval   time.Duration
	maxBatches int

	sent    int // bytes of the text already sent
	batches int
	last    time.Time // when the previous batch was sent
	stopped bool      // the sink failed; send nothing more
}

// offer gives the batcher the text so far; it sends a batch when one is due.
// The sink's errors are logged and end the streaming of this call's tokens,
// never the call.
func (t *tokenStream) offer(ctx context.Context, content string) {
	if t == nil || t.stopped || t.batches >= t.maxBatches || len(content) == t.sent {
		return
	}
	if t.batches > 0 && time.Since(t.last) < t.interval {
		return
	}
	batch := TokenBatch{Step: t.target.Step, Attempt: t.attempt, Offset: t.sent, Text: content[t.sent:]}
	if err := t.sink.SendTokens(ctx, t.target, batch); err != nil {
		t.stopped = true
		logger(ctx).Warn("Sending tokens failed; the rest of the answer comes with the result",
			"workflowId", t.target.WorkflowID, "step", t.target.Step, "offset", t.sent, "error", err)
		return
	}
	t.sent = len(content)
	t.batches++
	t.last = time.Now()
}

// NextPiece returns the token event that makes the text the events of a
// call spell so far (published) follow text, if one is needed. While an
// attempt streams (final false), text that is still a prefix of published
// is a retry catching up and needs none; a text that departs from
// published starts it again (Reset). The final answer must match exactly.
func NextPiece(published, text string, final bool) (protocol.TokenPiece, bool) {
	switch {
	case text == published:
		return protocol.TokenPiece{}, false
	case strings.HasPrefix(text, published):
		return protocol.TokenPiece{Data: text[len(published):]}, true
	case !final && strings.HasPrefix(published, text):
		return protocol.TokenPiece{}, false
	}
	return protocol.TokenPiece{Data: text, Reset: true}, true
}

// Spell returns the text token events spell, applied in order.
func Spell(pieces []protocol.TokenPiece) string {
	var b strings.Builder
	for _, p := range pieces {
		if p.Reset {
			b.Reset()
		}
		b.WriteString(p.Data)
	}
	return b.String()
}

// heartbeatLiveness is how often a call that streams by heartbeat records
// its details while no new token event is due (the model is writing tool
// calls, or nothing): often enough for any heartbeat timeout worth setting.
const heartbeatLiveness = time.Second

// heartbeatStream keeps one model call's token events in the activity's
// heartbeat details (TokenTarget.Heartbeat): a piece as soon as there is
// text, each next one when FlushInterval has passed and there is new text.
// The SDK sends the newest details at most once a throttle interval
// (WorkerOptions sets it to protocol.DefaultFlushInterval); none of it is history.
//
// Nothing is recorded before the call has run one interval: a call that
// answers sooner sends no heartbeat at all (each is a write on the
// server, and most tool-asking answers take milliseconds), and its pieces
// reach the turn with its result. A piece made before then is recorded
// when the interval is up, by a timer, so a slow model's first words are
// not held until its next chunk.
//
// An attempt after the first begins with the details its predecessor left
// on the server: those are what the API may have shown, so they stay, and
// the new attempt's text follows them as NextPiece says.
type heartbeatStream struct {
	interval time.Duration
	started  time.Time
	piece    time.Time // when this attempt made its last piece

	// mu guards what the first record's timer reads and writes.
	mu        sync.Mutex
	progress  protocol.TokenProgress
	published string    // the text progress spells
	beat      time.Time // when the details were last recorded
	first     *time.Timer
	done      bool // the call has returned: the timer records nothing
}

// heartbeatStream returns the heartbeat streamer of one call, or nil when the
// call does not stream by heartbeat.
func (m *Model) heartbeatStream(ctx context.Context, target *TokenTarget, inActivity bool) *heartbeatStream {
	if target == nil || !target.Heartbeat || !inActivity {
		return nil
	}
	now := time.Now()
	h := &heartbeatStream{progress: protocol.TokenProgress{Step: target.Step}, interval: cmp.Or(m.FlushInterval, protocol.DefaultFlushInterval), started: now, beat: now}
	if activity.HasHeartbeatDetails(ctx) {
		var prev protocol.TokenProgress
		if err := activity.GetHeartbeatDetails(ctx, &prev); err == nil && prev.Step == target.Step {
			h.progress.Pieces = prev.Pieces
			h.published = Spell(prev.Pieces)
		} else if err != nil {
			logger(ctx).Warn("The previous attempt's token events cannot be read; this attempt starts the answer again",
				"step", target.Step, "error", err)
		}
	}
	return h
}

// offer gives the streamer the text so far; it adds a token event when one
// is due, and records the details then (or, early in the call, when the
// first interval is up), or when heartbeatLiveness has passed without.
func (h *heartbeatStream) offer(ctx context.Context, content string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.piece.IsZero() || now.Sub(h.piece) >= h.interval {
		if p, ok := NextPiece(h.published, content, false); ok {
			h.add(p)
			h.piece = now
			if early := h.started.Add(h.interval).Sub(now); early > 0 {
				if h.first == nil {
					h.first = time.AfterFunc(early, func() { h.recordLate(ctx) })
				}
				return
			}
			h.record(ctx, now)
			return
		}
	}
	if now.Sub(h.beat) >= heartbeatLiveness {
		h.record(ctx, now)
	}
}

func (h *heartbeatStream) add(p protocol.TokenPiece) {
	h.progress.Pieces = append(h.progress.Pieces, p)
	if p.Reset {
		h.published = ""
	}
	h.published += p.Data
}

// record records the details; h.mu is held.
func (h *heartbeatStream) record(ctx context.Context, now time.Time) {
	activity.RecordHeartbeat(ctx, h.progress)
	h.beat = now
}

// recordLate is the first record's timer: the pieces made in the call's
// first interval, unless the call has returned.
func (h *heartbeatStream) recordLate(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		h.record(ctx, time.Now())
	}
}

// end stops the first record's timer: the call returns its pieces itself.
func (h *heartbeatStream) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	if h.first != nil {
		h.first.Stop()
	}
}

// finish returns the call's token events, completed by the whole answer.
func (h *heartbeatStream) finish(content string) []protocol.TokenPiece {
	if h == nil {
		return nil
	}
	h.end()
	if p, ok := NextPiece(h.published, content, true); ok {
		h.add(p)
	}
	return h.progress.Pieces
}

// withProgress gives err the call's token events so far as its details, so
// the turn logs them however the call ends: a cancelled call answers a
// CanceledError, any other failure an ApplicationError with the same
// message, type, retryability and delay.
func (h *heartbeatStream) withProgress(ctx context.Context, err error) error {
	if h == nil || err == nil {
		return err
	}
	h.end()
	if errors.Is(ctx.Err(), context.Canceled) {
		return temporal.NewCanceledError(h.progress)
	}
	opts := temporal.ApplicationErrorOptions{Details: []any{h.progress}}
	msg, kind := err.Error(), ""
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		msg, kind = appErr.Message(), appErr.Type()
		opts.NonRetryable, opts.Cause, opts.NextRetryDelay = appErr.NonRetryable(), appErr.Unwrap(), appErr.NextRetryDelay()
	}
	return temporal.NewApplicationErrorWithOptions(msg, kind, opts)
}

// logger returns the activity's logger in an activity and slog's default
// logger elsewhere (in tests that call Chat directly).
func logger(ctx context.Context) interface{ Warn(string, ...any) } {
	if activity.IsActivity(ctx) {
		return activity.GetLogger(ctx)
	}
	return slog.Default()
}

// requestState is what requestTracker learns about the HTTP request of one
// Chat call. Chat hands it down in the request's context.
type requestState struct {
	sent       bool          // the client handed the request to the network
	retryAfter time.Duration // a 429's Retry-After
}

type requestStateKey struct{}

// requestTracker is the client's HTTPDoer: it notes in the request's
// requestState that the request went out and what a 429's Retry-After says,
// which go-openai's errors do not carry.
type requestTracker struct {
	next openai.HTTPDoer
}

// Do sends req through the wrapped HTTPDoer.
func (t requestTracker) Do(req *http.Request) (*http.Response, error) {
	state, _ := req.Context().Value(requestStateKey{}).(*requestState)
	if state != nil {
		state.sent = true
	}
	resp, err := t.next.Do(req)
	if state != nil && resp != nil && resp.StatusCode == http.StatusTooManyRequests {
		state.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return resp, err
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
// It returns 0 when the header is missing, malformed or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(secs)*time.Second, 0)
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0)
	}
	return 0
}

// apiErrorCode is the code of an OpenAI-style error, or "".
func apiErrorCode(err error) string {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		if code, ok := apiErr.Code.(string); ok {
			return code
		}
	}
	return ""
}
