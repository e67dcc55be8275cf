package workflows

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// windowedModel is a model server with a context window, as OpenAI's: a
// request past it is answered 400 context_length_exceeded. A summary
// request is answered with a short summary, any other with "answer to"
// and the start of the last user message.
type windowedModel struct {
	server *scripted.Server

	// serving holds the server to one request at a time (the harness
	// sends them so) while size is that request's body length in bytes.
	serving sync.Mutex
	size    int

	mu sync.Mutex
	// sent holds the requests the server took, in order; refused counts
	// the others.
	sent    []sentRequest
	refused int
	// index, when set, numbers the user messages to look for in each
	// request (sentRequest.whole), and then the requests' messages are not
	// kept: a long conversation's would take gigabytes.
	index map[string]int
}

type sentRequest struct {
	bytes    int
	summary  bool
	messages []openai.ChatCompletionMessage
	// whole are the indexes, in windowedModel.index, of the user messages
	// the request holds whole; last is its last user message's (-1: none).
	whole []int
	last  int
}

func newWindowedModel(t *testing.T, h *harness, window int) *windowedModel {
	m := &windowedModel{}
	m.server = scripted.New(func(req openai.ChatCompletionRequest) scripted.Reply {
		summary := strings.HasPrefix(req.Messages[0].Content, foldPrompt)
		r := sentRequest{bytes: m.size, summary: summary, last: -1}
		m.mu.Lock()
		if m.index == nil {
			r.messages = req.Messages
		}
		for _, msg := range req.Messages {
			if i, ok := m.index[msg.Content]; ok && msg.Role == openai.ChatMessageRoleUser {
				r.whole, r.last = append(r.whole, i), i
			}
		}
		m.sent = append(m.sent, r)
		m.mu.Unlock()
		if summary {
			return scripted.Reply{Content: fmt.Sprintf("The user sent long messages; the last one summarized began %.20q.", lastUser(req.Messages))}
		}
		return scripted.Reply{Content: "answer to " + lastUser(req.Messages)[:min(20, len(lastUser(req.Messages)))]}
	}, scripted.Window(window), scripted.KeepNoRequests())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The bytes sent are the body as read: marshalling the decoded
		// request again took a seventh of a long conversation's time.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		m.serving.Lock()
		defer m.serving.Unlock()
		m.size = len(body)
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		m.server.ServeHTTP(rec, r)
		if rec.status != http.StatusOK {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.refused++
		}
	}))
	t.Cleanup(srv.Close)
	h.chat = activities.NewModel(srv.URL+"/v1", "", "any", nil).Chat
	return m
}

func (m *windowedModel) requests() ([]sentRequest, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.sent), m.refused
}

// taken is how many requests the server took so far.
func (m *windowedModel) taken() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sent)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func lastUser(msgs []openai.ChatCompletionMessage) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == openai.ChatMessageRoleUser {
			return msgs[i].Content
		}
	}
	return ""
}

// finishedTurns collects the outputs of the conversation's turns as they
// end, by turn workflow ID.
func finishedTurns(h *harness) func() map[string]contract.TurnOutput {
	var mu sync.Mutex
	outs := map[string]contract.TurnOutput{}
	h.env.SetOnChildWorkflowCompletedListener(func(info *workflow.Info, result converter.EncodedValue, err error) {
		if info.WorkflowType.Name != contract.ChatTurnWorkflow {
			return
		}
		var out contract.TurnOutput
		require.NoError(h.t, err)
		require.NoError(h.t, result.Get(&out))
		mu.Lock()
		defer mu.Unlock()
		outs[info.WorkflowExecution.ID] = out
	})
	return func() map[string]contract.TurnOutput {
		mu.Lock()
		defer mu.Unlock()
		return outs
	}
}

