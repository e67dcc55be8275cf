package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// The AI SDK endpoint's second person, timeouts, and what a hostile
// client may send it, at the level of the requests and chunks: what
// aisdk_test.go's real client never sends.

// uiReply is one answer of POST /ai-sdk/chat: its status, and its chunks
// when it streamed (done when it ended with [DONE]).
type uiReply struct {
	status int
	body   string
	chunks []uiChunk
	done   bool
}

// uiPost posts body to the API at api's /ai-sdk/chat with token (none
// when ""), and reads the answer to its end.
func uiPost(t *testing.T, api, token, body string) uiReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+aiSDKChatPath, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return readUIReply(t, resp)
}

// readUIReply reads a UI message stream, or an error's body, to its end.
func readUIReply(t *testing.T, resp *http.Response) uiReply {
	t.Helper()
	out := uiReply{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		out.body = string(b)
		return out
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			out.done = true
			break
		}
		var ch uiChunk
		require.NoError(t, json.Unmarshal([]byte(data), &ch), data)
		out.chunks = append(out.chunks, ch)
	}
	require.True(t, out.done, "the stream ends with [DONE]: %+v", out.chunks)
	return out
}

// ofKind returns r's chunks of type typ.
func (r uiReply) ofKind(typ string) []uiChunk {
	var out []uiChunk
	for _, ch := range r.chunks {
		if ch.Type == typ {
			out = append(out, ch)
		}
	}
	return out
}

// finish is the finish reason of r's last chunk, which must be finish.
func (r uiReply) finish(t *testing.T) string {
	t.Helper()
	require.NotEmpty(t, r.chunks)
	last := r.chunks[len(r.chunks)-1]
	require.Equal(t, "finish", last.Type, "%+v", r.chunks)
	return last.FinishReason
}

// asks returns the approval id r asks about for tool call id call.
func (r uiReply) asks(t *testing.T, call string) string {
	t.Helper()
	for _, ch := range r.ofKind("tool-approval-request") {
		if ch.ToolCallID == call {
			return ch.ApprovalID
		}
	}
	t.Fatalf("no approval request for %s: %+v", call, r.chunks)
	return ""
}

// dataField is field of a data chunk's data.
func dataField(ch uiChunk, field string) string {
	m, _ := ch.Data.(map[string]any)
	s, _ := m[field].(string)
	return s
}

// userMessage is the SDK's request of a new message text, of id, to conv.
func userMessage(conv, id, text string) string {
	return fmt.Sprintf(`{"id":%q,"trigger":"submit-message","messages":[{"id":%q,"role":"user","parts":[{"type":"text","text":%q}]}]}`, conv, id, text)
}

// uiAnswer is one approval response the SDK puts on a tool part.
type uiAnswer struct {
	tool, call, approvalID string
	approved               bool
	reason                 string
}

// uiAnswers is the SDK's request that carries the answers on the assistant
// message messageID of conv.
func uiAnswers(conv, messageID string, as ...uiAnswer) string {
	var parts []string
	for _, a := range as {
		parts = append(parts, fmt.Sprintf(`{"type":"tool-%s","toolCallId":%q,"state":"approval-responded","input":{},"approval":{"id":%q,"approved":%t,"reason":%q}}`,
			a.tool, a.call, a.approvalID, a.approved, a.reason))
	}
	return fmt.Sprintf(`{"id":%q,"trigger":"submit-message","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"go"}]},{"id":%q,"role":"assistant","parts":[%s]}]}`,
		conv, messageID, strings.Join(parts, ","))
}

// The demo model's calls (scripted.Demo): Read, then Write and Bash, which
// ask.
const (
	demoRead, demoWrite, demoBash = "call_0_0", "call_0_1", "call_0_2"
)

