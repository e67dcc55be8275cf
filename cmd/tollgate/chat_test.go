package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

const fakeTurn = "tollgate-conv-c1-turn-1"

// fakeAPI is a tollgate API whose first stream drops after three events;
// the resumed stream asks for one approval and finishes once it is decided.
type fakeAPI struct {
	t      *testing.T
	finish string

	mu          sync.Mutex
	chats       []protocol.ChatRequest
	lastEventID []string
	decisions   []protocol.ApprovalDecision
	decided     chan struct{}
}

func newFakeAPI(t *testing.T, finish string) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{t: t, finish: finish, decided: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /chat/stream", f.chatStream)
	mux.HandleFunc("GET /chat/turns/{turnId}/events", f.resume)
	mux.HandleFunc("POST /chat/approval", f.approval)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return f, ts
}

func (f *fakeAPI) write(w http.ResponseWriter, events ...protocol.Event) {
	for _, e := range events {
		data, err := json.Marshal(e)
		require.NoError(f.t, err)
		fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Seq, data)
	}
	w.(http.Flusher).Flush()
}

func (f *fakeAPI) chatStream(w http.ResponseWriter, r *http.Request) {
	var req protocol.ChatRequest
	require.NoError(f.t, json.NewDecoder(r.Body).Decode(&req))
	f.mu.Lock()
	f.chats = append(f.chats, req)
	f.mu.Unlock()
	w.Header().Set(protocol.HeaderConversationID, "c1")
	w.Header().Set(protocol.HeaderTurnID, fakeTurn)
	w.Header().Set("Content-Type", "text/event-stream")
	f.write(w,
		protocol.Event{Seq: 1, Type: protocol.EventTurnStart, ConversationID: "c1", TurnID: fakeTurn},
		protocol.Event{Seq: 2, Type: protocol.EventToken, Data: "Listing "},
		protocol.Event{Seq: 3, Type: protocol.EventToolCall, ToolCalls: []protocol.ToolCall{{ID: "call_1", Name: "Bash", Arguments: `{"command": "ls"}`}}},
	)
	fmt.Fprint(w, "id: 4\ndata: {\"type\":")
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler) // the connection drops mid-event
}

func (f *fakeAPI) resume(w http.ResponseWriter, r *http.Request) {
	require.Equal(f.t, fakeTurn, r.PathValue("turnId"))
	f.mu.Lock()
	f.lastEventID = append(f.lastEventID, r.Header.Get("Last-Event-ID"))
	f.mu.Unlock()
	expires := time.Now().Add(3 * time.Minute)
	w.Header().Set("Content-Type", "text/event-stream")
	f.write(w,
		// Sent again: a client must show no event twice.
		protocol.Event{Seq: 3, Type: protocol.EventToolCall, ToolCalls: []protocol.ToolCall{{ID: "call_1", Name: "Bash", Arguments: `{"command": "ls"}`}}},
		protocol.Event{Seq: 4, Type: protocol.EventApprovalRequest, RequestID: fakeTurn + "/apr-1", ToolCallID: "call_1", ToolName: "Bash", Arguments: `{"command": "ls"}`, ExpiresAt: &expires},
		protocol.Event{Seq: 5, Type: protocol.EventHeartbeat},
	)
	fmt.Fprint(w, "data: {\"type\":\"heartbeat\"}\n\n") // a keep-alive
	w.(http.Flusher).Flush()
	select {
	case <-f.decided:
	case <-time.After(10 * time.Second):
		f.t.Error("no decision came")
		return
	}
	f.write(w,
		protocol.Event{Seq: 6, Type: protocol.EventApprovalDecision, RequestID: fakeTurn + "/apr-1", ToolCallID: "call_1", Decision: protocol.DecisionApprove},
		protocol.Event{Seq: 7, Type: protocol.EventToolResult, ToolResults: []protocol.ToolResult{{ID: "call_1", Name: "Bash", Result: "README.md\nnotes", Status: protocol.StatusOK}}},
		protocol.Event{Seq: 8, Type: protocol.EventToken, Data: "the files."},
		protocol.Event{Seq: 9, Type: protocol.EventFinish, Reason: f.finish},
	)
}

