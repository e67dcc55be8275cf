package main

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// PrincipalLink is who a decision made through a signed link is recorded
// as: whoever holds the link, which names no one. A rule whose deciders do
// not list it refuses such decisions.
const PrincipalLink = protocol.PrincipalLink

// linkPolicy is the Content-Security-Policy of the link pages: no script
// at all, the style sheet, and a form that posts back here.
const linkPolicy = "default-src 'none'; style-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// linkReferrerPolicy is the Referrer-Policy of the link pages. A link's
// query is a credential, so no other site may see it in a Referer; the
// policy sends one only to the API's own origin, which has the link
// already (the page loads nothing from elsewhere and posts only here, by
// linkPolicy). It must not be no-referrer: under that policy a browser
// sends the form's POST with "Origin: null" (the Fetch standard's rule
// for a request origin), which refuseCrossSite refuses, so the button
// would never decide. With same-origin the POST carries the page's real
// origin, and the cross-site check holds as for every other route: a
// page elsewhere still posts with its own origin, or null, and is refused.
const linkReferrerPolicy = "same-origin"

// linkPage is the page a link shows: the call it decides and a button that
// decides it (GET never does: a chat's link preview opens links too), or
// what became of the decision, or why the link is refused.
var linkPage = template.Must(template.New("link").Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>tollgate: {{.Title}}</title><link rel="stylesheet" href="/web/style.css"></head>
<body><main class="link-page">
<h1 data-testid="link-title">{{.Title}}</h1>
{{if .Message}}<p data-testid="link-message">{{.Message}}</p>{{end}}
{{with .Call}}
<p><strong>{{.ToolName}}</strong> in conversation <code>{{.ConversationID}}</code>, waiting until {{$.Expires}}.</p>
<pre data-testid="link-arguments">{{$.Arguments}}</pre>
{{if .Preview}}<p>What it will do:</p><pre data-testid="link-preview">{{.Preview}}</pre>{{end}}
<form method="post" action="/decide">
{{range $k, $v := $.Params}}<input type="hidden" name="{{$k}}" value="{{$v}}">{{end}}
{{if eq $.Decision "decline"}}<label>Reason (the model reads it) <input type="text" name="reason" maxlength="500" data-testid="link-reason"></label>{{end}}
<button type="submit" data-testid="link-submit">{{if eq $.Decision "approve"}}Approve{{else}}Decline{{end}} this call</button>
</form>
<p class="where">request <code>{{.RequestID}}</code></p>
{{end}}
</main></body></html>
`))

// linkView is what linkPage shows.
type linkView struct {
	Title, Message string
	Call           *protocol.PendingApproval
	Decision       string
	Arguments      string
	Expires        string
	Params         map[string]string
}

// showLink serves GET /decide: the call a signed link decides, with the
// button that decides it.
func (s *Server) showLink(c *gin.Context) {
	l, call, status, msg := s.checkLink(c.Request.Context(), c.Request.URL.Query())
	if call == nil {
		s.linkPage(c, status, linkView{Title: "This link cannot decide", Message: msg})
		return
	}
	params := map[string]string{}
	for k, v := range c.Request.URL.Query() {
		if len(v) > 0 {
			params[k] = v[0]
		}
	}
	s.linkPage(c, http.StatusOK, linkView{
		Title:     map[string]string{"approve": "Approve ", "decline": "Decline "}[l.Decision] + call.ToolName + "?",
		Call:      call,
		Decision:  l.Decision,
		Arguments: protocol.ArgumentLines(call.Arguments),
		Expires:   call.ExpiresAt.UTC().Format(time.RFC1123),
		Params:    params,
	})
}

// decideByLink serves POST /decide: the form of showLink's page. The link
// is checked again, and the call it names must still be the one waiting.
// Each post is an Update of its own, so a link decides once: a second post
// is told the request was decided.
func (s *Server) decideByLink(c *gin.Context) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxBodyBytes)
	if err := c.Request.ParseForm(); err != nil {
		s.linkPage(c, http.StatusBadRequest, linkView{Title: "This link cannot decide", Message: "the form could not be read: " + err.Error()})
		return
	}
	release, err := s.calls.acquire("decide by link")
	if err != nil {
		status, msg := errorStatus(s.temporal, err)
		s.linkPage(c, status, linkView{Title: "The decision was not sent", Message: msg})
		return
	}
	defer release()
	l, call, status, msg := s.checkLink(c.Request.Context(), c.Request.PostForm)
	if call == nil {
		s.linkPage(c, status, linkView{Title: "This link cannot decide", Message: msg})
		return
	}
	d := protocol.ApprovalDecision{RequestID: l.RequestID, Decision: l.Decision, Principal: PrincipalLink}
	if l.Decision == protocol.DecisionDecline {
		d.Reason = strings.TrimSpace(c.Request.PostForm.Get("reason"))
	}
	res, _, err := s.decide(c.Request.Context(), d, "link-"+uuid.NewString())
	reason := res.Reason
	if err != nil {
		s.metrics.decision(d.Decision, outcomeError)
		status, msg := errorStatus(s.temporal, err)
		s.linkPage(c, status, linkView{Title: "The decision was not sent", Message: msg})
		return
	}
	if reason != "" {
		s.metrics.decision(d.Decision, outcomeRejected)
		s.linkPage(c, http.StatusConflict, linkView{Title: "The decision was not taken", Message: refusalText(reason)})
		return
	}
	s.metrics.decision(d.Decision, outcomeAccepted)
	if res.Pending {
		s.linkPage(c, http.StatusOK, linkView{Title: "Vote recorded: " + call.ToolName, Message: res.Message + "."})
		return
	}
	done := map[string]string{"approve": "Approved", "decline": "Declined"}[l.Decision]
	s.linkPage(c, http.StatusOK, linkView{Title: done + ": " + call.ToolName, Message: "The turn goes on. This link is used up."})
}

// checkLink checks a link's signature and expiry and finds the call it
// names still waiting with the arguments it was signed for. It returns the
// link and the call, or no call with the status and message to answer.
func (s *Server) checkLink(ctx context.Context, q url.Values) (links.Link, *protocol.PendingApproval, int, string) {
	if s.links == nil {
		return links.Link{}, nil, http.StatusNotFound, "this API has no link secret (TOLLGATE_LINK_SECRET), so it takes no link."
	}
	l, err := s.links.Check(q, time.Now())
	switch {
	case errors.Is(err, links.ErrExpired):
		return l, nil, http.StatusGone, err.Error() + ": the call counts as declined by now."
	case errors.Is(err, links.ErrBadSignature):
		return l, nil, http.StatusForbidden, err.Error() + "."
	case err != nil:
		return l, nil, http.StatusBadRequest, err.Error() + "."
	}
	wid, ok := contract.RequestWorkflowID(l.RequestID)
	if !ok {
		return l, nil, http.StatusNotFound, "the link names no request of tollgate's."
	}
	pending, err := s.pendingIn(ctx, wid)
	if err != nil && !isNotFound(err) && !isQueryFailed(err) {
		status, msg := errorStatus(s.temporal, err)
		return l, nil, status, msg
	}
	for i := range pending {
		if p := &pending[i]; p.RequestID == l.RequestID {
			if links.ArgsDigest(p.Arguments) != l.ArgsDigest {
				return l, nil, http.StatusConflict, "the call waiting is not the one this link was made for."
			}
			return l, p, http.StatusOK, ""
		}
	}
	return l, nil, http.StatusConflict, "this call no longer waits for a decision: it was decided (by this link or otherwise), it expired, or its turn ended."
}

// refusalText says why the turn did not take a decision, for a person.
func refusalText(reason string) string {
	switch reason {
	case protocol.RejectDecided:
		return "The request was already decided; this link is used up."
	case protocol.RejectExpired:
		return "The request expired before the decision came; it counts as declined."
	case protocol.RejectForbidden:
		return "The policy says who may decide this tool's calls, needs a second person, or needs votes from several people, and a link names no one: decide it in the console or the inbox."
	default:
		return "The turn no longer knows this request (" + reason + ")."
	}
}

func (s *Server) linkPage(c *gin.Context, status int, v linkView) {
	h := c.Writer.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", linkPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", linkReferrerPolicy)
	h.Set("Content-Type", "text/html; charset=utf-8")
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", retryAfter)
	}
	c.Status(status)
	if err := linkPage.Execute(c.Writer, v); err != nil {
		s.log.Warn("link page", "error", err)
	}
}