func TestAISDKSecondPersonApprovesWhatTheSendersOwnApprovalMayNot(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, SecondPerson: true},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	const devToken, leadToken, botToken = "dev-0123456789abcdef", "lead-0123456789abcde", "bot-0123456789abcdef"
	o := st.apiOptions()
	o.Tokens = []config.APIToken{
		{Token: devToken, Principal: "dev", Roles: config.DefaultRoles},
		{Token: leadToken, Principal: "lead", Roles: []string{config.RoleApprove}},
		{Token: botToken, Principal: "bot", Roles: []string{config.RoleBypass}},
	}
	api := serveAPI(t, NewServer(o))
	const conv = "aisdk-second"
	turn := contract.TurnWorkflowID(conv, 1)

	asked := uiPost(t, api.URL, devToken, userMessage(conv, "m1", "tidy up"))
	require.Equal(t, http.StatusOK, asked.status, asked.body)
	require.Equal(t, "tool-calls", asked.finish(t), "the turn waits for a person")
	write := asked.asks(t, demoWrite)

	// The sender's own approval is not taken, and the stream says so: the
	// call asks again, for someone else.
	own := uiPost(t, api.URL, devToken, uiAnswers(conv, turn, uiAnswer{"Write", demoWrite, write, true, ""}))
	require.Equal(t, http.StatusOK, own.status, own.body)
	refused := own.ofKind("data-tollgate-refused")
	require.Len(t, refused, 1, "%+v", own.chunks)
	require.Equal(t, protocol.RejectForbidden, dataField(refused[0], "reason"))
	require.Equal(t, write, own.asks(t, demoWrite), "asked again")
	require.Empty(t, own.ofKind("tool-output-available"), "nothing ran")
	require.Equal(t, "tool-calls", own.finish(t))

	// Reading the waiting turn is for chat and approve tokens, on the
	// resume route as on the turn's stream.
	for token, want := range map[string]int{leadToken: http.StatusOK, botToken: http.StatusForbidden} {
		for _, url := range []string{api.URL + "/ai-sdk/chat/" + conv + "/stream", api.URL + "/chat/turns/" + turn + "/events"} {
			ctx, cancel := context.WithCancel(context.Background())
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			require.Equal(t, want, resp.StatusCode, "%s with %s", url, token)
			cancel()
			resp.Body.Close()
		}
	}

	// A token that may approve but not chat answers a call, and sends no
	// message.
	require.Equal(t, http.StatusForbidden, uiPost(t, api.URL, leadToken, userMessage(conv, "m2", "more")).status)
	lead := uiPost(t, api.URL, leadToken, uiAnswers(conv, turn, uiAnswer{"Write", demoWrite, write, true, ""}))
	require.Equal(t, http.StatusOK, lead.status, lead.body)
	require.Empty(t, lead.ofKind("data-tollgate-refused"))
	decisions := lead.ofKind("data-tollgate-decision")
	require.Len(t, decisions, 1, "%+v", lead.chunks)
	require.Equal(t, "lead", dataField(decisions[0], "by"))
	var ran bool
	for _, ch := range lead.ofKind("tool-output-available") {
		ran = ran || ch.ToolCallID == demoWrite
	}
	require.True(t, ran, "the Write ran: %+v", lead.chunks)
	require.Equal(t, "stop", lead.finish(t))
}

func TestAISDKCallThatTimesOutIsShownAsFailedAndALateAnswerIsNotTaken(t *testing.T) {
	t.Parallel()
	st := newStack(t, withApprovalTimeout(2*time.Second))
	const conv = "aisdk-timeout"
	asked := uiPost(t, st.api.URL, "", userMessage(conv, "m1", "tidy up"))
	require.Equal(t, "tool-calls", asked.finish(t))
	write, bash := asked.asks(t, demoWrite), asked.asks(t, demoBash)
	// The turn ends once its calls time out.
	serverEvents(t, st.api.URL, contract.TurnWorkflowID(conv, 1), protocol.EventFinish)

	// The answer comes too late: the stream shows what became of the calls.
	late := uiPost(t, st.api.URL, "", uiAnswers(conv, contract.TurnWorkflowID(conv, 1),
		uiAnswer{"Write", demoWrite, write, true, ""}, uiAnswer{"Bash", demoBash, bash, true, ""}))
	require.Equal(t, http.StatusOK, late.status, late.body)
	for _, ch := range late.ofKind("tool-approval-response") {
		require.False(t, *ch.Approved, "%+v", ch)
	}
	require.Len(t, late.ofKind("tool-approval-response"), 2)
	for _, ch := range late.ofKind("data-tollgate-decision") {
		require.Equal(t, protocol.DecisionTimeout, dataField(ch, "decision"))
	}
	failed := map[string]string{}
	for _, ch := range late.ofKind("tool-output-error") {
		failed[ch.ToolCallID] = ch.ErrorText
	}
	require.Contains(t, failed, demoWrite, "%+v", late.chunks)
	require.Contains(t, failed, demoBash)
	require.Equal(t, "stop", late.finish(t))
	require.Equal(t, protocol.DecisionTimeout, auditOf(t, st, conv, protocol.ToolWrite).Decision, "the late approval changed nothing")
}

