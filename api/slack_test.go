package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// slackSecret is the Slack app's Signing Secret in these tests.
const slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"

// slackMessage is a message as Slack keeps it: what a notice posted, and
// what a response_url post replaces it with.
type slackMessage struct {
	Text            string            `json:"text"`
	Blocks          []json.RawMessage `json:"blocks"`
	ReplaceOriginal bool              `json:"replace_original"`
}

// buttons are the action ids of the message's buttons, with their values
// (or their URLs, for link buttons).
func (m slackMessage) buttons(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, raw := range m.Blocks {
		var b struct {
			Type     string `json:"type"`
			Elements []struct {
				ActionID string `json:"action_id"`
				Value    string `json:"value"`
				URL      string `json:"url"`
			} `json:"elements"`
		}
		require.NoError(t, json.Unmarshal(raw, &b))
		if b.Type == "actions" {
			for _, e := range b.Elements {
				out[e.ActionID] = e.Value + e.URL
			}
		}
	}
	return out
}

// fakeSlack stands in for Slack's side: the incoming webhook the worker
// posts notices to (/hook), and the response_urls it gives callbacks
// (/respond/NAME), keeping what each got.
type fakeSlack struct {
	srv      *httptest.Server
	mu       sync.Mutex
	notices  []slackMessage
	response map[string][]slackMessage
}

func newFakeSlack(t *testing.T) *fakeSlack {
	f := &fakeSlack{response: map[string][]slackMessage{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m slackMessage
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "post JSON", http.StatusBadRequest)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		switch name, ok := strings.CutPrefix(r.URL.Path, "/respond/"); {
		case r.URL.Path == "/hook":
			f.notices = append(f.notices, m)
		case ok:
			f.response[name] = append(f.response[name], m)
		default:
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, "ok") // as Slack answers
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// notice waits for the notice whose Approve button decides requestID.
func (f *fakeSlack) notice(t *testing.T, requestID string) slackMessage {
	t.Helper()
	var out slackMessage
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, n := range f.notices {
			if n.buttons(t)[protocol.SlackActionApprove] == requestID {
				out = n
				return
			}
		}
		require.Fail(c, "no notice yet", requestID)
	}, waitFor, 20*time.Millisecond)
	return out
}

// responses are the posts to the response_url named name so far.
func (f *fakeSlack) responses(name string) []slackMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]slackMessage(nil), f.response[name]...)
}

// responded waits for the first post to the response_url named name.
func (f *fakeSlack) responded(t *testing.T, name string) slackMessage {
	t.Helper()
	var out slackMessage
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := f.responses(name)
		require.NotEmpty(c, got, "nothing posted to response_url %s yet", name)
		out = got[0]
	}, waitFor, 20*time.Millisecond)
	return out
}

// slackClick is one click on a notice's button, as Slack reports it.
type slackClick struct {
	user, actionID, requestID string
	// response names the response_url given the callback.
	response string
	notice   slackMessage
	at       time.Time
}

// payload is the click's block_actions payload, in the shape Slack
// documents (https://docs.slack.dev/reference/interaction-payloads/block_actions-payload).
func (c slackClick) payload(t *testing.T, slackURL string) string {
	t.Helper()
	ts := fmt.Sprintf("%d.000200", c.at.Unix())
	p := map[string]any{
		"type":       "block_actions",
		"user":       map[string]any{"id": c.user, "username": strings.ToLower(c.user), "name": strings.ToLower(c.user), "team_id": "T0TEAM"},
		"api_app_id": "A0APP",
		"token":      "a deprecated verification token",
		"container":  map[string]any{"type": "message", "message_ts": "1764892800.000100", "channel_id": "C0APPROVALS", "is_ephemeral": false},
		"trigger_id": "1.2.3",
		"team":       map[string]any{"id": "T0TEAM", "domain": "example"},
		"channel":    map[string]any{"id": "C0APPROVALS", "name": "approvals"},
		"message": map[string]any{
			"type": "message", "subtype": "bot_message", "ts": "1764892800.000100",
			"text": c.notice.Text, "blocks": c.notice.Blocks,
		},
		"response_url": slackURL + "/respond/" + c.response,
		"actions": []any{map[string]any{
			"action_id": c.actionID, "block_id": "b0", "type": "button", "value": c.requestID,
			"text": map[string]any{"type": "plain_text", "text": "Approve"}, "action_ts": ts,
		}},
	}
	b, err := json.Marshal(p)
	require.NoError(t, err)
	return url.Values{"payload": {string(b)}}.Encode()
}

