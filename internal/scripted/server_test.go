package scripted_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
)

var twoCalls = []protocol.ToolCall{
	{ID: "call_a", Name: "Read", Arguments: `{"file_path":"README.md"}`},
	{ID: "call_b", Name: "Bash", Arguments: `{"command":"echo héllo wörld"}`},
}

// start serves s on a local port and returns a client for it.
func start(t *testing.T, s *scripted.Server) *openai.Client {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = srv.URL + "/v1"
	return openai.NewClientWithConfig(cfg)
}

// receive reads a whole stream with go-openai's stream client.
func receive(t *testing.T, client *openai.Client) []openai.ChatCompletionStreamResponse {
	t.Helper()
	stream, err := client.CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Model:    "any",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}},
	})
	require.NoError(t, err)
	defer stream.Close()
	var chunks []openai.ChatCompletionStreamResponse
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return chunks
		}
		require.NoError(t, err)
		chunks = append(chunks, chunk)
	}
}

func toolDeltas(chunks []openai.ChatCompletionStreamResponse) [][]openai.ToolCall {
	var out [][]openai.ToolCall
	for _, c := range chunks {
		if len(c.Choices) > 0 && len(c.Choices[0].Delta.ToolCalls) > 0 {
			out = append(out, c.Choices[0].Delta.ToolCalls)
		}
	}
	return out
}

func contentOf(chunks []openai.ChatCompletionStreamResponse) (string, int) {
	var b strings.Builder
	n := 0
	for _, c := range chunks {
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			b.WriteString(c.Choices[0].Delta.Content)
			n++
		}
	}
	return b.String(), n
}

func TestOpenAIStyleStreamsInterleavedFragmentsWithIDAndNameFirst(t *testing.T) {
	client := start(t, scripted.New(scripted.Always(scripted.Reply{
		Content: "Reading and listing now.", ToolCalls: twoCalls, Style: scripted.StyleOpenAI,
	})))
	chunks := receive(t, client)

	text, pieces := contentOf(chunks)
	require.Equal(t, "Reading and listing now.", text)
	require.Greater(t, pieces, 1)

	deltas := toolDeltas(chunks)
	seen := map[int]bool{}
	var order []int
	args := map[int]string{}
	for _, d := range deltas {
		require.Len(t, d, 1, "one call per chunk")
		tc := d[0]
		require.NotNil(t, tc.Index)
		if !seen[*tc.Index] {
			seen[*tc.Index] = true
			require.Equal(t, twoCalls[*tc.Index].ID, tc.ID, "the first delta carries the id")
			require.Equal(t, twoCalls[*tc.Index].Name, tc.Function.Name, "the first delta carries the name")
		} else {
			require.Empty(t, tc.ID)
			require.Empty(t, tc.Function.Name)
		}
		order = append(order, *tc.Index)
		args[*tc.Index] += tc.Function.Arguments
	}
	require.Equal(t, twoCalls[0].Arguments, args[0])
	require.Equal(t, twoCalls[1].Arguments, args[1])
	require.Equal(t, []int{0, 1, 0}, order[:3], "calls are interleaved")

	last := chunks[len(chunks)-1].Choices[0]
	require.Equal(t, openai.FinishReasonToolCalls, last.FinishReason)
}

func TestVLLMStyleRepeatsIDOnEveryTinyFragment(t *testing.T) {
	client := start(t, scripted.New(scripted.Always(scripted.Reply{
		Content: "Reading.", ToolCalls: twoCalls, Style: scripted.StyleVLLM,
	})))
	chunks := receive(t, client)

	text, _ := contentOf(chunks)
	require.Equal(t, "Reading.", text)

	args := map[int]string{}
	names := map[int]int{}
	for _, d := range toolDeltas(chunks) {
		require.Len(t, d, 1)
		tc := d[0]
		require.NotNil(t, tc.Index)
		require.Equal(t, twoCalls[*tc.Index].ID, tc.ID, "the id is repeated on every delta")
		require.LessOrEqual(t, len([]rune(tc.Function.Arguments)), 2)
		if tc.Function.Name != "" {
			names[*tc.Index]++
		}
		args[*tc.Index] += tc.Function.Arguments
	}
	require.Equal(t, map[int]int{0: 1, 1: 1}, names, "the name comes once per call")
	require.Equal(t, twoCalls[0].Arguments, args[0])
	require.Equal(t, twoCalls[1].Arguments, args[1])
}