func (f *fakeAPI) approval(w http.ResponseWriter, r *http.Request) {
	var d protocol.ApprovalDecision
	require.NoError(f.t, json.NewDecoder(r.Body).Decode(&d))
	f.mu.Lock()
	f.decisions = append(f.decisions, d)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"accepted":true}`)
	f.decided <- struct{}{}
}

func noEnv(string) string { return "" }

func TestChatResumesADroppedStreamAfterTheLastEventAndShowsNoEventTwice(t *testing.T) {
	f, ts := newFakeAPI(t, protocol.FinishStop)
	var out, errOut strings.Builder

	code := run(context.Background(), []string{"chat", "list", "--bypass", "the files", "--api", ts.URL},
		noEnv, strings.NewReader("y\n"), &out, &errOut)

	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.Equal(t, []protocol.ChatRequest{{Query: "list the files", BypassApproval: true}}, f.chats)
	require.Equal(t, []string{"3"}, f.lastEventID)
	require.Equal(t, []protocol.ApprovalDecision{{RequestID: fakeTurn + "/apr-1", Decision: protocol.DecisionApprove}}, f.decisions)

	text := out.String()
	require.Contains(t, text, "conversation c1\nturn "+fakeTurn+"\nListing \n→ Bash {\"command\":\"ls\"}\n")
	require.Contains(t, text, "(stream dropped: ")
	require.Contains(t, text, "resuming after event 3)\n")
	require.Equal(t, 1, strings.Count(text, "→ Bash"), "event 3 came twice and is shown once")
	require.Contains(t, text, "? Bash wants to run:\n")
	require.Contains(t, text, promptLine)
	require.Contains(t, text, "sent: approve Bash\napproved Bash\n← Bash ok: README.md\nthe files.\nfinish: stop\n")
	require.Contains(t, text, "continue with: tollgate chat --conversation c1 \"...\"\n")
	require.Empty(t, errOut.String())
}

func TestChatExitsNonZeroWhenTheTurnDoesNotFinishWithStop(t *testing.T) {
	_, ts := newFakeAPI(t, protocol.FinishMaxSteps)
	var out, errOut strings.Builder
	code := run(context.Background(), []string{"chat", "go on"}, func(name string) string {
		if name == EnvAPI {
			return ts.URL // the API from the environment
		}
		return ""
	}, strings.NewReader("y\n"), &out, &errOut)
	require.Equal(t, exitFail, code)
	require.Contains(t, out.String(), "finish: max_steps\n")
}

func TestChatReportsTheAPIsErrorAndExitsNonZero(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"conversationId \"a b\" is not valid"}`)
	}))
	t.Cleanup(ts.Close)
	var out, errOut strings.Builder
	code := run(context.Background(), []string{"chat", "--conversation", "a b", "hi", "--api", ts.URL}, noEnv, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitFail, code)
	require.Equal(t, "tollgate chat: POST /chat/stream: 400 Bad Request: conversationId \"a b\" is not valid\n", errOut.String())
}

func TestUsageErrorsExitWithTwo(t *testing.T) {
	for _, args := range [][]string{nil, {"chat"}, {"chat", "--nope", "x"}, {"frobnicate"}, {"approvals", "extra"}} {
		var out, errOut strings.Builder
		require.Equal(t, exitUsage, run(context.Background(), args, noEnv, strings.NewReader(""), &out, &errOut), "%q", args)
		require.Contains(t, errOut.String(), "Usage:")
	}
}