// signedSlack signs body as Slack documents it
// (https://api.slack.com/authentication/verifying-requests-from-slack):
// "v0=" and the hex HMAC-SHA256, under secret, of "v0:", the timestamp,
// ":" and the raw body.
func signedSlack(secret string, at time.Time, body string) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + ts + ":" + body))
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	h.Set("X-Slack-Request-Timestamp", ts)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	return h
}

// postSlack posts a callback with header and answers its status and body.
func postSlack(t *testing.T, apiURL string, header http.Header, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, apiURL+protocol.SlackInteractionsPath, strings.NewReader(body))
	require.NoError(t, err)
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp.StatusCode, readAll(t, resp)
}

// slackStack is a stack whose worker posts interactive slack notices to
// a fake Slack, and an API with tokens that takes Slack's callbacks:
// U0ALICE is alice and U0BOB bob (both may approve), U0CAROL carol, whose
// token may only chat, and U0ERIN erin, who may approve with two tokens,
// one of the team finance and one of the team oncall.
func slackStack(t *testing.T, opts ...stackOption) (*stack, *Server, *httptest.Server, *fakeSlack) {
	t.Helper()
	key, err := links.NewKey("a link secret of the slack test, long enough")
	require.NoError(t, err)
	fake := newFakeSlack(t)
	notifier := &activities.Notifier{URL: fake.srv.URL + "/hook", Format: activities.NoticeFormatSlack, Links: &key, Interactive: true}
	st := newStack(t, append(opts,
		withSettings(func(s *workflows.Settings) { s.Notify = true }),
		withActivity(activities.NotifyActivity, notifier.Notify),
		withLinks(&key))...)
	notifier.PublicURL = st.api.URL
	o := st.apiOptions()
	o.Tokens = []config.APIToken{
		{Token: aliceSlackToken, Principal: "alice", Roles: config.DefaultRoles},
		{Token: "bob-slack-0123456789ab", Principal: "bob", Roles: []string{config.RoleApprove}},
		{Token: "carol-slack-012345678", Principal: "carol", Roles: []string{config.RoleChat}},
		{Token: "erin-slack-0123456789", Principal: "erin", Roles: []string{config.RoleApprove}, Teams: []string{"finance"}},
		{Token: "erin-slack-9876543210", Principal: "erin", Roles: []string{config.RoleChat}, Teams: []string{"oncall"}},
	}
	o.Slack = config.Slack{
		SigningSecret: slackSecret,
		Users:         map[string]string{"U0ALICE": "alice", "U0BOB": "bob", "U0CAROL": "carol", "U0ERIN": "erin"},
		ResponseURL:   fake.srv.URL + "/respond/",
	}
	srv := NewServer(o)
	return st, srv, serveAPI(t, srv), fake
}

const aliceSlackToken = "alice-slack-0123456789"

