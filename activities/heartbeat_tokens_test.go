package activities_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
)

// heartbeatEnv runs the model activity on reply in the SDK's test
// environment, streaming by heartbeat, and records every detail it
// heartbeats. prev, when set, is the previous attempt's last detail.
type heartbeatEnv struct {
	env  *testsuite.TestActivityEnvironment
	sink *recordingSink

	mu      sync.Mutex
	details []protocol.TokenProgress
}

func newHeartbeatEnv(t *testing.T, reply scripted.Reply, prev *protocol.TokenProgress) *heartbeatEnv {
	t.Helper()
	return newHeartbeatEnvOn(t, scripted.New(scripted.Always(reply), scripted.ChunkDelay(time.Millisecond)), 5*time.Millisecond, prev)
}

// newHeartbeatEnvOn is newHeartbeatEnv with a model server of the test's and
// the streamer's flush interval.
func newHeartbeatEnvOn(t *testing.T, model http.Handler, flush time.Duration, prev *protocol.TokenProgress) *heartbeatEnv {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	h := &heartbeatEnv{env: suite.NewTestActivityEnvironment(), sink: &recordingSink{}}
	// Every detail the activity records, before the SDK's throttle picks
	// the newest of each interval to send: what holds for all holds for
	// those the server gets.
	h.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&heartbeatRecorder{record: func(details []any) {
		require.Len(t, details, 1)
		p, ok := details[0].(protocol.TokenProgress)
		require.True(t, ok, "a detail is a TokenProgress: %#v", details[0])
		h.mu.Lock()
		h.details = append(h.details, p)
		h.mu.Unlock()
	}}}})
	if prev != nil {
		h.env.SetHeartbeatDetails(*prev)
	}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	m := activities.NewModel(srv.URL+"/v1", "", "test-model", h.sink)
	m.FlushInterval = flush
	h.env.RegisterActivityWithOptions(m.Chat, activity.RegisterOptions{Name: activities.ModelActivity})
	return h
}

func (h *heartbeatEnv) run(t *testing.T) (activities.ModelOutput, error) {
	t.Helper()
	in := userAsks("talk")
	in.Tokens = &activities.TokenTarget{WorkflowID: "turn-1", Step: 2, Heartbeat: true}
	val, err := h.env.ExecuteActivity(activities.ModelActivity, in)
	var out activities.ModelOutput
	if err == nil {
		require.NoError(t, val.Get(&out))
	}
	return out, err
}

func (h *heartbeatEnv) recorded() []protocol.TokenProgress {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]protocol.TokenProgress(nil), h.details...)
}

// requirePrefixes requires every recorded detail to be the start of the
// next and of final: what the API shows from one stays true.
func requirePrefixes(t *testing.T, details []protocol.TokenProgress, final []protocol.TokenPiece) {
	t.Helper()
	var prev []protocol.TokenPiece
	for i, d := range details {
		require.Equal(t, 2, d.Step)
		require.GreaterOrEqual(t, len(d.Pieces), len(prev), "detail %d", i)
		require.True(t, slices.Equal(prev, d.Pieces[:len(prev)]), "detail %d begins with the one before: %v, then %v", i, prev, d.Pieces)
		prev = slices.Clone(d.Pieces)
	}
	require.LessOrEqual(t, len(prev), len(final))
	require.True(t, slices.Equal(prev, final[:len(prev)]), "the result's pieces begin with the last detail's: %v, then %v", prev, final)
}

func TestAnAnswerStreamsInHeartbeatDetailsAndNoSignals(t *testing.T) {
	text := longText(120)
	h := newHeartbeatEnv(t, scripted.Reply{Content: text}, nil)
	out, err := h.run(t)
	require.NoError(t, err)
	require.Equal(t, text, out.Content)
	require.Equal(t, text, activities.Spell(out.Pieces))
	require.Empty(t, h.sink.recorded(), "no tokens signal")

	details := h.recorded()
	require.GreaterOrEqual(t, len(details), 3, "a paced answer heartbeats several pieces")
	require.Greater(t, len(out.Pieces), 2)
	for _, p := range out.Pieces {
		require.NotEmpty(t, p.Data)
		require.False(t, p.Reset)
	}
	requirePrefixes(t, details, out.Pieces)
	require.True(t, slices.ContainsFunc(details, func(d protocol.TokenProgress) bool { return len(d.Pieces) == 1 }),
		"the first text is recorded on its own, once the call has run an interval")
}

func TestAnAnswerQuickerThanAFlushIntervalSendsNoHeartbeat(t *testing.T) {
	text := longText(20)
	h := newHeartbeatEnvOn(t, scripted.New(scripted.Always(scripted.Reply{Content: text}), scripted.ChunkDelay(time.Millisecond)), time.Minute, nil)
	out, err := h.run(t)
	require.NoError(t, err)
	require.Equal(t, text, activities.Spell(out.Pieces), "the pieces come with the result")
	require.Empty(t, h.recorded(), "nothing was recorded in the call's first interval")
}

func TestTheFirstWordsAreRecordedWhenTheFirstIntervalIsUpThoughTheModelStalls(t *testing.T) {
	// The model writes its first words, then says nothing more until the
	// test has seen them in the details: only the streamer's timer can
	// record them, as no next chunk comes to offer them.
	var h *heartbeatEnv
	seen := make(chan struct{})
	model := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(delta string) {
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"test-model\",\"choices\":[{\"index\":0,\"delta\":%s}]}\n\n", delta)
			w.(http.Flusher).Flush()
		}
		chunk(`{"role":"assistant","content":"First words"}`)
		select {
		case <-seen:
		case <-r.Context().Done():
			return
		}
		chunk(`{"content":", then the rest."}`)
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"test-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	h = newHeartbeatEnvOn(t, model, 20*time.Millisecond, nil)
	go func() {
		defer close(seen)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && len(h.recorded()) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	out, err := h.run(t)
	require.NoError(t, err)
	details := h.recorded()
	require.NotEmpty(t, details, "the first words were recorded while the model stalled")
	require.Equal(t, []protocol.TokenPiece{{Data: "First words"}}, details[0].Pieces)
	require.Equal(t, "First words, then the rest.", activities.Spell(out.Pieces))
	requirePrefixes(t, details, out.Pieces)
}

