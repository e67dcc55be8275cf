package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

// fakeDecider records decisions and answers with accepted (or err).
type fakeDecider struct {
	mu        sync.Mutex
	decisions []protocol.ApprovalDecision
	accepted  bool
	reason    string
	message   string
	pending   bool
	err       error
}

func (f *fakeDecider) decide(_ context.Context, d protocol.ApprovalDecision) (protocol.ApprovalResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decisions = append(f.decisions, d)
	return protocol.ApprovalResult{Accepted: f.accepted, Reason: f.reason, Message: f.message, Pending: f.pending}, f.err
}

var bashRequest = request{
	RequestID: "tollgate-conv-c-turn-1/apr-1",
	ToolName:  "Bash",
	Arguments: `{"command": "ls -la"}`,
	ExpiresAt: time.Date(2030, 1, 1, 12, 3, 0, 0, time.UTC),
}

func TestPromptTurnsEachAnswerIntoADecision(t *testing.T) {
	id := bashRequest.RequestID
	approve := protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove}
	decline := protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionDecline}
	for _, tc := range []struct {
		name, input string
		want        protocol.ApprovalDecision
		wantOut     string
	}{
		{"y approves", "y\n", approve, ""},
		{"yes approves", "YES\n", approve, ""},
		{"an empty line declines", "\n", decline, ""},
		{"n declines", "n\n", decline, ""},
		{"N declines", "N\n", decline, ""},
		{"r declines with a reason", "r\n  not in my workspace \n", protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionDecline, Reason: "not in my workspace"}, "reason: "},
		{"e approves with edited arguments", "e\n{ \"command\": \"ls\" }\n", protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Arguments: `{"command":"ls"}`}, `now:  {"command":"ls -la"}`},
		{"e with arguments that are not an object asks again", "e\n[1]\ny\n", approve, "not a JSON object; answer again"},
		{"an unknown answer asks again", "maybe\nn\n", decline, "answer y (approve)"},
		{"windows line ends", "y\r\n", approve, ""},
		{"the last line may lack its newline", "y", approve, ""},
		{"no answer at all declines", "", decline, "(no answer: declining)"},
		{"no edited arguments declines", "e\n", decline, "(no arguments: declining)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			a := newAsker(strings.NewReader(tc.input), &out)
			a.now = func() time.Time { return bashRequest.ExpiresAt.Add(-3 * time.Minute) }
			require.Equal(t, tc.want, a.ask(bashRequest))
			require.Contains(t, out.String(), "? Bash wants to run:\n    {\n      \"command\": \"ls -la\"\n    }\n")
			require.Contains(t, out.String(), "request "+id+", expires ")
			require.Contains(t, out.String(), "(in 3m0s)")
			require.Contains(t, out.String(), promptLine)
			require.Contains(t, out.String(), tc.wantOut)
		})
	}
}

func TestPromptNamesTheSubagentThatAsks(t *testing.T) {
	var out strings.Builder
	req := bashRequest
	req.Subagent, req.Note = "notetaker", "rule: commands outside the workspace"
	newAsker(strings.NewReader("y\n"), &out).ask(req)
	require.Contains(t, out.String(), "? Bash (subagent notetaker) wants to run:")
	require.Contains(t, out.String(), "note: rule: commands outside the workspace")
}

func TestAskAndDecideSendsTheAnswerAndSaysWhatBecameOfIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		decider  *fakeDecider
		input    string
		wantOut  string
		wantFail bool
	}{
		{"approved", &fakeDecider{accepted: true}, "y\n", "sent: approve Bash\n", false},
		{"declined with a reason", &fakeDecider{accepted: true}, "r\nnot now\n", "sent: decline Bash (not now)\n", false},
		{"edited", &fakeDecider{accepted: true}, "e\n{\"command\":\"ls\"}\n", "sent: approve Bash with edited arguments\n", false},
		{"too late", &fakeDecider{reason: protocol.RejectDecided}, "y\n", "not taken: " + bashRequest.RequestID + " was decided already (by someone else, or a remembered decision)\n", false},
		{"expired", &fakeDecider{reason: protocol.RejectExpired}, "y\n", "not taken: " + bashRequest.RequestID + " has expired (no decision came in time)\n", false},
		{"turn lost", &fakeDecider{reason: protocol.RejectUnknown, message: "turn t ended: the turn's history names payload k, which is not in the payload store"}, "y\n",
			"not taken: " + bashRequest.RequestID + " is unknown: turn t ended: the turn's history names payload k, which is not in the payload store\n", false},
		{"a vote of two", &fakeDecider{accepted: true, pending: true, message: "vote recorded, 1 of 2 approvals (0 of 1 declines); the call waits for more votes"}, "y\n",
			"sent: approve Bash: vote recorded, 1 of 2 approvals (0 of 1 declines); the call waits for more votes\n", false},
		{"voted already", &fakeDecider{reason: protocol.RejectVoted, message: `approval request "r": "alice" has voted on it already`}, "y\n",
			"not taken: " + bashRequest.RequestID + ` has your vote already (its rule needs votes from distinct people): approval request "r": "alice" has voted on it already` + "\n", false},
		{"API down", &fakeDecider{err: errors.New("connection refused")}, "y\n", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			d, err := askAndDecide(context.Background(), newAsker(strings.NewReader(tc.input), &out), tc.decider, bashRequest)
			if tc.wantFail {
				require.ErrorContains(t, err, "connection refused")
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, []protocol.ApprovalDecision{d}, tc.decider.decisions)
			require.Contains(t, out.String(), tc.wantOut)
		})
	}
}