// sendEach sends the messages one at a time, each once the conversation
// is idle again (the test clock stands still while a turn's activities
// run), then stops the conversation.
func (h *harness) sendEach(queries []string) []contract.TurnRef {
	refs := make([]contract.TurnRef, len(queries))
	for i, q := range queries {
		h.env.RegisterDelayedCallback(func() { h.send(q, &refs[i]) }, time.Duration(i+1)*time.Minute)
	}
	return refs
}

func pasted(n, size int) string {
	line := fmt.Sprintf("message %d: a pasted log line with some numbers 12345 67890\n", n)
	return strings.Repeat(line, size/len(line)+1)[:size]
}

func median(xs []int) int {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestSixtyFourPastedLogsFitA150kWindowWithFewSummaries is the issue's
// conversation: 64 messages of 40 KB against a model with a 150,000-token
// window that refuses anything longer, as OpenAI does.
func TestSixtyFourPastedLogsFitA150kWindowWithFewSummaries(t *testing.T) {
	m := runLongConversation(t, 64, 40<<10, 150000, 10, 20)
	t.Logf("64 turns x 40 KB at a 150k window: %s", m)
}

// TestAThousandShortMessagesStayFlat is the second measure: 1,000
// messages of 4 KB at the same window. A summary comes about every 60
// turns, so medians are taken over 200 turns: 201-400 and the last 200.
func TestAThousandShortMessagesStayFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 turns")
	}
	m := runLongConversation(t, 1000, 4<<10, 150000, 200, 200)
	t.Logf("1,000 turns x 4 KB at a 150k window: %s", m)
}

// measure is what runLongConversation measured.
type measure struct {
	requests, summaries int
	perTurn             float64
	// early and late are the medians of the bytes sent a turn (request
	// bodies, summaries included) over span turns from earlyFrom and the
	// last span, and
	// of the time a turn took, start to end (test clock aside: the real
	// time of its activities and workflow tasks).
	earlyBytes, lateBytes int
	earlyTime, lateTime   time.Duration
}

func (m measure) String() string {
	return fmt.Sprintf("%d requests (%d summaries), %.3f a turn; median bytes sent a turn %d (early turns) and %d (last turns), ratio %.2f; "+
		"median time a turn %s and %s, ratio %.2f", m.requests, m.summaries, m.perTurn, m.earlyBytes, m.lateBytes,
		float64(m.lateBytes)/float64(m.earlyBytes), m.earlyTime, m.lateTime, float64(m.lateTime)/float64(m.earlyTime))
}