func TestOllamaStyleSendsWholeCallsInOneChunkWithoutIndex(t *testing.T) {
	client := start(t, scripted.New(scripted.Always(scripted.Reply{
		Content: "Reading.", ToolCalls: twoCalls, Style: scripted.StyleOllama,
	})))
	chunks := receive(t, client)

	deltas := toolDeltas(chunks)
	require.Len(t, deltas, 1, "all calls in one chunk")
	require.Len(t, deltas[0], 2)
	for i, tc := range deltas[0] {
		require.Nil(t, tc.Index)
		require.Equal(t, twoCalls[i].ID, tc.ID)
		require.Equal(t, twoCalls[i].Name, tc.Function.Name)
		require.Equal(t, twoCalls[i].Arguments, tc.Function.Arguments)
	}
}

// textPieces are the text deltas of a streamed answer, in order.
func textPieces(chunks []openai.ChatCompletionStreamResponse) []string {
	var out []string
	for _, c := range chunks {
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			out = append(out, c.Choices[0].Delta.Content)
		}
	}
	return out
}

func TestChunkBytesSendsTheTextInPiecesOfWholeWordsUpToThatSize(t *testing.T) {
	long := strings.Repeat("x", 30)
	text := "alpha beta gamma delta " + long + " omega"

	// By default, a word a chunk.
	chunks := receive(t, start(t, scripted.New(scripted.Always(scripted.Reply{Content: text}))))
	require.Equal(t, []string{"alpha ", "beta ", "gamma ", "delta ", long + " ", "omega"}, textPieces(chunks))

	// With ChunkBytes, as many words as fit, whatever the style; a longer
	// word alone.
	for _, style := range []scripted.ChunkStyle{scripted.StyleOpenAI, scripted.StyleVLLM, scripted.StyleOllama} {
		chunks := receive(t, start(t, scripted.New(scripted.Always(scripted.Reply{Content: text, Style: style, ChunkBytes: 12}))))
		require.Equal(t, []string{"alpha beta ", "gamma delta ", long + " ", "omega"}, textPieces(chunks), style.String())
	}

	// A megabyte in pieces of 64 KiB, each as many words of 14 bytes as
	// fit but the last.
	const word, size = "thirteen-char ", 64 << 10
	big := strings.Repeat(word, 1<<20/len(word))
	chunks = receive(t, start(t, scripted.New(scripted.Always(scripted.Reply{Content: big, ChunkBytes: size}))))
	pieces := textPieces(chunks)
	require.True(t, strings.Join(pieces, "") == big, "the pieces make the text")
	require.Len(t, pieces, 17)
	for i, p := range pieces[:len(pieces)-1] {
		require.Equal(t, size/len(word)*len(word), len(p), "piece %d", i)
		require.True(t, strings.HasSuffix(p, " "), "cut after a space")
	}
}

func TestStreamIsServerSentEventsEndingWithDone(t *testing.T) {
	srv := httptest.NewServer(scripted.New(scripted.Always(scripted.Reply{Content: "a b c"})))
	t.Cleanup(srv.Close)

	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			require.True(t, strings.HasPrefix(line, "data: "), "line %q", line)
			events = append(events, strings.TrimPrefix(line, "data: "))
		}
	}
	require.NoError(t, sc.Err())
	require.Equal(t, "[DONE]", events[len(events)-1])
	for _, e := range events[:len(events)-1] {
		var chunk map[string]any
		require.NoError(t, json.Unmarshal([]byte(e), &chunk))
		require.Equal(t, "chat.completion.chunk", chunk["object"])
	}
}