func TestAISDKChatRefusesAnswersAHostileClientCrafts(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	const victim, attacker = "aisdk-victim", "aisdk-attacker"
	victimTurn, attackerTurn := contract.TurnWorkflowID(victim, 1), contract.TurnWorkflowID(attacker, 1)
	first := userMessage(victim, "m-victim", "tidy up")
	v := uiPost(t, st.api.URL, "", first)
	a := uiPost(t, st.api.URL, "", userMessage(attacker, "m-attacker", "tidy up"))
	vWrite, vBash := v.asks(t, demoWrite), v.asks(t, demoBash)
	aWrite, aBash := a.asks(t, demoWrite), a.asks(t, demoBash)

	for name, body := range map[string]string{
		"another conversation's approval, on that turn's message": uiAnswers(attacker, victimTurn, uiAnswer{"Write", demoWrite, vWrite, true, ""}),
		"another conversation's approval, on this turn's call":    uiAnswers(attacker, attackerTurn, uiAnswer{"Write", demoWrite, vWrite, true, ""}),
		"a forged approval id":                                     uiAnswers(attacker, attackerTurn, uiAnswer{"Write", demoWrite, attackerTurn + "/apr-forged", true, ""}),
		"an approval of a call that never asked":                   uiAnswers(attacker, attackerTurn, uiAnswer{"Read", demoRead, aWrite, true, ""}),
		"an approval with no id":                                   uiAnswers(attacker, attackerTurn, uiAnswer{"Write", demoWrite, "", true, ""}),
		"another conversation's approval, under the victim's chat": uiAnswers(victim, attackerTurn, uiAnswer{"Write", demoWrite, aWrite, true, ""}),
	} {
		r := uiPost(t, st.api.URL, "", body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", name, r.body)
		require.Contains(t, r.body, "answers no call", name)
	}

	// A message of hundreds of copies of one answer is one decision.
	api := st.newAPI(t)
	copies := make([]uiAnswer, 300)
	for i := range copies {
		copies[i] = uiAnswer{"Bash", demoBash, aBash, i%2 == 0, "copy " + strconv.Itoa(i)}
	}
	many := uiPost(t, api.URL, "", uiAnswers(attacker, attackerTurn, copies...))
	require.Equal(t, http.StatusOK, many.status, many.body)
	require.Empty(t, many.ofKind("data-tollgate-refused"), "no copy was sent to be refused")
	require.Equal(t, 1, decisionsDelivered(t, api.URL), "one delivery")
	require.Equal(t, "tool-calls", many.finish(t), "the Write still waits")
	require.Equal(t, protocol.DecisionApprove, auditOf(t, st, attacker, protocol.ToolBash).Decision, "the first copy's")

	// The victim's calls still wait: nothing above decided them. Decline
	// the Write; then a client that flips its copy of the decline into an
	// approval, with the Bash's, only approves the Bash.
	declined := uiPost(t, st.api.URL, "", uiAnswers(victim, victimTurn, uiAnswer{"Write", demoWrite, vWrite, false, "no notes"}))
	require.Empty(t, declined.ofKind("data-tollgate-refused"), "%+v", declined.chunks)
	require.Equal(t, "tool-calls", declined.finish(t))
	flipped := uiAnswers(victim, victimTurn, uiAnswer{"Write", demoWrite, vWrite, true, ""}, uiAnswer{"Bash", demoBash, vBash, true, ""})
	r := uiPost(t, st.api.URL, "", flipped)
	require.Equal(t, "stop", r.finish(t))
	var denied bool
	for _, ch := range r.ofKind("tool-output-denied") {
		denied = denied || ch.ToolCallID == demoWrite
	}
	require.True(t, denied, "the stream keeps the decline: %+v", r.chunks)
	require.Equal(t, protocol.DecisionDecline, auditOf(t, st, victim, protocol.ToolWrite).Decision)
	require.Equal(t, protocol.DecisionApprove, auditOf(t, st, victim, protocol.ToolBash).Decision)

	// Replays: the first message streams its turn again, starting no
	// other, and the answers change nothing.
	again := uiPost(t, st.api.URL, "", first)
	require.Equal(t, victimTurn, again.chunks[0].MessageID, "the same turn")
	require.Equal(t, "stop", again.finish(t))
	require.Equal(t, "stop", uiPost(t, st.api.URL, "", flipped).finish(t))
	require.Equal(t, protocol.DecisionDecline, auditOf(t, st, victim, protocol.ToolWrite).Decision)
	resp, err := http.Get(st.api.URL + "/conversations/" + victim + "/turns")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.NotContains(t, string(b), contract.TurnWorkflowID(victim, 2), "no second turn")
}

// decisionsDelivered is how many decisions the API at api sent to turns.
func decisionsDelivered(t *testing.T, api string) int {
	t.Helper()
	resp, err := http.Get(api + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^tollgate_api_approval_decisions_total\{[^}]*\} (\d+)$`).FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

func TestAISDKVoteOfAQuorumAsksAgainAndTheSecondVoteRunsTheCall(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{"alice", "bob"}, Quorum: 2},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	api, tokens := quorumAPI(t, st)
	const conv = "aisdk-quorum"
	turn := contract.TurnWorkflowID(conv, 1)

	asked := uiPost(t, api.URL, tokens["dev"], userMessage(conv, "m1", "tidy up"))
	require.Equal(t, http.StatusOK, asked.status, asked.body)
	require.Equal(t, "tool-calls", asked.finish(t))
	write := asked.asks(t, demoWrite)

	// Alice's vote is taken; the call still waits, is asked again, and
	// the stream ends for the next person's answer.
	first := uiPost(t, api.URL, tokens["alice"], uiAnswers(conv, turn, uiAnswer{"Write", demoWrite, write, true, ""}))
	require.Equal(t, http.StatusOK, first.status, first.body)
	require.Empty(t, first.ofKind("data-tollgate-refused"), "%+v", first.chunks)
	require.Equal(t, write, first.asks(t, demoWrite), "asked again")
	votes := first.ofKind("data-tollgate-votes")
	require.NotEmpty(t, votes, "%+v", first.chunks)
	v := votes[len(votes)-1].Data.(map[string]any)["votes"].(map[string]any)
	require.Len(t, v["cast"], 1)
	require.Equal(t, []any{"bob"}, v["mayVote"])
	require.Empty(t, first.ofKind("tool-output-available"), "nothing ran")
	require.Equal(t, "tool-calls", first.finish(t))

	// Alice again: refused, and asked again for someone else.
	again := uiPost(t, api.URL, tokens["alice"], uiAnswers(conv, turn, uiAnswer{"Write", demoWrite, write, false, "no"}))
	refused := again.ofKind("data-tollgate-refused")
	require.Len(t, refused, 1, "%+v", again.chunks)
	require.Equal(t, protocol.RejectVoted, dataField(refused[0], "reason"))
	require.Equal(t, "tool-calls", again.finish(t))

	second := uiPost(t, api.URL, tokens["bob"], uiAnswers(conv, turn, uiAnswer{"Write", demoWrite, write, true, ""}))
	require.Equal(t, http.StatusOK, second.status, second.body)
	var ran bool
	for _, ch := range second.ofKind("tool-output-available") {
		ran = ran || ch.ToolCallID == demoWrite
	}
	require.True(t, ran, "the Write ran: %+v", second.chunks)
	require.Equal(t, "stop", second.finish(t))
}

func TestAISDKResumedStreamOfACallPastAnEscalationStepEndsForTheClientsAnswer(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{"alice"}, Timeout: time.Minute,
				Escalate: []policy.Escalation{{After: time.Second, To: []string{"bob"}}}},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	const conv = "aisdk-escalated"
	asked := uiPost(t, st.api.URL, "", userMessage(conv, "m1", "tidy up"))
	require.Equal(t, "tool-calls", asked.finish(t))
	serverEvents(t, st.api.URL, contract.TurnWorkflowID(conv, 1), protocol.EventApprovalEscalated)

	// The step leaves the call waiting: the resumed stream ends, with the
	// call asking and who may decide it now, well before its timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.api.URL+"/ai-sdk/chat/"+conv+"/stream", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	resumed := readUIReply(t, resp)
	resumed.asks(t, demoWrite)
	votes := resumed.ofKind("data-tollgate-votes")
	require.Len(t, votes, 1, "%+v", resumed.chunks)
	require.Equal(t, []any{"alice", "bob"}, votes[0].Data.(map[string]any)["deciders"])
	require.Equal(t, "tool-calls", resumed.finish(t))
}