// runLongConversation sends n messages of size bytes, one a turn, to a
// conversation on a model with a window of tokens, and requires what the
// issue asks: every turn ends with stop, no request passes the window, at
// most 1.25 requests a turn, the previous user message whole in every
// turn's request, and bytes sent a turn flat (at most 1.3 times, medians
// of span turns from earlyFrom and of the last span).
func runLongConversation(t *testing.T, n, size, window, earlyFrom, span int) measure {
	settings := testSettings()
	settings.ContextWindow = window
	settings.TurnsPerRun = n + 1
	h := newHarness(t, settings)
	model := newWindowedModel(t, h, window)
	turnsDone := finishedTurns(h)
	queries := make([]string, n)
	model.index = map[string]int{}
	for i := range queries {
		queries[i] = pasted(i, size)
		model.index[queries[i]] = i
	}
	// Each turn's bytes and time: the requests sent and the real time
	// between its message and the next (the test clock stands still while
	// a turn runs).
	sentBefore, started := make([]int, n+1), make([]time.Time, n+1)
	var state contract.ConversationState
	// Each message's callback registers the next one: the test
	// environment holds at most a thousand callbacks waiting.
	var next func(i int)
	next = func(i int) {
		h.env.RegisterDelayedCallback(func() {
			sentBefore[i], started[i] = model.taken(), time.Now()
			if i == n {
				v, err := h.env.QueryWorkflow(contract.StateQuery)
				require.NoError(t, err)
				require.NoError(t, v.Get(&state))
				h.env.CancelWorkflow()
				return
			}
			var ref contract.TurnRef
			h.send(queries[i], &ref)
			next(i + 1)
		}, time.Minute)
	}
	next(0)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "long"})

	outs := turnsDone()
	require.Len(t, outs, n)
	for i := 1; i <= n; i++ {
		require.Equal(t, protocol.FinishStop, outs[contract.TurnWorkflowID("long", i)].FinishReason, "turn %d", i)
	}
	require.Equal(t, 2*n, state.Messages)
	require.Positive(t, state.Summarized)

	sent, refused := model.requests()
	require.Zero(t, refused, "no request passed the window")
	m := measure{requests: len(sent), perTurn: float64(len(sent)) / float64(n)}
	turnBytes, turnTimes := make([]int, n), make([]int, n)
	for i := range n {
		for _, r := range sent[sentBefore[i]:sentBefore[i+1]] {
			turnBytes[i] += r.bytes
		}
		turnTimes[i] = int(started[i+1].Sub(started[i]))
	}
	for _, r := range sent {
		if r.summary {
			m.summaries++
			continue
		}
		// The previous user message reaches the model whole.
		require.GreaterOrEqual(t, r.last, 0)
		if r.last > 0 {
			require.Contains(t, r.whole, r.last-1, "the request of turn %d holds the previous message whole", r.last+1)
		}
	}
	require.Equal(t, n, len(sent)-m.summaries, "one call a turn")
	require.LessOrEqual(t, m.perTurn, 1.25, "model requests per turn, summaries included")
	m.earlyBytes, m.lateBytes = median(turnBytes[earlyFrom:earlyFrom+span]), median(turnBytes[n-span:])
	m.earlyTime, m.lateTime = time.Duration(median(turnTimes[earlyFrom:earlyFrom+span])), time.Duration(median(turnTimes[n-span:]))
	require.LessOrEqual(t, float64(m.lateBytes)/float64(m.earlyBytes), 1.3, "bytes sent per turn stay flat")
	return m
}

func TestATwoMegabytePasteIsCutInTheMiddleAndSaysWhereTheWholeIsKept(t *testing.T) {
	settings := testSettings()
	settings.ContextWindow = 150000
	h := newHarness(t, settings)
	model := newWindowedModel(t, h, 150000)
	turnsDone := finishedTurns(h)
	paste := pasted(1, 2<<20)
	h.sendEach([]string{"hello", paste, "what did it say?"})
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Hour)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "paste"})

	outs := turnsDone()
	for i := 1; i <= 3; i++ {
		require.Equal(t, protocol.FinishStop, outs[contract.TurnWorkflowID("paste", i)].FinishReason, "turn %d", i)
	}
	sent, refused := model.requests()
	require.Zero(t, refused, "no request passed the window")
	second := sent[1].messages
	cut := second[len(second)-1].Content
	require.True(t, strings.HasPrefix(cut, paste[:1000]), "its beginning")
	require.True(t, strings.HasSuffix(cut, paste[len(paste)-1000:]), "and its end")
	require.Contains(t, cut, "bytes left out here to fit the model's context. The whole message is kept in the conversation's transcript: GET /conversations/paste/messages?offset=2&limit=1")
	require.Equal(t, 1, findEvent(t, outs[contract.TurnWorkflowID("paste", 2)].Events, protocol.EventContextCompacted).Cut)
	last := sent[len(sent)-1].messages
	require.Equal(t, "what did it say?", last[len(last)-1].Content)
	require.True(t, slices.ContainsFunc(last, func(m openai.ChatCompletionMessage) bool { return strings.HasPrefix(m.Content, paste[:1000]) }),
		"the next turn reads the paste's beginning still")
}