func TestNonStreamedRequestGetsWholeCompletion(t *testing.T) {
	client := start(t, scripted.New(scripted.Always(scripted.Reply{Content: "Hello there.", ToolCalls: twoCalls})))
	resp, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Model:    "m",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}},
	})
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	msg := resp.Choices[0].Message
	require.Equal(t, "Hello there.", msg.Content)
	require.Len(t, msg.ToolCalls, 2)
	require.Equal(t, "call_b", msg.ToolCalls[1].ID)
	require.Equal(t, twoCalls[1].Arguments, msg.ToolCalls[1].Function.Arguments)
	require.Equal(t, openai.FinishReasonToolCalls, resp.Choices[0].FinishReason)
}

func TestStatusReplyIsOpenAIStyleErrorWithHeaders(t *testing.T) {
	s := scripted.New(scripted.Always(scripted.Reply{
		Status: http.StatusTooManyRequests, Content: "slow down", Header: map[string]string{"Retry-After": "3"},
	}))
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "3", resp.Header.Get("Retry-After"))

	cfg := openai.DefaultConfig("")
	cfg.BaseURL = srv.URL + "/v1"
	_, err = openai.NewClientWithConfig(cfg).CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{Model: "m"})
	var apiErr *openai.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusTooManyRequests, apiErr.HTTPStatusCode)
	require.Equal(t, "slow down", apiErr.Message)
}

