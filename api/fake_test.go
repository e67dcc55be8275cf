package main

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"

	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// fakeSource is an eventSource in memory: tests publish events to a turn
// and close it, and it counts how it is used.
type fakeSource struct {
	mu    sync.Mutex
	turns map[string]*fakeTurn
	// conversations are the states Conversation answers; one not there
	// is not found.
	conversations map[string]contract.ConversationState

	// watching is the number of Watch calls running now.
	watching atomic.Int32
	// reads counts Events calls; readGate, when set, holds every read until
	// it is closed.
	reads    atomic.Int32
	readGate chan struct{}
	// exists counts Exists calls.
	exists atomic.Int32
	// conversationGate, when set, holds every Conversation call until it
	// is closed (holdConversations).
	conversationGate chan struct{}
	// ignoreAfter makes Events answer the whole log whatever the cursor, as
	// a sloppy source might: the hub must still send no duplicates.
	ignoreAfter bool
}

type fakeTurn struct {
	events  []protocol.Event
	closed  bool
	missing bool
	// absent: the turn does not exist and no conversation promised it, as
	// Exists answers; a missing turn that is not absent is starting.
	absent bool
	// news is closed and replaced at every change.
	news chan struct{}
}

func newFakeSource() *fakeSource {
	return &fakeSource{turns: map[string]*fakeTurn{}}
}

// turn returns the turn, creating it (existing, empty) if needed. The
// caller holds f.mu.
func (f *fakeSource) turn(id string) *fakeTurn {
	t := f.turns[id]
	if t == nil {
		t = &fakeTurn{news: make(chan struct{})}
		f.turns[id] = t
	}
	return t
}

func (f *fakeSource) change(t *fakeTurn) {
	close(t.news)
	t.news = make(chan struct{})
}

// publish appends events of the given types to the turn, numbered on.
func (f *fakeSource) publish(turnID string, types ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.turn(turnID)
	for _, typ := range types {
		t.events = append(t.events, protocol.Event{Seq: len(t.events) + 1, Type: typ, Data: typ})
	}
	f.change(t)
}

// setMissing makes the turn not exist (yet), or exist.
func (f *fakeSource) setMissing(turnID string, missing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.turn(turnID)
	t.missing = missing
	f.change(t)
}

// setAbsent makes the turn one that does not exist and will not.
func (f *fakeSource) setAbsent(turnID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.turn(turnID)
	t.missing, t.absent = true, true
	f.change(t)
}

// Exists answers whether the turn exists or is starting.
func (f *fakeSource) Exists(_ context.Context, turnID string) (bool, error) {
	f.exists.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.turn(turnID).absent, nil
}

// close closes the turn's workflow.
func (f *fakeSource) close(turnID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.turn(turnID)
	t.closed = true
	f.change(t)
}

func (f *fakeSource) Events(ctx context.Context, turnID string, after int, _ bool) (contract.EventsResponse, error) {
	f.reads.Add(1)
	f.mu.Lock()
	gate := f.readGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return contract.EventsResponse{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.turn(turnID)
	if t.missing {
		return contract.EventsResponse{}, serviceerror.NewNotFound("workflow not found for ID: " + turnID)
	}
	if f.ignoreAfter {
		after = 0
	}
	return contract.EventsAfter(t.events, after), nil
}

// setConversation sets what Conversation answers for conv.
func (f *fakeSource) setConversation(conv string, st contract.ConversationState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conversations == nil {
		f.conversations = map[string]contract.ConversationState{}
	}
	f.conversations[conv] = st
}

// holdConversations holds every Conversation call, as a busy worker
// would, until the returned channel is closed.
func (f *fakeSource) holdConversations() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conversationGate = make(chan struct{})
	return f.conversationGate
}

func (f *fakeSource) Conversation(ctx context.Context, conv string) (contract.ConversationState, error) {
	f.mu.Lock()
	gate := f.conversationGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return contract.ConversationState{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.conversations[conv]
	if !ok {
		return st, serviceerror.NewNotFound("workflow not found for ID: " + contract.ConversationWorkflowID(conv))
	}
	return st, nil
}

// Live reads a model call's heartbeat details; the fake has no calls.
func (f *fakeSource) Live(context.Context, string, string) ([]protocol.TokenPiece, bool, error) {
	return nil, false, nil
}

func (f *fakeSource) Watch(ctx context.Context, turnID string, changed func()) error {
	f.watching.Add(1)
	defer f.watching.Add(-1)
	for {
		f.mu.Lock()
		t := f.turn(turnID)
		missing, closed, news := t.missing, t.closed, t.news
		f.mu.Unlock()
		if missing {
			return serviceerror.NewNotFound("workflow not found for ID: " + turnID)
		}
		changed()
		if closed {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-news:
		}
	}
}

// fastSettings make the hub's waits short enough for tests.
var fastSettings = hubSettings{
	queryTimeout:    2 * time.Second,
	minBackoff:      2 * time.Millisecond,
	maxBackoff:      20 * time.Millisecond,
	notFoundTimeout: 200 * time.Millisecond,
	closedRetries:   2,
}

// waitFor is how long a test waits for something that should happen soon:
// a bound on failing, never a timing (what passes returns as soon as it
// happens). CI runs the packages side by side under the race detector,
// docstest's burst of 400 turns among them, and a conversation took more
// than 5 s there to take a turn's result.
const waitFor = 20 * time.Second

// sseMessage is one parsed Server-Sent Events message.
type sseMessage struct {
	ID    string
	HasID bool
	Data  string
}

// readSSE parses messages from r into a channel, closed at the end of r.
func readSSE(r io.Reader) <-chan sseMessage {
	out := make(chan sseMessage, 1024)
	go func() {
		defer close(out)
		_ = protocol.ReadSSE(r, func(m protocol.SSEMessage) error {
			// The API numbers every event of a turn's log from 1: an id is
			// never empty, so an empty one means the message had none.
			out <- sseMessage{ID: m.ID, HasID: m.ID != "", Data: m.Data}
			return nil
		})
	}()
	return out
}

// openStream starts a GET of url and returns its response and messages;
// cancel ends the request, as a client that leaves.
func openStream(t *testing.T, url string, header http.Header) (*http.Response, <-chan sseMessage, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
	})
	return resp, readSSE(resp.Body), cancel
}

// nextMessage waits for the next message; ok is false at the stream's end.
func nextMessage(t *testing.T, msgs <-chan sseMessage) (sseMessage, bool) {
	t.Helper()
	select {
	case m, ok := <-msgs:
		return m, ok
	case <-time.After(waitFor):
		t.Fatalf("no SSE message within %s", waitFor)
		return sseMessage{}, false
	}
}

// drain collects messages until the stream ends, which must be within
// waitFor: keep-alives do not keep it waiting.
func drain(t *testing.T, msgs <-chan sseMessage) []sseMessage {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	var all []sseMessage
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return all
			}
			all = append(all, m)
		case <-deadline.C:
			t.Fatalf("the stream did not end within %s; %d messages so far", waitFor, len(all))
		}
	}
}