func TestATurnWhoseOwnToolOutputsPassTheWindowLeavesOutTheOldOnesAndCutsTheNewest(t *testing.T) {
	settings := testSettings()
	settings.ContextWindow = 20000 // 45,000 bytes of view
	h := newHarness(t, settings,
		calls(call("r1", "Read", `{"file_path":"a.log"}`)),
		calls(call("r2", "Read", `{"file_path":"b.log"}`), call("r3", "Read", `{"file_path":"c.log"}`)),
		activities.ModelOutput{Content: "Both logs are fine."},
	)
	big := strings.Repeat("a log line of the big file\n", 1500) // 40 KB
	h.env.OnActivity(protocol.ToolRead, mock.Anything, mock.Anything).Return(activities.ToolOutput{Status: protocol.StatusOK, Result: big}, nil)

	out := h.runTurn(userTurn("read the logs"))

	require.Equal(t, protocol.FinishStop, out.FinishReason)
	require.Len(t, h.modelInputs, 3)
	budget := viewBudget(settings.withDefaults(), 20000)
	second := h.modelInputs[1].Messages
	require.Equal(t, big, second[len(second)-1].Content, "the first batch's output fits: whole")
	third := h.modelInputs[2].Messages
	require.LessOrEqual(t, viewSize(third), budget)
	require.Equal(t, ElidedToolOutput, third[3].Content, "the output the model has read is left out first")
	for _, m := range third[len(third)-2:] {
		require.True(t, strings.HasPrefix(m.Content, big[:1000]), "the newest batch, which the model has not read, is never left out")
		require.Contains(t, m.Content, "bytes left out here to fit the model's context. The whole message is kept in the conversation's transcript: GET /conversations/c1/messages?offset=")
	}
	e := ofType(out.Events, protocol.EventContextCompacted)
	require.Equal(t, 1, e[len(e)-1].Elided)
	require.Equal(t, 2, e[len(e)-1].Cut)
}

func TestAPersonCompactsTheConversationWithInstructionsAndTheNextTurnReadsTheSummary(t *testing.T) {
	h := newHarness(t, testSettings(),
		activities.ModelOutput{Content: "a1"}, activities.ModelOutput{Content: "a2"}, activities.ModelOutput{Content: "a3"},
		activities.ModelOutput{Content: "We chose PostgreSQL for the schema."},
		activities.ModelOutput{Content: "a4"},
	)
	turnsDone := finishedTurns(h)
	h.sendEach([]string{"q1", "q2", "q3"})
	var result protocol.CompactResult
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(contract.CompactUpdate, "", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { t.Errorf("rejected: %v", err) },
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				result = v.(protocol.CompactResult)
			},
		}, protocol.CompactRequest{Instructions: "keep the decisions about the schema"})
	}, 10*time.Minute)
	var r4 contract.TurnRef
	h.env.RegisterDelayedCallback(func() { h.send("q4", &r4) }, 20*time.Minute)
	var rejected error
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(contract.CompactUpdate, "", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err }, OnComplete: func(any, error) {},
		}, protocol.CompactRequest{Instructions: strings.Repeat("x", 5000)})
	}, 25*time.Minute)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Hour)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "manual"})

	require.Equal(t, protocol.CompactResult{Compacted: true, Summarized: 4, Kept: 2, BytesBefore: 12, BytesAfter: 35 + 4}, result)
	require.Len(t, h.modelInputs, 5)
	summaryCall := h.modelInputs[3].Messages
	require.Equal(t, foldPrompt+foldInstructions+"keep the decisions about the schema", summaryCall[0].Content)
	require.Equal(t, foldFirst+"user: q1\nassistant: a1\nuser: q2\nassistant: a2\n", summaryCall[1].Content)
	require.Equal(t, []string{SummaryPrefix + "We chose PostgreSQL for the schema.", "q3", "a3", "q4"}, contents(h.modelInputs[4].Messages)[1:])
	e := findEvent(t, turnsDone()[r4.TurnID].Events, protocol.EventContextCompacted)
	require.Equal(t, 4, e.Summarized)
	require.Equal(t, 3, e.Kept)
	require.ErrorContains(t, rejected, "the instructions are 5000 bytes, more than the 4000 a compaction takes")
}

