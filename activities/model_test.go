package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
)

// serve starts s and returns a Model that calls it.
func serve(t *testing.T, s *scripted.Server, sink activities.TokenSink) *activities.Model {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return activities.NewModel(srv.URL+"/v1", "", "test-model", sink)
}

func userAsks(q string) activities.ModelInput {
	return activities.ModelInput{Messages: []protocol.Message{{Role: protocol.RoleUser, Content: q}}}
}

// recordingSink records the batches it is sent; with fail set it fails them.
type recordingSink struct {
	mu      sync.Mutex
	batches []activities.TokenBatch
	targets []activities.TokenTarget
	fail    bool
}

func (s *recordingSink) SendTokens(_ context.Context, target activities.TokenTarget, batch activities.TokenBatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, batch)
	s.targets = append(s.targets, target)
	if s.fail {
		return errors.New("signal failed")
	}
	return nil
}

func (s *recordingSink) recorded() []activities.TokenBatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]activities.TokenBatch(nil), s.batches...)
}

// longText is an answer of many words, so that it streams in many chunks.
func longText(words int) string {
	var b strings.Builder
	for i := range words {
		fmt.Fprintf(&b, "word%d ", i)
	}
	return strings.TrimSpace(b.String())
}

var threeCalls = []protocol.ToolCall{
	{ID: "call_1", Name: "Read", Arguments: `{"file_path":"README.md"}`},
	{ID: "call_2", Name: "Write", Arguments: `{"file_path":"notes/ü.txt","content":"line one\nline \"two\""}`},
	{ID: "call_3", Name: "Bash", Arguments: `{"command":"ls -la"}`},
}

func TestEveryChunkStyleAssemblesTheSameAnswer(t *testing.T) {
	for _, style := range []scripted.ChunkStyle{scripted.StyleOpenAI, scripted.StyleVLLM, scripted.StyleOllama} {
		t.Run(style.String(), func(t *testing.T) {
			m := serve(t, scripted.New(scripted.Always(scripted.Reply{
				Content: "I'll read, write and list.", ToolCalls: threeCalls, Style: style,
			})), nil)
			out, err := m.Chat(context.Background(), userAsks("go"))
			require.NoError(t, err)
			require.Equal(t, activities.ModelOutput{
				Content:      "I'll read, write and list.",
				ToolCalls:    threeCalls,
				FinishReason: "tool_calls",
			}, out)
		})
	}
}

func TestCallsWithoutIDsGetSynthesizedIDs(t *testing.T) {
	calls := []protocol.ToolCall{{Name: "Read", Arguments: `{"file_path":"a"}`}, {Name: "Bash"}}
	for _, style := range []scripted.ChunkStyle{scripted.StyleOpenAI, scripted.StyleVLLM, scripted.StyleOllama} {
		t.Run(style.String(), func(t *testing.T) {
			m := serve(t, scripted.New(scripted.Always(scripted.Reply{ToolCalls: calls, Style: style})), nil)
			out, err := m.Chat(context.Background(), userAsks("go"))
			require.NoError(t, err)
			require.Equal(t, []protocol.ToolCall{
				{ID: "call_0", Name: "Read", Arguments: `{"file_path":"a"}`},
				{ID: "call_1", Name: "Bash", Arguments: `{}`},
			}, out.ToolCalls)
		})
	}
}

func TestTextDeltasAreConcatenated(t *testing.T) {
	text := longText(40) + " — ünïcödé ✓"
	for _, style := range []scripted.ChunkStyle{scripted.StyleOpenAI, scripted.StyleVLLM} {
		t.Run(style.String(), func(t *testing.T) {
			m := serve(t, scripted.New(scripted.Always(scripted.Reply{Content: text, Style: style})), nil)
			out, err := m.Chat(context.Background(), userAsks("talk"))
			require.NoError(t, err)
			require.Equal(t, text, out.Content)
			require.Empty(t, out.ToolCalls)
			require.Equal(t, "stop", out.FinishReason)
		})
	}
}

func TestEmptyAnswerIsNotAnError(t *testing.T) {
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{})), nil)
	out, err := m.Chat(context.Background(), userAsks("say nothing"))
	require.NoError(t, err)
	require.Equal(t, activities.ModelOutput{FinishReason: "stop"}, out)
}