func TestRequestsOfOneBatchAreAskedOneAfterTheOther(t *testing.T) {
	expires := time.Now().Add(time.Minute)
	items := make(chan streamItem, 16)
	for _, e := range []protocol.Event{
		{Seq: 1, Type: protocol.EventToolCall},
		{Seq: 2, Type: protocol.EventApprovalRequest, RequestID: "r-write", ToolName: "Write", Arguments: `{"file_path":"a"}`, ExpiresAt: &expires},
		{Seq: 3, Type: protocol.EventApprovalRequest, RequestID: "r-bash", ToolName: "Bash", Arguments: `{"command":"ls"}`, ExpiresAt: &expires},
		{Seq: 4, Type: "subagent_approval_request", Name: "notetaker", RequestID: "r-sub", ToolName: "Write", Arguments: `{}`, ExpiresAt: &expires},
		{Seq: 5, Type: protocol.EventHeartbeat},
		{Seq: 6, Type: protocol.EventFinish, Reason: protocol.FinishStop},
	} {
		items <- streamItem{event: e}
	}
	close(items)
	var out strings.Builder
	d := &fakeDecider{accepted: true}
	p := &printer{out: &out, ask: newAsker(strings.NewReader("r\nnot that file\ny\n\n"), &out), decider: d, tools: map[string]string{}}

	reason, err := p.consume(context.Background(), items)
	require.NoError(t, err)
	require.Equal(t, protocol.FinishStop, reason)
	require.Equal(t, []protocol.ApprovalDecision{
		{RequestID: "r-write", Decision: protocol.DecisionDecline, Reason: "not that file"},
		{RequestID: "r-bash", Decision: protocol.DecisionApprove},
		{RequestID: "r-sub", Decision: protocol.DecisionDecline},
	}, d.decisions)
	require.Less(t, strings.Index(out.String(), "? Write wants"), strings.Index(out.String(), "? Bash wants"))
	require.Contains(t, out.String(), "? Write (subagent notetaker) wants to run:")
}

func TestARequestDecidedElsewhereIsNotAsked(t *testing.T) {
	items := make(chan streamItem, 4)
	items <- streamItem{event: protocol.Event{Seq: 1, Type: protocol.EventApprovalRequest, RequestID: "r1", ToolName: "Bash"}}
	items <- streamItem{event: protocol.Event{Seq: 2, Type: protocol.EventApprovalDecision, RequestID: "r1", Decision: protocol.DecisionApprove}}
	items <- streamItem{event: protocol.Event{Seq: 3, Type: protocol.EventFinish, Reason: protocol.FinishStop}}
	close(items)
	var out strings.Builder
	d := &fakeDecider{accepted: true}
	p := &printer{out: &out, ask: newAsker(strings.NewReader(""), &out), decider: d, tools: map[string]string{}}

	_, err := p.consume(context.Background(), items)
	require.NoError(t, err)
	require.Empty(t, d.decisions)
	require.Contains(t, out.String(), "? Bash was decided elsewhere\napproved Bash\n")
	require.NotContains(t, out.String(), promptLine)
}

func TestTheAskShowsWhatTheCallWillDoAsTheWorkerReadIt(t *testing.T) {
	var out strings.Builder
	req := bashRequest
	req.Preview = "runs in the workspace with bash -c (2 lines, 37 bytes):\n$ ls -la⏎\n$ rm -rf ~/   # harmless cleanup⏎"
	a := newAsker(strings.NewReader("n\n"), &out)
	a.ask(req)
	require.Contains(t, out.String(), "  what it will do:\n    runs in the workspace with bash -c (2 lines, 37 bytes):\n    $ ls -la⏎\n    $ rm -rf ~/   # harmless cleanup⏎\n")
}