func TestApprovalsListsPendingApprovalsAndDecidesEachWithDecide(t *testing.T) {
	now := time.Now()
	pending := []protocol.PendingApproval{
		{RequestID: "tollgate-conv-a-turn-1/apr-1", ToolName: "Write", Arguments: `{"file_path":"notes/a-very-long-name-indeed.txt","content":"` + strings.Repeat("x", 80) + `"}`,
			RequestedAt: now.Add(-90 * time.Second), ExpiresAt: now.Add(90 * time.Second)},
		{RequestID: "tollgate-conv-b-turn-2/apr-2", ToolName: "Bash", Arguments: `{"command":"ls"}`,
			RequestedAt: now.Add(-26 * time.Hour), ExpiresAt: now.Add(46 * time.Hour)},
	}
	var (
		mu        sync.Mutex
		query     string
		decisions []protocol.ApprovalDecision
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /approvals", func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		require.NoError(t, json.NewEncoder(w).Encode(map[string]any{"approvals": pending}))
	})
	mux.HandleFunc("POST /chat/approval", func(w http.ResponseWriter, r *http.Request) {
		var d protocol.ApprovalDecision
		require.NoError(t, json.NewDecoder(r.Body).Decode(&d))
		mu.Lock()
		decisions = append(decisions, d)
		mu.Unlock()
		fmt.Fprint(w, `{"accepted":true}`)
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)

	var out, errOut strings.Builder
	code := run(context.Background(), []string{"approvals", "--decide", "--tool", "Write", "--api", ts.URL}, noEnv,
		strings.NewReader("r\ntoo long\ny\n"), &out, &errOut)

	require.Equal(t, exitOK, code, errOut.String())
	require.Equal(t, "tool=Write", query)
	lines := strings.Split(out.String(), "\n")
	require.Regexp(t, `^AGE +EXPIRES +TOOL +ARGUMENTS +REQUEST$`, lines[0])
	require.Regexp(t, `^1m +in 1m +Write +\{"file_path":"notes/a-very-long-name-indeed.txt"… +tollgate-conv-a-turn-1/apr-1$`, lines[1])
	require.Regexp(t, `^26h0[01]m +in 45h5[89]m +Bash +\{"command":"ls"\} +tollgate-conv-b-turn-2/apr-2$`, lines[2])
	require.Equal(t, []protocol.ApprovalDecision{
		{RequestID: "tollgate-conv-a-turn-1/apr-1", Decision: protocol.DecisionDecline, Reason: "too long"},
		{RequestID: "tollgate-conv-b-turn-2/apr-2", Decision: protocol.DecisionApprove},
	}, decisions)
	require.Contains(t, out.String(), "sent: decline Write (too long)\n")
	require.Contains(t, out.String(), "sent: approve Bash\n")
}

func TestApprovalsSaysWhoMayDecideAndWhereAQuorumsVotesStand(t *testing.T) {
	now := time.Now()
	pending := []protocol.PendingApproval{
		{RequestID: "tollgate-conv-a-turn-1/apr-1", ToolName: "Write", Arguments: `{"file_path":"a.txt"}`, RequestedAt: now, ExpiresAt: now.Add(time.Hour),
			Deciders: []string{"alice", "bob", "carol"},
			Votes: &protocol.Votes{Quorum: 2, Declines: 1, MayVote: []string{"bob", "carol"},
				Cast: []protocol.Vote{{By: "alice", Decision: protocol.DecisionApprove, At: now}}}},
		{RequestID: "tollgate-conv-a-turn-1/apr-2", ToolName: "Deploy", Arguments: `{}`, RequestedAt: now, ExpiresAt: now.Add(time.Hour),
			Deciders: []string{"alice", "role:oncall"}},
		{RequestID: "tollgate-conv-a-turn-1/apr-3", ToolName: "Bash", Arguments: `{"command":"ls"}`, RequestedAt: now, ExpiresAt: now.Add(time.Hour)},
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, json.NewEncoder(w).Encode(map[string]any{"approvals": pending}))
	}))
	t.Cleanup(ts.Close)
	var out, errOut strings.Builder
	require.Equal(t, exitOK, run(context.Background(), []string{"approvals", "--api", ts.URL}, noEnv, strings.NewReader(""), &out, &errOut), errOut.String())
	lines := strings.Split(out.String(), "\n")
	require.Regexp(t, `^AGE +EXPIRES +TOOL +ARGUMENTS +REQUEST +WHO MAY DECIDE$`, lines[0])
	require.Regexp(t, `Write .* tollgate-conv-a-turn-1/apr-1 +votes: 1 of 2 approvals · alice approved · may still vote: bob, carol$`, lines[1])
	require.Regexp(t, `Deploy .* tollgate-conv-a-turn-1/apr-2 +deciders: alice, role:oncall$`, lines[2])
	require.Regexp(t, `Bash .* tollgate-conv-a-turn-1/apr-3 *$`, lines[3], "anyone may decide it")
}