func TestAConversationThatContinuesAsNewKeepsItsSummary(t *testing.T) {
	settings := testSettings()
	settings.ContextBudget = 6000
	settings.TurnsPerRun = 5
	h := newHarness(t, settings)
	queries := make([]string, 5)
	for i := range queries {
		queries[i] = pasted(i, 1500)
	}
	h.sendEach(queries)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "carried"})

	next := continuedAs(t, h.env)
	require.Positive(t, next.Compaction.Covers)
	require.NotEmpty(t, next.Compaction.Summary)
	require.Len(t, next.Messages, 10, "the transcript is carried whole")

	// The next run's turn reads the summary it carried, and no more than
	// the messages since.
	h2 := newHarness(t, settings, activities.ModelOutput{Content: "a6"})
	var r contract.TurnRef
	h2.env.RegisterDelayedCallback(func() { h2.send("q6", &r) }, time.Minute)
	h2.env.RegisterDelayedCallback(h2.env.CancelWorkflow, time.Hour)
	h2.env.ExecuteWorkflow(contract.ConversationWorkflow, next)
	require.Len(t, h2.modelInputs, 1, "no summary again")
	view := h2.modelInputs[0].Messages
	require.Equal(t, SummaryPrefix+next.Compaction.Summary, view[1].Content)
	require.Equal(t, append(slices.Clone(next.Messages[next.Compaction.Covers:]), protocol.Message{Role: protocol.RoleUser, Content: "q6"}), view[2:])
}

func TestTheBudgetsCountWhatSummariesSpend(t *testing.T) {
	settings := testSettings()
	settings.ContextBudget = 6000
	settings.Budgets = contract.Budgets{TurnTokens: 100000}
	h := newHarness(t, settings,
		activities.ModelOutput{Content: "Turns 0 to 2 were long messages.", Tokens: 1500},
		activities.ModelOutput{Content: "Now this.", Tokens: 700},
	)

	out := h.runTurn(turns(4, 1500, "and now?"))

	require.True(t, h.modelInputs[0].WantUsage, "the summary request asks for its usage")
	require.Equal(t, 2200, out.Usage.Tokens, "the summary and the answer")
}

func TestACompactionAskedWhileATurnRunsFollowsTheTurn(t *testing.T) {
	h := newHarness(t, testSettings(),
		activities.ModelOutput{Content: "a1"},
		calls(call("b", "Bash", `{"command":"make"}`)),
		activities.ModelOutput{Content: "a2"},
		activities.ModelOutput{Content: "The user asked twice."},
		activities.ModelOutput{Content: "a3"},
		activities.ModelOutput{Content: "The user asked three times."},
	)
	h.sendEach([]string{"q1", "q2"})
	var queued, again, third protocol.CompactResult
	compact := func(res *protocol.CompactResult) func() {
		return func() {
			h.env.UpdateWorkflow(contract.CompactUpdate, "", &testsuite.TestUpdateCallback{
				OnAccept: func() {}, OnReject: func(err error) { t.Errorf("rejected: %v", err) },
				OnComplete: func(v any, err error) {
					require.NoError(t, err)
					*res = v.(protocol.CompactResult)
				},
			}, protocol.CompactRequest{})
		}
	}
	// Turn 2 waits for its Bash call's approval meanwhile (which times out
	// after three minutes).
	h.env.RegisterDelayedCallback(compact(&queued), 2*time.Minute+time.Second)
	var r3 contract.TurnRef
	h.env.RegisterDelayedCallback(func() { h.send("q3", &r3) }, 10*time.Minute)
	h.env.RegisterDelayedCallback(compact(&again), 20*time.Minute)
	h.env.RegisterDelayedCallback(compact(&third), 21*time.Minute)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Hour)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "queued"})

	require.Equal(t, protocol.CompactResult{Queued: true}, queued, "answered at once")
	require.Len(t, h.modelInputs, 6)
	require.Equal(t, foldPrompt, h.modelInputs[3].Messages[0].Content, "the compaction ran when turn 2 ended, before turn 3")
	require.Equal(t, SummaryPrefix+"The user asked twice.", h.modelInputs[4].Messages[1].Content)
	require.True(t, again.Compacted, "turn 2 is folded in once turn 3 is the newest")
	require.Equal(t, 6, again.Summarized)
	require.False(t, third.Compacted)
	require.Contains(t, third.Reason, "nothing to summarize", "a compaction with nothing new makes no model call")
}

