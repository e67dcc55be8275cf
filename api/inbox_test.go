package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// Tokens of the inbox tests: two people who send messages and approve.
const inboxAnnToken, inboxBobToken = "ann-0123456789abcdef", "bob-0123456789abcdef"

var inboxTokens = []config.APIToken{
	{Token: inboxAnnToken, Principal: "ann", Roles: config.DefaultRoles},
	{Token: inboxBobToken, Principal: "bob", Roles: config.DefaultRoles},
}

// inboxPage is GET /approvals' answer from the ledger.
type inboxPage struct {
	Approvals     []protocol.PendingApproval `json:"approvals"`
	Total         int                        `json:"total"`
	NextPageToken string                     `json:"nextPageToken"`
}

// inboxGet asks GET /approvals?query of api as token's holder, with
// If-None-Match when etag is set, and returns the status, the page and its
// ETag. t may be an Eventually's *assert.CollectT.
func inboxGet(t require.TestingT, api *httptest.Server, token, query, etag string) (int, inboxPage, string) {
	req, err := http.NewRequest(http.MethodGet, api.URL+"/approvals?"+query, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var page inboxPage
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	} else if resp.StatusCode != http.StatusNotModified {
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		page.NextPageToken = e.Error // the message, for the caller's check
	}
	return resp.StatusCode, page, resp.Header.Get("ETag")
}

func requestIDs(approvals []protocol.PendingApproval) []string {
	var out []string
	for _, a := range approvals {
		out = append(out, a.RequestID)
	}
	return out
}

// TestTheInboxAnswersFromTheLedger pauses a turn of Ann's and one of Bob's
// at their approvals and reads GET /approvals from the audit ledger, on
// SQLite and on a real PostgreSQL: each filter, paging to the end with
// tokens that only this API makes, the preview and the message, a 304 on
// an unchanged inbox, a decided call and an expired one leaving it; and no
// turn is asked (the API's count of pending queries stays 0).
func TestTheInboxAnswersFromTheLedger(t *testing.T) {
	t.Parallel()
	onEachLedger(t, func(t *testing.T, db string, opts []stackOption) {
		testInboxFromLedger(t, newStack(t, opts...))
	})
}