func TestApprovalsSaysWhenNothingWaits(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"approvals":[]}`)
	}))
	t.Cleanup(ts.Close)
	var out, errOut strings.Builder
	require.Equal(t, exitOK, run(context.Background(), []string{"approvals", "--decide", "--api", ts.URL}, noEnv, strings.NewReader(""), &out, &errOut))
	require.Equal(t, "no approvals are waiting\n", out.String())
}

func TestAResetTokenSaysTheAnswerStartsAgain(t *testing.T) {
	var out strings.Builder
	p := &printer{out: &out}
	for _, e := range []protocol.Event{
		{Type: protocol.EventToken, Data: "I will count "},
		{Type: protocol.EventToken, Data: "Let me ", Reset: true},
		{Type: protocol.EventToken, Data: "count."},
		{Type: protocol.EventSubagentPrefix + protocol.EventToken, Name: "notes", Data: "Noted", Reset: true},
	} {
		require.NoError(t, p.handle(context.Background(), e, nil))
	}
	p.endLine()
	require.Equal(t, "I will count \n"+
		"(the model call was retried and answered otherwise; the answer again:)\n"+
		"Let me count.\n"+
		"[notes] (the model call was retried and answered otherwise; the answer again:)\n"+
		"[notes] Noted\n", out.String())
}

func TestACompactedContextIsSaid(t *testing.T) {
	var out strings.Builder
	p := &printer{out: &out}
	for _, e := range []protocol.Event{
		{Type: protocol.EventContextCompacted, Elided: 3, Summarized: 12, Kept: 5, Cut: 1, BytesBefore: 500 << 10, BytesAfter: 90 << 10},
		{Type: protocol.EventSubagentPrefix + protocol.EventContextCompacted, Name: "notes", Elided: 1, BytesBefore: 30 << 10, BytesAfter: 10 << 10},
	} {
		require.NoError(t, p.handle(context.Background(), e, nil))
	}
	require.Equal(t, "(context compacted to fit the model: 3 old tool outputs left out, 12 earlier messages summarized, 5 newer kept whole, 1 long message cut in the middle; 500 → 90 KiB; the whole conversation is kept)\n"+
		"[notes] (context compacted to fit the model: 1 old tool output left out; 30 → 10 KiB; the whole conversation is kept)\n", out.String())
}

func TestVotesAndEscalationStepsAreSaid(t *testing.T) {
	var out strings.Builder
	p := &printer{out: &out, tools: map[string]string{"r1": "Bash"}}
	for _, e := range []protocol.Event{
		{Type: protocol.EventApprovalVote, RequestID: "r1", By: "alice", Decision: protocol.DecisionApprove,
			Votes: &protocol.Votes{Quorum: 2, Declines: 1, Cast: []protocol.Vote{{By: "alice", Decision: protocol.DecisionApprove}}, MayVote: []string{"bob"}}},
		{Type: protocol.EventApprovalEscalated, RequestID: "r1", Escalated: []string{"role:admin", "carol"}},
	} {
		require.NoError(t, p.handle(context.Background(), e, nil))
	}
	require.Equal(t, "alice voted approve on Bash (1 of 2 approvals; may still vote: bob)\n"+
		"Bash still waits: role:admin, carol may decide too\n", out.String())
}
