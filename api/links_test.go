package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// noticeSink is a chat hook: it keeps every notice posted to it.
type noticeSink struct {
	mu      sync.Mutex
	notices []activities.Notice
	srv     *httptest.Server
}

func newNoticeSink(t *testing.T) *noticeSink {
	s := &noticeSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n activities.Notice
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.notices = append(s.notices, n)
		s.mu.Unlock()
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// of waits for the notice of kind about tool.
func (s *noticeSink) of(t *testing.T, kind, tool string) activities.Notice {
	t.Helper()
	var out activities.Notice
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, n := range s.notices {
			if n.Kind == kind && n.Tool == tool {
				out = n
				return
			}
		}
		require.Fail(c, "no notice yet", "%s of %s", kind, tool)
	}, waitFor, 20*time.Millisecond)
	return out
}

// linkStack is a stack whose worker sends notices with signed links to a
// sink and whose API takes them.
func linkStack(t *testing.T, opts ...stackOption) (*stack, *noticeSink, *links.Key) {
	t.Helper()
	key, err := links.NewKey("a link secret of the links test, long enough")
	require.NoError(t, err)
	sink := newNoticeSink(t)
	notifier := &activities.Notifier{URL: sink.srv.URL, Links: &key}
	st := newStack(t, append(opts,
		withSettings(func(s *workflows.Settings) { s.Notify = true }),
		withActivity(activities.NotifyActivity, notifier.Notify),
		withLinks(&key))...)
	// The links lead to this API; notices are sent once a turn asks.
	notifier.PublicURL = st.api.URL
	return st, sink, &key
}

// getPage GETs u and returns the status and the page.
func getPage(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	body := readAll(t, resp)
	if resp.StatusCode == http.StatusOK {
		require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "form-action 'self'")
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		require.Equal(t, "same-origin", resp.Header.Get("Referrer-Policy"), "a Referer only to the API, and the form's real Origin")
	}
	return resp.StatusCode, body
}

// postLink posts the link page's form for link u, with extra fields.
func postLink(t *testing.T, apiURL, u string, extra url.Values) (int, string) {
	t.Helper()
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	form := parsed.Query()
	for k, v := range extra {
		form[k] = v
	}
	req, err := http.NewRequest(http.MethodPost, apiURL+links.Path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", apiURL) // as the browser sends it from the page
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp.StatusCode, readAll(t, resp)
}

func TestSignedLinksInANoticeDecideOnceAndOnlyAsSigned(t *testing.T) {
	st, sink, key := linkStack(t)
	_, msgs := st.chat(t, `{"query":"one","conversationId":"links-1"}`)
	seq := 0
	asked := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2))

	bash := sink.of(t, activities.NoticeApprovalRequest, "Bash")
	require.Equal(t, asked["Bash"].RequestID, bash.RequestID)
	require.True(t, strings.HasPrefix(bash.ApproveURL, st.api.URL+links.Path+"?"), bash.ApproveURL)
	require.NotEqual(t, bash.ApproveURL, bash.DeclineURL)

	// Opening a link decides nothing: it shows the call and asks.
	status, page := getPage(t, bash.ApproveURL)
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "Approve Bash?")
	require.Contains(t, page, `command: &#34;ls -la&#34;`)
	require.Contains(t, page, `data-testid="link-submit"`)
	require.Empty(t, st.audit(t, "decision=approve").Records, "nothing decided by a GET")

	// A link changed in any part is refused; so is one that has expired.
	tampered, err := url.Parse(bash.ApproveURL)
	require.NoError(t, err)
	q := tampered.Query()
	q.Set(links.ParamDecision, "decline")
	tampered.RawQuery = q.Encode()
	status, page = getPage(t, tampered.String())
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, page, "signature does not match")
	status, _ = postLink(t, st.api.URL, tampered.String(), nil)
	require.Equal(t, http.StatusForbidden, status)
	expired := key.URL(st.api.URL, links.Link{RequestID: bash.RequestID, Decision: "approve", ArgsDigest: links.ArgsDigest(bash.Arguments), Expires: time.Now().Add(-time.Second)})
	status, page = getPage(t, expired)
	require.Equal(t, http.StatusGone, status)
	require.Contains(t, page, "expired")
	// A page elsewhere may not post the form.
	req, err := http.NewRequest(http.MethodPost, st.api.URL+links.Path, strings.NewReader(url.Values{}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	readAll(t, resp)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	// The form decides, once.
	status, page = postLink(t, st.api.URL, bash.ApproveURL, nil)
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "Approved: Bash")
	status, page = postLink(t, st.api.URL, bash.ApproveURL, nil)
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, page, "no longer waits for a decision")
	status, _ = getPage(t, bash.DeclineURL)
	require.Equal(t, http.StatusConflict, status, "the other link of a decided call")

	// The Write's decline link, with a reason.
	write := sink.of(t, activities.NoticeApprovalRequest, "Write")
	status, page = getPage(t, write.DeclineURL)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `data-testid="link-reason"`)
	status, page = postLink(t, st.api.URL, write.DeclineURL, url.Values{"reason": {"not by link"}})
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "Declined: Write")

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	byTool := map[string]protocol.Event{}
	for _, e := range rest {
		if e.Type == protocol.EventApprovalDecision {
			byTool[e.RequestID] = e
		}
	}
	require.Equal(t, PrincipalLink, byTool[bash.RequestID].By)
	require.Equal(t, protocol.DecisionApprove, byTool[bash.RequestID].Decision)
	require.Equal(t, protocol.DecisionDecline, byTool[write.RequestID].Decision)
	require.Equal(t, "not by link", byTool[write.RequestID].Reason)
	rows := st.audit(t, "principal=link").Records
	require.Len(t, rows, 2, "the ledger records the link as who decided")
}