func testInboxFromLedger(t *testing.T, st *stack) {
	o := st.apiOptions()
	o.Tokens = inboxTokens
	api := serveAPI(t, NewServer(o))

	byTool := map[string]map[string]protocol.Event{} // conversation → tool → request
	streams := map[string]<-chan sseMessage{}
	for conv, token := range map[string]string{"inbox-ann": inboxAnnToken, "inbox-bob": inboxBobToken} {
		_, msgs := chatAs(t, api, token, `{"query":"a message from `+conv+`","conversationId":"`+conv+`"}`)
		seq := 0
		byTool[conv] = requestsByTool(ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2), protocol.EventApprovalRequest))
		streams[conv] = msgs
	}

	list := func(query string) inboxPage {
		t.Helper()
		status, page, _ := inboxGet(t, api, inboxAnnToken, query, "")
		require.Equal(t, http.StatusOK, status, "%s: %s", query, page.NextPageToken)
		return page
	}
	all := list("")
	require.Len(t, all.Approvals, 4)
	require.Equal(t, 4, all.Total)
	require.Empty(t, all.NextPageToken)
	require.True(t, slices.IsSortedFunc(all.Approvals, func(a, b protocol.PendingApproval) int {
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), strings.Compare(a.RequestID, b.RequestID))
	}), "soonest to expire first")
	for _, a := range all.Approvals {
		asked := byTool[a.ConversationID][a.ToolName]
		require.Equal(t, asked.RequestID, a.RequestID)
		require.Equal(t, asked.Arguments, a.Arguments)
		require.Equal(t, asked.Preview, a.Preview, "the preview the request showed")
		require.Equal(t, asked.WorkflowID, a.WorkflowID)
		require.Equal(t, a.WorkflowID, a.TurnID)
		require.Equal(t, "a message from "+a.ConversationID, a.UserMessage)
		require.WithinDuration(t, *asked.ExpiresAt, a.ExpiresAt, time.Millisecond)
	}
	require.NotEmpty(t, byTool["inbox-ann"]["Write"].Preview, "a Write shows its diff")

	conversations := func(p inboxPage) []string {
		var out []string
		for _, a := range p.Approvals {
			out = append(out, a.ConversationID+" "+a.ToolName)
		}
		slices.Sort(out)
		return out
	}
	require.Equal(t, []string{"inbox-ann Bash", "inbox-ann Write"}, conversations(list("principal=ann")))
	require.Equal(t, []string{"inbox-bob Bash", "inbox-bob Write"}, conversations(list("principal=bob")))
	require.Empty(t, list("principal=carol").Approvals)
	require.Equal(t, []string{"inbox-ann Write", "inbox-bob Write"}, conversations(list("tool=Write")))
	require.Equal(t, []string{"inbox-bob Bash", "inbox-bob Write"}, conversations(list("conversationId=inbox-bob")))
	require.Equal(t, []string{"inbox-bob Bash"}, conversations(list("conversationId=inbox-bob&tool=Bash&principal=bob")))

	// A page at a time, to the end.
	var paged []string
	tokens := map[string]string{}
	for token, pages := "", 0; ; pages++ {
		require.Less(t, pages, 4)
		q := "limit=1"
		if token != "" {
			q += "&pageToken=" + url.QueryEscape(token)
		}
		page := list(q)
		require.Len(t, page.Approvals, 1)
		require.Equal(t, 4, page.Total, "every page counts them all")
		paged = append(paged, page.Approvals[0].RequestID)
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
		tokens[page.Approvals[0].RequestID] = token
	}
	require.Equal(t, requestIDs(all.Approvals), paged)
	// Another instance of the same deployment (the same tokens) takes a
	// token this one made.
	status, next, _ := inboxGet(t, serveAPI(t, NewServer(o)), inboxAnnToken, "limit=1&pageToken="+url.QueryEscape(tokens[paged[0]]), "")
	require.Equal(t, http.StatusOK, status, next.NextPageToken)
	require.Equal(t, paged[1:2], requestIDs(next.Approvals))
	writeToken := list("tool=Write&limit=1").NextPageToken
	require.NotEmpty(t, writeToken)

	// Tokens this API did not make, or made for other filters: 400 at
	// once, naming pageToken.
	first := tokens[paged[0]]
	payload, mac, _ := strings.Cut(first, ".")
	forged := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("0|%s", paged[2]))) + "." + mac
	otherAPI := o
	otherAPI.Tokens = []config.APIToken{{Token: "other-0123456789abcdef", Principal: "ann", Roles: config.DefaultRoles}}
	_, otherPage, _ := inboxGet(t, serveAPI(t, NewServer(otherAPI)), "other-0123456789abcdef", "limit=1", "")
	require.NotEmpty(t, otherPage.NextPageToken)
	for name, q := range map[string]string{
		"garbled":                "pageToken=abc",
		"not base64":             "pageToken=!!.!!",
		"another row, same mac":  "pageToken=" + url.QueryEscape(forged),
		"the mac cut":            "pageToken=" + url.QueryEscape(payload+"."+mac[:10]),
		"another filter's":       "tool=Bash&limit=1&pageToken=" + url.QueryEscape(writeToken),
		"unfiltered's, filtered": "principal=ann&pageToken=" + url.QueryEscape(first),
		"another API's key":      "limit=1&pageToken=" + url.QueryEscape(otherPage.NextPageToken),
	} {
		status, page, _ := inboxGet(t, api, inboxAnnToken, q, "")
		require.Equal(t, http.StatusBadRequest, status, name)
		require.Contains(t, page.NextPageToken, "pageToken", name)
		require.Contains(t, page.NextPageToken, "is not one this API made for these filters", name)
	}
	for q, msg := range map[string]string{
		"limit=0":                               `limit "0" is not a whole number from 1 to 1000`,
		"conversationId=a%20b":                  "conversationId",
		"principal=" + strings.Repeat("p", 201): "principal is 201 bytes long: at most 200",
		"tool=Bash%00":                          "tool \"Bash\\x00\" is not text",
		"principal=%ff":                         "principal \"\\xff\" is not text",
	} {
		status, page, _ := inboxGet(t, api, inboxAnnToken, q, "")
		require.Equal(t, http.StatusBadRequest, status, q)
		require.Contains(t, page.NextPageToken, msg, q)
	}

	// An unchanged inbox is a 304 without a body; a changed one is not.
	status, _, etag := inboxGet(t, api, inboxAnnToken, "", "")
	require.Equal(t, http.StatusOK, status)
	require.NotEmpty(t, etag)
	status, _, _ = inboxGet(t, api, inboxAnnToken, "", etag)
	require.Equal(t, http.StatusNotModified, status)

	// A decided call leaves the inbox once its decided row reaches the
	// ledger (at the latest when its tool starts).
	decided := byTool["inbox-ann"]["Write"].RequestID
	resp, body := send(t, http.MethodPost, api.URL+"/chat/approval", "Bearer "+inboxBobToken, `{"requestId":"`+decided+`","decision":"approve"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.JSONEq(t, `{"accepted":true}`, body)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, page, _ := inboxGet(c, api, inboxAnnToken, "", etag)
		require.Equal(c, http.StatusOK, status, "the inbox changed: not a 304")
		require.NotContains(c, requestIDs(page.Approvals), decided)
		require.Len(c, page.Approvals, 3)
	}, waitFor, 50*time.Millisecond)

	// A call whose time ran out leaves it when it expires, whether or not
	// its turn has recorded the timeout yet (a terminated turn never
	// does): a row written straight into the ledger, of no turn.
	soon := time.Now().Add(1500 * time.Millisecond)
	require.NoError(t, st.ledger.Write(context.Background(), []audit.Record{{
		ID: "tollgate-conv-gone-turn-1/apr-expiring", Stage: audit.StageAsked, ConversationID: "gone", TurnID: "tollgate-conv-gone-turn-1",
		WorkflowID: "tollgate-conv-gone-turn-1", ToolCallID: "call_x", Tool: "Bash", Arguments: `{"command":"true"}`,
		Sender: "ann", RequestedAt: time.Now(), ExpiresAt: &soon,
	}}))
	require.Contains(t, requestIDs(list("principal=ann").Approvals), "tollgate-conv-gone-turn-1/apr-expiring")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, page, _ := inboxGet(c, api, inboxAnnToken, "principal=ann", "")
		require.NotContains(c, requestIDs(page.Approvals), "tollgate-conv-gone-turn-1/apr-expiring")
	}, waitFor, 100*time.Millisecond)

	_, metrics := send(t, http.MethodGet, api.URL+"/metrics", "Bearer "+inboxAnnToken, "")
	require.Regexp(t, `(?m)^tollgate_api_pending_queries_total 0$`, metrics, "the inbox asked no turn")

	// Authorization is as before: a token without the approve role may
	// not list.
	chatOnly := o
	chatOnly.Tokens = []config.APIToken{{Token: "chat-0123456789abcdef", Principal: "carol", Roles: []string{config.RoleChat}}}
	status, _, _ = inboxGet(t, serveAPI(t, NewServer(chatOnly)), "chat-0123456789abcdef", "", "")
	require.Equal(t, http.StatusForbidden, status)
}

// TestTheInboxListsThousandsFromTheLedgerWithoutAskingTheTurns writes
// 2,000 waiting rows straight into the ledger next to two real waiting
// turns, and pages through GET /approvals: every row once, in order, the
// filters narrowing to the real turns', and not one query of a turn.
func TestTheInboxListsThousandsFromTheLedgerWithoutAskingTheTurns(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	var real []string
	for i := range 2 {
		_, msgs := st.chat(t, fmt.Sprintf(`{"query":"real %d","conversationId":"real-%d"}`, i, i))
		seq := 0
		for _, e := range ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2), protocol.EventApprovalRequest) {
			real = append(real, e.RequestID)
		}
	}
	const many = 2000
	now := time.Now()
	rows := make([]audit.Record, 0, many)
	for i := range many {
		expires := now.Add(10*time.Minute + time.Duration(i%97)*time.Second)
		wid := fmt.Sprintf("tollgate-conv-bulk-%d-turn-1", i%50)
		rows = append(rows, audit.Record{
			ID: fmt.Sprintf("%s/apr-%04d", wid, i), Stage: audit.StageAsked, ConversationID: fmt.Sprintf("bulk-%d", i%50),
			TurnID: wid, WorkflowID: wid, ToolCallID: fmt.Sprintf("call_%d", i), Tool: []string{"Bash", "Edit"}[i%2],
			Arguments: `{"command":"make"}`, Sender: []string{"ann", "bob", "carol"}[i%3], RequestedAt: now, ExpiresAt: &expires,
			Preview: "$ make", UserMessage: "build it",
		})
	}
	require.NoError(t, st.ledger.Write(context.Background(), rows))

	var seen []protocol.PendingApproval
	for token, pages := "", 0; ; pages++ {
		require.Less(t, pages, 10)
		q := "?limit=500"
		if token != "" {
			q += "&pageToken=" + url.QueryEscape(token)
		}
		resp, err := http.Get(st.api.URL + "/approvals" + q)
		require.NoError(t, err)
		var page inboxPage
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, many+len(real), page.Total)
		seen = append(seen, page.Approvals...)
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
	}
	require.Len(t, seen, many+len(real))
	ids := requestIDs(seen)
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(ids))), many+len(real), "every row once")
	require.ElementsMatch(t, real, ids[:len(real)], "the real turns' calls expire first (a minute, against ten)")
	require.True(t, slices.IsSortedFunc(seen, func(a, b protocol.PendingApproval) int {
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), strings.Compare(a.RequestID, b.RequestID))
	}))

	require.Len(t, st.approvals(t, "?tool=Edit"), many/2)
	require.Len(t, st.approvals(t, "?principal=carol"), 666)
	require.ElementsMatch(t, real[:2], requestIDs(st.approvals(t, "?conversationId=real-0")))
	require.Zero(t, metric(t, st.api, "tollgate_api_pending_queries_total"), "the inbox asked no turn")
}

// TestAnInboxWhoseWorkerWritesNoLedgerAsksTheTurns runs a worker that
// writes no ledger next to an API that reads one: the ledger lists
// nothing, visibility knows a waiting turn, and GET /approvals answers
// from the turns instead of an empty inbox (and warns in the API's log).
func TestAnInboxWhoseWorkerWritesNoLedgerAsksTheTurns(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) { s.Audit = false }))
	_, msgs := st.chat(t, `{"query":"hello","conversationId":"unledgered"}`)
	seq := 0
	asked := requestIDs(nil)
	for _, e := range ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2), protocol.EventApprovalRequest) {
		asked = append(asked, e.RequestID)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.ElementsMatch(c, asked, requestIDs(approvalsAt(c, st.api.URL, "")))
	}, waitFor, 50*time.Millisecond)
	require.Positive(t, metric(t, st.api, "tollgate_api_pending_queries_total"), "it asked the turn")
}

func TestPageTokensAreKeyedByTheSecretsEveryInstanceShares(t *testing.T) {
	secret, err := links.NewKey(strings.Repeat("s", links.MinSecretLength))
	require.NoError(t, err)
	other, err := links.NewKey(strings.Repeat("o", links.MinSecretLength))
	require.NoError(t, err)
	tokens := []config.APIToken{{Token: "a-0123456789abcdef"}, {Token: "b-0123456789abcdef"}}
	reversed := []config.APIToken{tokens[1], tokens[0]}

	require.Equal(t, pageKey(&secret, tokens), pageKey(&secret, reversed), "the same secrets, in any order: the same key")
	require.Equal(t, pageKey(nil, tokens), pageKey(nil, reversed))
	require.NotEqual(t, pageKey(&secret, tokens), pageKey(&other, tokens), "another link secret")
	require.NotEqual(t, pageKey(nil, tokens), pageKey(nil, tokens[:1]), "a token fewer")
	require.NotEqual(t, pageKey(&secret, nil), pageKey(nil, nil))
	require.NotEqual(t, pageKey(nil, nil), pageKey(nil, nil), "no secret at all: a key of its own for each process")
	require.NotEqual(t, secret.Derive(pageTokenPurpose), pageKey(&secret, nil), "not the derived key itself")
}