func TestACompactionAskedWhileAnotherRunsIsToldSo(t *testing.T) {
	h := newHarness(t, testSettings(),
		activities.ModelOutput{Content: "a1"}, activities.ModelOutput{Content: "a2"},
		activities.ModelOutput{Content: "The user asked twice."},
	)
	h.sendEach([]string{"q1", "q2"})
	results := make([]protocol.CompactResult, 2)
	h.env.RegisterDelayedCallback(func() {
		for i := range results {
			h.env.UpdateWorkflow(contract.CompactUpdate, "", &testsuite.TestUpdateCallback{
				OnAccept: func() {}, OnReject: func(err error) { t.Errorf("rejected: %v", err) },
				OnComplete: func(v any, err error) {
					require.NoError(t, err)
					results[i] = v.(protocol.CompactResult)
				},
			}, protocol.CompactRequest{})
		}
	}, 10*time.Minute)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Hour)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "twice"})

	require.True(t, results[0].Compacted)
	require.Equal(t, protocol.CompactResult{Reason: "another compaction runs now; ask again once it has ended"}, results[1])
	require.Len(t, h.modelInputs, 3, "one summary request")
}

// A person's compaction is a model call like a turn's, but no turn asks
// for it: a conversation past its token budget, whose every turn asks a
// person to raise it first, must not let anyone with the chat role spend
// on summaries instead (send a long message, compact, again). It is
// refused, naming the budget; raised, it runs.
func TestACompactionIsRefusedWhenTheConversationsTokenBudgetIsSpent(t *testing.T) {
	s := testSettings()
	s.Budgets.ConversationTokens = 500
	h := newHarness(t, s, activities.ModelOutput{Content: "The user asked twice."})
	history := []protocol.Message{
		{Role: protocol.RoleUser, Content: "q1"}, {Role: protocol.RoleAssistant, Content: "a1"},
		{Role: protocol.RoleUser, Content: "q2"}, {Role: protocol.RoleAssistant, Content: "a2"},
	}
	var rejected error
	var result protocol.CompactResult
	compact := func() {
		h.env.UpdateWorkflow(contract.CompactUpdate, "", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { rejected = err },
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				result = v.(protocol.CompactResult)
			},
		}, protocol.CompactRequest{})
	}
	h.env.RegisterDelayedCallback(compact, time.Minute)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Hour)
	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "spent", Messages: history, Turns: 2, Spent: contract.Usage{Tokens: 600}})
	require.ErrorContains(t, rejected, "the conversation's token budget is spent (600 of 500 tokens)")
	require.Empty(t, h.modelInputs, "no summary request")

	// Raised by a person (in a turn), the compaction runs.
	h = newHarness(t, s, activities.ModelOutput{Content: "The user asked twice."})
	rejected = nil
	h.env.RegisterDelayedCallback(compact, time.Minute)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Hour)
	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "raised", Messages: history, Turns: 2,
		Spent: contract.Usage{Tokens: 600}, Raised: contract.Budgets{ConversationTokens: 1200}})
	require.NoError(t, rejected)
	require.True(t, result.Compacted)
	require.Len(t, h.modelInputs, 1)
}