// Nor one whose rule needs a second person: a link cannot show its holder
// did not send the message.
func TestALinkCannotDecideACallWhoseRuleNamesItsDeciders(t *testing.T) {
	st, sink, _ := linkStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: "Bash", Require: workflows.RequireAlways, Deciders: []string{"alice"}},
			{Tool: "Write", Require: workflows.RequireAlways, SecondPerson: true},
		}
	}))
	_, msgs := st.chat(t, `{"query":"one","conversationId":"links-deciders"}`)
	seq := 0
	untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2)
	bash := sink.of(t, activities.NoticeApprovalRequest, "Bash")
	status, page := postLink(t, st.api.URL, bash.ApproveURL, nil)
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, page, "a link names no one")
	write := sink.of(t, activities.NoticeApprovalRequest, "Write")
	status, page = postLink(t, st.api.URL, write.ApproveURL, nil)
	require.Equal(t, http.StatusConflict, status, page)
	require.Contains(t, page, "needs a second person, or needs votes")
}

func TestAnAPIWithoutALinkSecretTakesNoLink(t *testing.T) {
	srv := serveAPI(t, NewServer(Options{}))
	status, page := getPage(t, srv.URL+links.Path+"?request=x")
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, page, "TOLLGATE_LINK_SECRET")
}

// crossSitePage serves, from another origin than the API's (localhost, not
// 127.0.0.1), a page that posts a link's form to the API as soon as it
// loads: what a site that got hold of a link could make a visitor's
// browser do. With noReferrer the page asks its browser to send no
// Referer, and so "Origin: null".
func crossSitePage(t *testing.T, apiURL, link string, noReferrer bool) string {
	t.Helper()
	parsed, err := url.Parse(link)
	require.NoError(t, err)
	var page strings.Builder
	page.WriteString(`<!doctype html><html><head>`)
	if noReferrer {
		page.WriteString(`<meta name="referrer" content="no-referrer">`)
	}
	fmt.Fprintf(&page, `</head><body onload="document.forms[0].submit()"><form method="post" action="%s">`, html.EscapeString(apiURL+links.Path))
	for k, v := range parsed.Query() {
		fmt.Fprintf(&page, `<input type="hidden" name="%s" value="%s">`, html.EscapeString(k), html.EscapeString(v[0]))
	}
	page.WriteString(`</form></body></html>`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, page.String())
	}))
	t.Cleanup(srv.Close)
	elsewhere := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	require.NotEqual(t, srv.URL, elsewhere)
	return elsewhere
}