func TestARetriedCallKeepsWhatItsPredecessorRecorded(t *testing.T) {
	t.Run("SameWords", func(t *testing.T) {
		prev := protocol.TokenProgress{Step: 2, Pieces: []protocol.TokenPiece{{Data: "word0 word1 "}}}
		h := newHeartbeatEnv(t, scripted.Reply{Content: longText(30)}, &prev)
		out, err := h.run(t)
		require.NoError(t, err)
		require.Equal(t, prev.Pieces[0], out.Pieces[0])
		require.Equal(t, longText(30), activities.Spell(out.Pieces))
		for _, p := range out.Pieces {
			require.False(t, p.Reset, "the retry said what its predecessor began to say")
		}
		requirePrefixes(t, append([]protocol.TokenProgress{prev}, h.recorded()...), out.Pieces)
	})
	t.Run("OtherWords", func(t *testing.T) {
		prev := protocol.TokenProgress{Step: 2, Pieces: []protocol.TokenPiece{{Data: "I will not "}}}
		h := newHeartbeatEnv(t, scripted.Reply{Content: longText(30)}, &prev)
		out, err := h.run(t)
		require.NoError(t, err)
		require.Equal(t, prev.Pieces[0], out.Pieces[0], "what the API may have shown stays")
		require.True(t, out.Pieces[1].Reset, "then the answer starts again")
		require.Equal(t, longText(30), activities.Spell(out.Pieces))
		requirePrefixes(t, append([]protocol.TokenProgress{prev}, h.recorded()...), out.Pieces)
	})
	t.Run("AnotherStepsDetailIsNotKept", func(t *testing.T) {
		prev := protocol.TokenProgress{Step: 1, Pieces: []protocol.TokenPiece{{Data: "the previous call"}}}
		h := newHeartbeatEnv(t, scripted.Reply{Content: "fresh"}, &prev)
		out, err := h.run(t)
		require.NoError(t, err)
		require.Equal(t, []protocol.TokenPiece{{Data: "fresh"}}, out.Pieces)
	})
}

func TestAFailedCallCarriesItsPiecesAndKeepsItsKind(t *testing.T) {
	t.Run("Rejected", func(t *testing.T) {
		prev := protocol.TokenProgress{Step: 2, Pieces: []protocol.TokenPiece{{Data: "begun "}}}
		h := newHeartbeatEnv(t, scripted.Reply{Status: http.StatusUnauthorized, Content: "bad key"}, &prev)
		_, err := h.run(t)
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr)
		require.True(t, appErr.NonRetryable())
		require.Equal(t, activities.ModelRequestRejectedError, appErr.Type())
		require.Contains(t, appErr.Error(), "bad key")
		var p protocol.TokenProgress
		require.NoError(t, appErr.Details(&p))
		require.Equal(t, prev, p)
	})
	t.Run("ServerError", func(t *testing.T) {
		h := newHeartbeatEnv(t, scripted.Reply{Status: http.StatusBadGateway, Content: "upstream"}, nil)
		_, err := h.run(t)
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr)
		require.False(t, appErr.NonRetryable(), "a 502 is retried")
		require.True(t, strings.Contains(appErr.Error(), "502"), appErr.Error())
		var p protocol.TokenProgress
		require.NoError(t, appErr.Details(&p))
		require.Empty(t, p.Pieces)
	})
}

func TestNextPieceFollowsTheText(t *testing.T) {
	for _, c := range []struct {
		published, text string
		final           bool
		want            *protocol.TokenPiece
	}{
		{"", "", false, nil},
		{"", "Hel", false, &protocol.TokenPiece{Data: "Hel"}},
		{"Hel", "Hello", false, &protocol.TokenPiece{Data: "lo"}},
		{"Hello", "Hel", false, nil}, // a retry catching up
		{"Hello", "Hel", true, &protocol.TokenPiece{Data: "Hel", Reset: true}},
		{"Hello", "Help", false, &protocol.TokenPiece{Data: "Help", Reset: true}},
		{"Hello", "Hello", true, nil},
	} {
		got, ok := activities.NextPiece(c.published, c.text, c.final)
		if c.want == nil {
			require.False(t, ok, "%+v", c)
			continue
		}
		require.True(t, ok, "%+v", c)
		require.Equal(t, *c.want, got, "%+v", c)
	}
	require.Equal(t, "Help", activities.Spell([]protocol.TokenPiece{{Data: "Hel"}, {Data: "lo"}, {Data: "Help", Reset: true}}))
}

// heartbeatRecorder sees every heartbeat an activity records.
type heartbeatRecorder struct {
	interceptor.WorkerInterceptorBase
	record func(details []any)
}

func (r *heartbeatRecorder) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &heartbeatInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, record: r.record}
}

type heartbeatInbound struct {
	interceptor.ActivityInboundInterceptorBase
	record func(details []any)
}

func (i *heartbeatInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	return i.Next.Init(&heartbeatOutbound{ActivityOutboundInterceptorBase: interceptor.ActivityOutboundInterceptorBase{Next: outbound}, record: i.record})
}

type heartbeatOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
	record func(details []any)
}

func (o *heartbeatOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	o.record(details)
	o.Next.RecordHeartbeat(ctx, details...)
}