func TestRequestCarriesConversationToolsAndModel(t *testing.T) {
	s := scripted.New(scripted.Always(scripted.Reply{Content: "ok"}))
	m := serve(t, s, nil)
	in := activities.ModelInput{
		Messages: []protocol.Message{
			{Role: protocol.RoleSystem, Content: "be brief"},
			{Role: protocol.RoleUser, Content: "list files"},
			{Role: protocol.RoleAssistant, ToolCalls: []protocol.ToolCall{{ID: "c1", Name: "Bash", Arguments: `{"command":"ls"}`}, {ID: "c2", Name: "Read"}}},
			{Role: protocol.RoleTool, ToolCallID: "c1", Name: "Bash", Content: "a.txt"},
			{Role: protocol.RoleTool, ToolCallID: "c2", Name: "Read"},
			{Role: protocol.RoleAssistant},
			{Role: protocol.RoleUser, Content: "thanks"},
		},
		Tools: []protocol.ToolSpec{
			{Name: "Bash", Description: "run a command", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
			{Name: "Noop", Description: "no arguments"},
		},
	}
	_, err := m.Chat(context.Background(), in)
	require.NoError(t, err)
	in.Model = "other-model"
	_, err = m.Chat(context.Background(), in)
	require.NoError(t, err)

	reqs := s.Requests()
	require.Len(t, reqs, 2)
	req := reqs[0]
	require.True(t, req.Stream)
	require.Equal(t, "test-model", req.Model)
	require.Equal(t, "other-model", reqs[1].Model)

	require.Len(t, req.Messages, 6, "the empty assistant answer is left out")
	require.Equal(t, []string{"system", "user", "assistant", "tool", "tool", "user"}, roles(req.Messages))
	asst := req.Messages[2]
	require.Len(t, asst.ToolCalls, 2)
	require.Equal(t, openai.ToolCall{ID: "c1", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "Bash", Arguments: `{"command":"ls"}`}}, asst.ToolCalls[0])
	require.Equal(t, "{}", asst.ToolCalls[1].Function.Arguments)
	require.Equal(t, "c1", req.Messages[3].ToolCallID)
	require.Equal(t, "a.txt", req.Messages[3].Content)
	require.NotEmpty(t, req.Messages[4].Content, "an empty tool result still has content")

	require.Len(t, req.Tools, 2)
	require.Equal(t, openai.ToolTypeFunction, req.Tools[0].Type)
	require.Equal(t, "Bash", req.Tools[0].Function.Name)
	params, err := json.Marshal(req.Tools[0].Function.Parameters)
	require.NoError(t, err)
	require.JSONEq(t, string(in.Tools[0].Parameters), string(params))
	params, err = json.Marshal(req.Tools[1].Function.Parameters)
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"object","properties":{}}`, string(params))
}

func roles(msgs []openai.ChatCompletionMessage) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Role)
	}
	return out
}

func TestTokensStreamInOrderedContiguousBoundedBatches(t *testing.T) {
	text := longText(80)
	sink := &recordingSink{}
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{Content: text}), scripted.ChunkDelay(2*time.Millisecond)), sink)
	m.FlushInterval = 10 * time.Millisecond
	m.MaxBatches = 5

	in := userAsks("talk")
	in.Tokens = &activities.TokenTarget{WorkflowID: "turn-1", RunID: "run-1", Step: 3}
	out, err := m.Chat(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, text, out.Content)

	batches := sink.recorded()
	require.GreaterOrEqual(t, len(batches), 2, "a paced answer streams in several batches")
	require.LessOrEqual(t, len(batches), 5)
	var streamed strings.Builder
	for i, b := range batches {
		require.Equal(t, streamed.Len(), b.Offset, "batch %d starts where the previous ended", i)
		require.NotEmpty(t, b.Text)
		require.Equal(t, 3, b.Step)
		require.EqualValues(t, 1, b.Attempt)
		require.Equal(t, *in.Tokens, sink.targets[i])
		streamed.WriteString(b.Text)
	}
	require.True(t, strings.HasPrefix(out.Content, streamed.String()))
}

func TestTokensStopAfterMaxBatchesAndTheResultCarriesTheRest(t *testing.T) {
	text := longText(60)
	sink := &recordingSink{}
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{Content: text}), scripted.ChunkDelay(time.Millisecond)), sink)
	m.FlushInterval = time.Nanosecond
	m.MaxBatches = 3

	in := userAsks("talk")
	in.Tokens = &activities.TokenTarget{WorkflowID: "turn-1", Step: 1}
	out, err := m.Chat(context.Background(), in)
	require.NoError(t, err)

	batches := sink.recorded()
	require.Len(t, batches, 3)
	last := batches[len(batches)-1]
	require.Less(t, last.Offset+len(last.Text), len(out.Content), "no final flush: the result has the rest")
	require.Equal(t, text, out.Content)
}

func TestFailingTokenSinkDoesNotFailTheCall(t *testing.T) {
	text := longText(30)
	sink := &recordingSink{fail: true}
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{Content: text}), scripted.ChunkDelay(time.Millisecond)), sink)
	m.FlushInterval = time.Nanosecond

	in := userAsks("talk")
	in.Tokens = &activities.TokenTarget{WorkflowID: "gone", Step: 1}
	out, err := m.Chat(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, text, out.Content)
	require.Len(t, sink.recorded(), 1, "after a failed send no more are tried")
}

func TestNoTokensAreSentWithoutATarget(t *testing.T) {
	sink := &recordingSink{}
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{Content: longText(20)})), sink)
	_, err := m.Chat(context.Background(), userAsks("talk"))
	require.NoError(t, err)
	require.Empty(t, sink.recorded())
}

func TestServerErrorIsRetryableAndNotRetriedByTheClient(t *testing.T) {
	s := scripted.New(scripted.Always(scripted.Reply{Status: http.StatusInternalServerError, Content: "boom"}))
	m := serve(t, s, nil)
	_, err := m.Chat(context.Background(), userAsks("hi"))
	require.Error(t, err)
	requireRetryable(t, err)
	require.Contains(t, err.Error(), "500")
	require.Len(t, s.Requests(), 1, "the client does not retry on its own")
}

func TestRejectedRequestIsNonRetryable(t *testing.T) {
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{Status: http.StatusBadRequest, Content: "unknown parameter: frobnicate"})), nil)
	_, err := m.Chat(context.Background(), userAsks("hi"))
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.True(t, appErr.NonRetryable())
	require.Equal(t, activities.ModelRequestRejectedError, appErr.Type())
	require.Contains(t, appErr.Error(), "400")
	require.Contains(t, appErr.Error(), "unknown parameter: frobnicate")
}

func TestARequestLongerThanTheModelsContextIsToldApart(t *testing.T) {
	for _, msg := range []string{
		"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
		"prompt is too long: 210000 tokens > 200000 maximum",
	} {
		m := serve(t, scripted.New(scripted.Always(scripted.Reply{Status: http.StatusBadRequest, Content: msg})), nil)
		_, err := m.Chat(context.Background(), userAsks("hi"))
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr)
		require.True(t, appErr.NonRetryable())
		require.Equal(t, activities.ModelContextTooLongError, appErr.Type(), msg)
	}
}

func TestAnErrorBodyThatIsNotUTF8StillMakesAFailureTemporalCanSend(t *testing.T) {
	// Not a JSON error (a proxy's page), cut at 500 bytes in the middle of
	// "é", with a byte that is no UTF-8 at all before it.
	body := "\xff" + strings.Repeat("x", 498) + "é and more"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	m := activities.NewModel(srv.URL+"/v1", "", "test-model", nil)

	_, err := m.Chat(context.Background(), userAsks("hi"))

	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.True(t, appErr.NonRetryable())
	require.True(t, utf8.ValidString(appErr.Error()), "%q", appErr.Error())
	require.Contains(t, appErr.Error(), "xxx…", "cut at 500 bytes")
	require.NotContains(t, appErr.Error(), "and more")
	failure := temporal.GetDefaultFailureConverter().ErrorToFailure(err)
	_, err = proto.Marshal(failure)
	require.NoError(t, err, "the failure can be sent to Temporal")
}

func TestRateLimitIsRetryable(t *testing.T) {
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{Status: http.StatusTooManyRequests, Content: "slow down"})), nil)
	_, err := m.Chat(context.Background(), userAsks("hi"))
	require.Error(t, err)
	requireRetryable(t, err)
	require.Contains(t, err.Error(), "429")
}

func TestRateLimitWithRetryAfterAsksTemporalToWait(t *testing.T) {
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{
		Status: http.StatusTooManyRequests, Content: "slow down", Header: map[string]string{"Retry-After": "7"},
	})), nil)
	_, err := m.Chat(context.Background(), userAsks("hi"))
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.False(t, appErr.NonRetryable())
	require.Equal(t, activities.ModelRateLimitedError, appErr.Type())
	require.Equal(t, 7*time.Second, appErr.NextRetryDelay())
}

func TestBrokenStreamIsRetryable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}`+"\n\n")
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-answer
	}))
	t.Cleanup(srv.Close)
	m := activities.NewModel(srv.URL+"/v1", "", "m", nil)
	_, err := m.Chat(context.Background(), userAsks("hi"))
	require.Error(t, err)
	requireRetryable(t, err)
}