func TestARequestIsRecordedAsGoOpenAIReadsIt(t *testing.T) {
	bodies := []string{
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[` +
			`{"role":"system","content":"be brief"},{"role":"user","content":"hi","name":"ann"},` +
			`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"Read","arguments":"{}"}}]},` +
			`{"role":"tool","content":"ok","tool_call_id":"c1"}],` +
			`"tools":[{"type":"function","function":{"name":"Read","parameters":{"type":"object"}}}]}`,
		// Content as a list of parts.
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		`{"model":"m","messages":[]}`,
		`{"model":"m"}`,
	}
	s := scripted.New(scripted.Always(scripted.Reply{Content: "ok"}))
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	var want []openai.ChatCompletionRequest
	for _, body := range bodies {
		var req openai.ChatCompletionRequest
		require.NoError(t, json.Unmarshal([]byte(body), &req))
		want = append(want, req)
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	require.Equal(t, want, s.Requests())
	require.Equal(t, "hi", s.Requests()[1].Messages[0].MultiContent[0].Text)
}

func TestInvalidJSONBodyIsRejectedWith400(t *testing.T) {
	s := scripted.New(scripted.Always(scripted.Reply{Content: "never"}))
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Contains(t, body.Error.Message, "invalid JSON")
	require.Equal(t, "invalid_request_error", body.Error.Type)
	require.Empty(t, s.Requests())
}

func TestServerRecordsEveryRequest(t *testing.T) {
	s := scripted.New(scripted.Always(scripted.Reply{Content: "ok"}))
	client := start(t, s)
	for _, q := range []string{"one", "two"} {
		_, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
			Model:    "m",
			Messages: []openai.ChatCompletionMessage{{Role: "user", Content: q}},
		})
		require.NoError(t, err)
	}
	reqs := s.Requests()
	require.Len(t, reqs, 2)
	require.Equal(t, "one", reqs[0].Messages[0].Content)
	require.Equal(t, "two", reqs[1].Messages[0].Content)

	reqs[0].Model = "changed"
	require.Equal(t, "m", s.Requests()[0].Model, "Requests returns a copy")
}

func TestKeepNoRequestsRecordsNoneAndStillAnswers(t *testing.T) {
	var seen []string
	s := scripted.New(func(req openai.ChatCompletionRequest) scripted.Reply {
		seen = append(seen, req.Messages[0].Content)
		return scripted.Reply{Content: "ok"}
	}, scripted.KeepNoRequests())
	client := start(t, s)
	for _, q := range []string{"one", "two"} {
		resp, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
			Model:    "m",
			Messages: []openai.ChatCompletionMessage{{Role: "user", Content: q}},
		})
		require.NoError(t, err)
		require.Equal(t, "ok", resp.Choices[0].Message.Content)
	}
	require.Equal(t, []string{"one", "two"}, seen, "the script reads every request")
	require.Empty(t, s.Requests())
	require.Empty(t, s.RequestTimes())
}

func TestModelsListsTheScriptedModel(t *testing.T) {
	client := start(t, scripted.New(scripted.Demo()))
	models, err := client.ListModels(context.Background())
	require.NoError(t, err)
	require.Len(t, models.Models, 1)
	require.Equal(t, scripted.ModelName, models.Models[0].ID)
}

// readEvents reads the data of a streamed answer's events as they come.
func readEvents(t *testing.T, body io.Reader) <-chan string {
	t.Helper()
	out := make(chan string, 64)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			if line := sc.Text(); line != "" {
				out <- strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}

func TestHoldLetsHoldAfterChunksOutAndTheRestOnlyOnRelease(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(scripted.New(scripted.Always(scripted.Reply{
		Content: "one two three four", Hold: hold, HoldAfter: 2,
	})))
	t.Cleanup(srv.Close)

	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	events := readEvents(t, resp.Body)
	for range 2 {
		select {
		case <-events:
		case <-time.After(5 * time.Second):
			t.Fatal("the chunks before the hold did not come")
		}
	}
	// The release comes a little later, so that an answer that was not
	// held would be read before it.
	var released atomic.Bool
	time.AfterFunc(50*time.Millisecond, func() {
		released.Store(true)
		close(hold)
	})
	var rest []string
	for e := range events {
		require.True(t, released.Load(), "chunk %q came before the release", e)
		rest = append(rest, e)
	}
	require.Equal(t, "[DONE]", rest[len(rest)-1])
	require.Len(t, rest, 5, "three words and the finish, then [DONE]")
}

func TestHeldAnswerEndsWhenTheClientLeaves(t *testing.T) {
	never := make(chan struct{})
	s := scripted.New(scripted.Always(scripted.Reply{Content: "never", Hold: never}))
	srv := httptest.NewServer(s)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return len(s.Requests()) == 1 }, 5*time.Second, 5*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("a held answer sent its status line: %v", err)
	default:
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	srv.Close() // waits for the handler: it must have returned
}

func TestCorruptChunkBreaksTheStreamForTheClient(t *testing.T) {
	client := start(t, scripted.New(scripted.Always(scripted.Reply{Content: "a b c", Corrupt: "{not json"})))
	stream, err := client.CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{Model: "m"})
	require.NoError(t, err)
	defer stream.Close()
	first, err := stream.Recv()
	require.NoError(t, err, "the first chunk is whole")
	require.Equal(t, openai.ChatMessageRoleAssistant, first.Choices[0].Delta.Role)
	_, err = stream.Recv()
	require.Error(t, err)
	require.NotErrorIs(t, err, io.EOF)
}

func TestRequestTimesSayWhenEachRequestArrived(t *testing.T) {
	s := scripted.New(scripted.Always(scripted.Reply{Content: "ok"}))
	client := start(t, s)
	before := time.Now()
	for range 2 {
		_, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "m"})
		require.NoError(t, err)
	}
	after := time.Now()
	times := s.RequestTimes()
	require.Len(t, times, len(s.Requests()))
	require.Len(t, times, 2)
	require.False(t, times[0].Before(before))
	require.False(t, times[1].Before(times[0]))
	require.False(t, after.Before(times[1]))
}

func TestARequestPastTheWindowIsRefusedAsOpenAIRefusesIt(t *testing.T) {
	client := start(t, scripted.New(scripted.Always(scripted.Reply{Content: "fits"}), scripted.Window(1000)))
	ask := func(content string) (openai.ChatCompletionResponse, error) {
		return client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
			Model: "any", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: content}},
		})
	}

	resp, err := ask(strings.Repeat("a", 3000))
	require.NoError(t, err, "about 760 tokens fit")
	require.Equal(t, "fits", resp.Choices[0].Message.Content)

	_, err = ask(strings.Repeat("a", 4000))
	var apiErr *openai.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.HTTPStatusCode)
	require.Equal(t, "context_length_exceeded", apiErr.Code)
	require.Equal(t, "invalid_request_error", apiErr.Type)
	require.Regexp(t, `^This model's maximum context length is 1000 tokens\. However, your messages resulted in 10\d\d tokens\.`, apiErr.Message)
}