// waitAcrossNavigation waits until a JavaScript expression is truthy in
// the page, which may be navigating meanwhile (a form being posted): an
// evaluation that a navigation interrupts is tried again.
func (b *browser) waitAcrossNavigation(expr string) {
	b.t.Helper()
	deadline := time.Now().Add(browserWait)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!(`+expr+`)`))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("page: waited %s for %s (last error: %v)\n%s", browserWait, expr, err, b.pageText())
		}
		time.Sleep(20 * time.Millisecond) // the polling interval
	}
}

// linkPageTitle waits for a link page whose title is want and returns
// what it says.
func linkPageTitle(b *browser, want string) string {
	b.t.Helper()
	b.waitAcrossNavigation(fmt.Sprintf(`document.querySelector('[data-testid="link-title"]')?.textContent === %s`, jsQuote(want)))
	return b.pageText()
}

func TestALinkOpenedInABrowserDecidesByItsButtonAndAPageElsewhereCannotPostIt(t *testing.T) {
	st, sink, _ := linkStack(t)
	_, msgs := st.chat(t, `{"query":"one","conversationId":"links-browser"}`)
	seq := 0
	untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2)
	bash := sink.of(t, activities.NoticeApprovalRequest, "Bash")
	write := sink.of(t, activities.NoticeApprovalRequest, "Write")
	b := newBrowser(t)

	// A page of another site that posts the Bash's approve link, with its
	// origin or with none (null), is refused: the call still waits.
	for _, noReferrer := range []bool{false, true} {
		b.do(chromedp.Navigate(crossSitePage(t, st.api.URL, bash.ApproveURL, noReferrer)))
		b.waitAcrossNavigation(fmt.Sprintf(`location.href.startsWith(%s) && document.body.innerText.includes("may not change anything here")`, jsQuote(st.api.URL+links.Path)))
		require.Contains(t, b.pageText(), map[bool]string{false: `origin \"http://localhost:`, true: `origin \"null\"`}[noReferrer])
	}
	require.Empty(t, st.audit(t, "decision=approve").Records, "no page elsewhere decided")

	// The person opens the approve link and clicks its button.
	b.do(chromedp.Navigate(bash.ApproveURL))
	linkPageTitle(b, "Approve Bash?")
	b.do(chromedp.Click(chromedp.CSS(`[data-testid="link-submit"]`)))
	require.Contains(t, linkPageTitle(b, "Approved: Bash"), "The turn goes on.")

	// And the Write's decline link, with a reason.
	b.do(chromedp.Navigate(write.DeclineURL))
	linkPageTitle(b, "Decline Write?")
	b.do(
		chromedp.SendKeys(chromedp.CSS(`[data-testid="link-reason"]`), "not from my phone"),
		chromedp.Click(chromedp.CSS(`[data-testid="link-submit"]`)),
	)
	linkPageTitle(b, "Declined: Write")

	decisions := map[string]protocol.Event{}
	for _, e := range untilEvent(t, msgs, &seq, protocol.EventFinish, 1) {
		if e.Type == protocol.EventApprovalDecision {
			decisions[e.RequestID] = e
		}
	}
	require.Equal(t, protocol.DecisionApprove, decisions[bash.RequestID].Decision)
	require.Equal(t, PrincipalLink, decisions[bash.RequestID].By)
	require.Equal(t, protocol.DecisionDecline, decisions[write.RequestID].Decision)
	require.Equal(t, "not from my phone", decisions[write.RequestID].Reason)
	require.Equal(t, PrincipalLink, decisions[write.RequestID].By)
}