func TestUnreachableServerIsRetryable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	m := activities.NewModel(url+"/v1", "", "m", nil)
	_, err := m.Chat(context.Background(), userAsks("hi"))
	require.Error(t, err)
	requireRetryable(t, err)
}

func TestRequestTheClientRefusesToSendIsNonRetryable(t *testing.T) {
	s := scripted.New(scripted.Always(scripted.Reply{Content: "never"}))
	m := serve(t, s, nil)
	in := userAsks("hi")
	in.Model = "text-davinci-003" // a completions-only model: go-openai refuses it for chat completions
	_, err := m.Chat(context.Background(), in)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.True(t, appErr.NonRetryable())
	require.Equal(t, activities.ModelRequestRejectedError, appErr.Type())
	require.Empty(t, s.Requests())
}

func TestInvalidToolSchemaIsNonRetryable(t *testing.T) {
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{Content: "never"})), nil)
	in := userAsks("hi")
	in.Tools = []protocol.ToolSpec{{Name: "Bad", Parameters: json.RawMessage(`{"type":`)}}
	_, err := m.Chat(context.Background(), in)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.True(t, appErr.NonRetryable())
}

func requireRetryable(t *testing.T, err error) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		require.False(t, appErr.NonRetryable(), "error %v must be retryable", err)
	}
}