func TestASignedSlackClickDecidesAsTheMappedPrincipalAndUpdatesTheMessage(t *testing.T) {
	t.Parallel()
	st, srv, api, fake := slackStack(t)
	_, msgs := chatAs(t, api, aliceSlackToken, `{"query":"one","conversationId":"slack-1"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	bash, write := asked["Bash"].RequestID, asked["Write"].RequestID

	notice := fake.notice(t, bash)
	buttons := notice.buttons(t)
	require.Equal(t, bash, buttons[protocol.SlackActionDecline])
	require.True(t, strings.HasPrefix(buttons[protocol.SlackActionLinkApprove], st.api.URL+links.Path+"?"), "the link stays a button that opens its page: %v", buttons)
	require.Contains(t, buttons[protocol.SlackActionLinkDecline], "decision=decline")

	// Bob approves Bash in Slack: the turn runs it, and the message says
	// who approved, without its buttons.
	now := time.Now()
	body := slackClick{user: "U0BOB", actionID: protocol.SlackActionApprove, requestID: bash, response: "bob-bash", notice: notice, at: now}.payload(t, fake.srv.URL)
	header := signedSlack(slackSecret, now, body)
	status, answer := postSlack(t, api.URL, header, body)
	require.Equal(t, http.StatusOK, status, answer)
	updated := fake.responded(t, "bob-bash")
	require.True(t, updated.ReplaceOriginal)
	require.Equal(t, "Approved by bob at "+time.Unix(now.Unix(), 0).UTC().Format(time.RFC3339)+".", updated.Text)
	require.Empty(t, updated.buttons(t), "a decided request's message has no buttons")
	require.Contains(t, string(updated.Blocks[len(updated.Blocks)-1]), updated.Text)
	require.Contains(t, string(updated.Blocks[0]), "*Bash*", "the call is still shown")

	// The same callback again, within Slack's window: nothing more.
	status, _ = postSlack(t, api.URL, header, body)
	require.Equal(t, http.StatusOK, status)
	srv.slack.work.Wait()
	require.Len(t, fake.responses("bob-bash"), 1, "a replay posts nothing")

	// Bob declines Write, from its own notice.
	wnotice := fake.notice(t, write)
	body = slackClick{user: "U0BOB", actionID: protocol.SlackActionDecline, requestID: write, response: "bob-write", notice: wnotice, at: now}.payload(t, fake.srv.URL)
	status, _ = postSlack(t, api.URL, signedSlack(slackSecret, now, body), body)
	require.Equal(t, http.StatusOK, status)
	require.True(t, strings.HasPrefix(fake.responded(t, "bob-write").Text, "Declined by bob at "))

	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	decisions := ofType(events, protocol.EventApprovalDecision)
	require.Len(t, decisions, 2, "one decision each, the replay none")
	for _, d := range decisions {
		require.Equal(t, "bob", d.By)
		require.Equal(t, config.RoleApprove, d.Role)
	}
	results := resultStatuses(ofType(events, protocol.EventToolResult)[0].ToolResults)
	require.Contains(t, results, "call_0_2 Bash ok", "the approved Bash ran: %v", results)
	require.Contains(t, results, "call_0_1 Write declined", results)
	rows := st.audit(t, "principal=bob").Records
	require.Len(t, rows, 2, "the ledger records bob, once a request")
}

func TestSlackCallbacksThatMayNotDecideAreRefusedAndSaySo(t *testing.T) {
	t.Parallel()
	st, srv, api, fake := slackStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolBash, Require: workflows.RequireAlways, Deciders: []string{"bob"}},
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, SecondPerson: true},
		}
	}))
	_, msgs := chatAs(t, api, aliceSlackToken, `{"query":"one","conversationId":"slack-refused"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	bash, write := asked["Bash"].RequestID, asked["Write"].RequestID
	notice := fake.notice(t, bash)
	now := time.Now()
	click := func(user, requestID, response string) string {
		return slackClick{user: user, actionID: protocol.SlackActionApprove, requestID: requestID, response: response, notice: notice, at: now}.payload(t, fake.srv.URL)
	}

	// Not signed with the app's secret, or signed too long ago: 401, and
	// nothing happens.
	body := click("U0BOB", bash, "forged")
	status, answer := postSlack(t, api.URL, signedSlack("another app's signing secret 0123", now, body), body)
	require.Equal(t, http.StatusUnauthorized, status, answer)
	require.Contains(t, answer, "not a callback Slack signed")
	tampered := signedSlack(slackSecret, now, body)
	status, _ = postSlack(t, api.URL, tampered, strings.Replace(body, "U0BOB", "U0ALICE", 1))
	require.Equal(t, http.StatusUnauthorized, status, "a body changed after signing")
	stale := now.Add(-6 * time.Minute)
	body = click("U0BOB", bash, "stale")
	status, answer = postSlack(t, api.URL, signedSlack(slackSecret, stale, body), body)
	require.Equal(t, http.StatusUnauthorized, status, answer)
	unsigned := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	status, _ = postSlack(t, api.URL, unsigned, body)
	require.Equal(t, http.StatusUnauthorized, status)
	// A page elsewhere cannot post one either (the cross-site check).
	fromPage := signedSlack(slackSecret, now, body)
	fromPage.Set("Origin", "https://evil.example")
	status, _ = postSlack(t, api.URL, fromPage, body)
	require.Equal(t, http.StatusForbidden, status)

	// Signed, but with the outcome to go elsewhere than Slack: refused,
	// and nothing is posted there.
	elsewhere := newFakeSlack(t)
	body = slackClick{user: "U0BOB", actionID: protocol.SlackActionApprove, requestID: bash, response: "elsewhere", notice: notice, at: now}.payload(t, elsewhere.srv.URL)
	status, answer = postSlack(t, api.URL, signedSlack(slackSecret, now, body), body)
	require.Equal(t, http.StatusBadRequest, status, answer)
	require.Contains(t, answer, "response_url does not start with TOLLGATE_SLACK_RESPONSE_URL")

	// Signed, but by someone tollgate does not know, or who may not
	// decide: each told why, with the buttons left for someone who may.
	for _, tc := range []struct{ user, requestID, response, want string }{
		{"U0MALLORY", bash, "mallory", "Refused: Slack user <@U0MALLORY> (U0MALLORY) is not in TOLLGATE_SLACK_USERS"},
		{"U0CAROL", bash, "carol", "Refused: carol's API tokens carry neither the approve nor the admin role."},
		{"U0ALICE", bash, "alice-bash", `Refused: Bash calls are decided only by bob, not by "alice".`},
		{"U0ALICE", write, "alice-write", `Refused: Write calls need a second person: "alice" sent the message that led to this call.`},
	} {
		body := click(tc.user, tc.requestID, tc.response)
		status, answer := postSlack(t, api.URL, signedSlack(slackSecret, now, body), body)
		require.Equal(t, http.StatusOK, status, answer)
		got := fake.responded(t, tc.response)
		require.True(t, strings.HasPrefix(got.Text, tc.want), "%s: %s", tc.user, got.Text)
		require.True(t, got.ReplaceOriginal)
		require.Equal(t, bash, got.buttons(t)[protocol.SlackActionApprove], "the buttons stay")
	}
	srv.slack.work.Wait()
	require.Empty(t, fake.responses("forged"))
	require.Empty(t, fake.responses("stale"))
	require.Empty(t, elsewhere.responses("elsewhere"))
	pending := map[string]bool{}
	for _, a := range st.approvals(t, "?conversationId=slack-refused") {
		pending[a.RequestID] = true
	}
	require.Equal(t, map[string]bool{bash: true, write: true}, pending, "nothing was decided")
	require.Empty(t, st.audit(t, "decision=approve").Records)

	// Bob may: a second click on the message alice's refusal updated
	// (its outcome replaced, not added to) decides.
	notice = fake.responses("alice-bash")[0]
	body = click("U0BOB", bash, "bob")
	status, _ = postSlack(t, api.URL, signedSlack(slackSecret, now, body), body)
	require.Equal(t, http.StatusOK, status)
	got := fake.responded(t, "bob")
	require.True(t, strings.HasPrefix(got.Text, "Approved by bob"), got.Text)
	require.Equal(t, 1, strings.Count(strings.Join(rawStrings(got.Blocks), ""), slackOutcomeBlock), "one outcome block")
	require.NotContains(t, strings.Join(rawStrings(got.Blocks), ""), "alice")

	// A click after the decision is told so, and decides nothing.
	body = click("U0ALICE", bash, "late")
	status, _ = postSlack(t, api.URL, signedSlack(slackSecret, now.Add(time.Second), body), body)
	require.Equal(t, http.StatusOK, status)
	late := fake.responded(t, "late")
	require.Equal(t, "Refused: the request was already decided.", late.Text)
	require.Empty(t, late.buttons(t))
}

// A Slack user decides in the team roles of their principal's tokens, all
// of them (a click names no token): erin's finance and oncall.
func TestASlackClickDecidesInTheTeamRolesOfThePrincipalsTokens(t *testing.T) {
	t.Parallel()
	_, _, api, fake := slackStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolBash, Require: workflows.RequireAlways, Deciders: []string{workflows.DeciderRolePrefix + "finance"}},
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{workflows.DeciderRolePrefix + "oncall"}},
		}
	}))
	_, msgs := chatAs(t, api, aliceSlackToken, `{"query":"one","conversationId":"slack-teams"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))
	now := time.Now()
	click := func(user, requestID, response string) slackMessage {
		body := slackClick{user: user, actionID: protocol.SlackActionApprove, requestID: requestID, response: response, notice: fake.notice(t, requestID), at: now}.payload(t, fake.srv.URL)
		status, answer := postSlack(t, api.URL, signedSlack(slackSecret, now, body), body)
		require.Equal(t, http.StatusOK, status, answer)
		return fake.responded(t, response)
	}
	bash, write := asked["Bash"].RequestID, asked["Write"].RequestID
	require.Equal(t, `Refused: Bash calls are decided only by role:finance, not by "bob".`, click("U0BOB", bash, "bob-bash").Text)
	require.True(t, strings.HasPrefix(click("U0ERIN", bash, "erin-bash").Text, "Approved by erin"))
	require.True(t, strings.HasPrefix(click("U0ERIN", write, "erin-write").Text, "Approved by erin"), "oncall, from erin's other token")

	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	for _, d := range ofType(events, protocol.EventApprovalDecision) {
		require.Equal(t, "erin", d.By)
		require.Equal(t, config.RoleApprove, d.Role)
	}
	require.Len(t, ofType(events, protocol.EventApprovalDecision), 2)
}

func TestASlackClickOnAQuorumCallIsAVoteUntilTheQuorumDecides(t *testing.T) {
	t.Parallel()
	st, srv, api, fake := slackStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{"alice", "bob"}, Quorum: 2},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	_, msgs := chatAs(t, api, aliceSlackToken, `{"query":"one","conversationId":"slack-quorum"}`)
	seq := 0
	write := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))["Write"].RequestID
	notice := fake.notice(t, write)
	now := time.Now()
	click := func(user, action, response string, on slackMessage, at time.Time) slackMessage {
		t.Helper()
		body := slackClick{user: user, actionID: action, requestID: write, response: response, notice: on, at: at}.payload(t, fake.srv.URL)
		status, answer := postSlack(t, api.URL, signedSlack(slackSecret, at, body), body)
		require.Equal(t, http.StatusOK, status, answer)
		got := fake.responded(t, response)
		require.True(t, got.ReplaceOriginal)
		return got
	}
	stamp := func(at time.Time) string { return time.Unix(at.Unix(), 0).UTC().Format(time.RFC3339) }

	// Alice's click is a vote: recorded, one of two; the buttons stay for
	// bob, and the call still waits.
	voted := click("U0ALICE", protocol.SlackActionApprove, "alice-1", notice, now)
	require.Equal(t, "alice voted to approve at "+stamp(now)+": vote recorded, 1 of 2 approvals (0 of 1 declines); the call waits for more votes.", voted.Text)
	require.Equal(t, write, voted.buttons(t)[protocol.SlackActionApprove], "the buttons stay")
	vote := untilEvent(t, msgs, &seq, protocol.EventApprovalVote, 1)
	require.Equal(t, "alice", vote[len(vote)-1].By)
	require.Empty(t, ofType(vote, protocol.EventToolResult), "nothing ran on one approval of two")
	require.Equal(t, []string{write}, requestIDs(st.approvals(t, "?conversationId=slack-quorum")), "the Write still waits")

	// Alice again, on the message her vote updated. Approve once more is
	// the same decision by the same person, which the API sends as the
	// same Update (decisionUpdateID): told the first one's outcome, it
	// counts once. Decline is refused: she has voted. The buttons stay.
	repeated := click("U0ALICE", protocol.SlackActionApprove, "alice-2", voted, now.Add(time.Second))
	require.Contains(t, repeated.Text, ": vote recorded, 1 of 2 approvals", "not a second approval")
	again := click("U0ALICE", protocol.SlackActionDecline, "alice-3", repeated, now.Add(2*time.Second))
	require.Equal(t, `Refused: "alice" has voted on it already: its rule needs votes from distinct people.`, again.Text)
	require.Equal(t, write, again.buttons(t)[protocol.SlackActionApprove])
	require.Equal(t, 1, strings.Count(strings.Join(rawStrings(again.Blocks), ""), slackOutcomeBlock), "one outcome block: the vote's replaced")
	require.Equal(t, []string{write}, requestIDs(st.approvals(t, "?conversationId=slack-quorum")), "the Write still waits")

	// Bob's vote reaches the quorum: approved, the buttons gone, the
	// Write runs.
	approved := click("U0BOB", protocol.SlackActionApprove, "bob", again, now.Add(3*time.Second))
	require.Equal(t, "Approved by bob at "+stamp(now.Add(3*time.Second))+".", approved.Text)
	require.Empty(t, approved.buttons(t))
	srv.slack.work.Wait()

	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	decisions := ofType(events, protocol.EventApprovalDecision)
	require.Len(t, decisions, 1)
	require.Equal(t, "bob", decisions[0].By)
	require.Equal(t, 2, decisions[0].Votes.Approvals())
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write ok", "call_0_2 Bash ok"}, resultStatuses(ofType(events, protocol.EventToolResult)[0].ToolResults))
	var voters []string
	for _, r := range st.audit(t, "conversationId=slack-quorum").Records {
		if r.DecidedBy == workflows.DecidedByVote {
			voters = append(voters, r.Principal)
		}
	}
	require.ElementsMatch(t, []string{"alice", "bob"}, voters, "a ledger row a vote, alice's once")
}

// rawStrings are the blocks as text.
func rawStrings(blocks []json.RawMessage) []string {
	out := make([]string, len(blocks))
	for i, b := range blocks {
		out[i] = string(b)
	}
	return out
}

func TestAnAPIWithoutASlackSigningSecretTakesNoCallback(t *testing.T) {
	srv := serveAPI(t, NewServer(Options{Tokens: testTokens}))
	body := url.Values{"payload": {`{"type":"block_actions"}`}}.Encode()
	status, answer := postSlack(t, srv.URL, signedSlack(slackSecret, time.Now(), body), body)
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, answer, config.EnvSlackSigningSecret)
}

func TestASlackUserDecidesInTheRoleOfTheirPrincipalsTokens(t *testing.T) {
	c := config.Slack{SigningSecret: slackSecret, Users: map[string]string{"U0A": "alice"}}
	g := newSlackGate(c, []config.APIToken{
		{Token: "t1-0123456789abcdef", Principal: "alice", Roles: []string{config.RoleChat}},
		{Token: "t2-0123456789abcdef", Principal: "alice", Roles: []string{config.RoleAdmin}},
		{Token: "t3-0123456789abcdef", Principal: "lead", Roles: []string{config.RoleAdmin, config.RoleApprove}},
	})
	role, err := g.role("alice")
	require.NoError(t, err)
	require.Equal(t, config.RoleAdmin, role, "one of alice's tokens is admin's")
	role, err = g.role("lead")
	require.NoError(t, err)
	require.Equal(t, config.RoleApprove, role, "approve where the principal has it, as a bearer caller")
	_, err = g.role("nobody")
	require.EqualError(t, err, "nobody has no API token here, so no role that may decide (approve or admin)")

	// An API without tokens gives no role and refuses nobody: the rule's
	// deciders still name principals.
	role, err = newSlackGate(c, nil).role("alice")
	require.NoError(t, err)
	require.Empty(t, role)
	require.Nil(t, newSlackGate(config.Slack{}, nil), "off without a signing secret")
}