func TestChatAsActivityHeartbeatsAndStampsTheAttempt(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	var mu sync.Mutex
	heartbeats := 0
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) {
		mu.Lock()
		heartbeats++
		mu.Unlock()
	})
	sink := &recordingSink{}
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{Content: longText(10), ToolCalls: threeCalls})), sink)
	env.RegisterActivityWithOptions(m.Chat, activity.RegisterOptions{Name: activities.ModelActivity})

	in := userAsks("go")
	in.Tokens = &activities.TokenTarget{WorkflowID: "w", Step: 2}
	val, err := env.ExecuteActivity(activities.ModelActivity, in)
	require.NoError(t, err)
	var out activities.ModelOutput
	require.NoError(t, val.Get(&out))
	require.Equal(t, threeCalls, out.ToolCalls)

	mu.Lock()
	require.Positive(t, heartbeats)
	mu.Unlock()
	batches := sink.recorded()
	require.NotEmpty(t, batches)
	require.EqualValues(t, 1, batches[0].Attempt)
}

func TestRejectedRequestStaysNonRetryableThroughTheSDK(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{Status: http.StatusUnauthorized, Content: "bad key"})), nil)
	env.RegisterActivityWithOptions(m.Chat, activity.RegisterOptions{Name: activities.ModelActivity})

	_, err := env.ExecuteActivity(activities.ModelActivity, userAsks("go"))
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.True(t, appErr.NonRetryable())
	require.Equal(t, activities.ModelRequestRejectedError, appErr.Type())
	require.Contains(t, appErr.Error(), "bad key")
}

func TestTheModelReportsTheUsageTheServerSendsWhenAskedFor(t *testing.T) {
	m := serve(t, scripted.New(scripted.Always(scripted.Reply{Content: "hello", Tokens: 42})), nil)
	in := activities.ModelInput{Messages: []protocol.Message{{Role: protocol.RoleUser, Content: "hi"}}, WantUsage: true}
	out, err := m.Chat(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, "hello", out.Content)
	require.Equal(t, 42, out.Tokens)
	in.WantUsage = false
	out, err = m.Chat(context.Background(), in)
	require.NoError(t, err)
	require.Zero(t, out.Tokens, "not asked, not sent")
}
