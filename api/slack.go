package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/slack-go/slack"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/protocol"
)

// slackWindow is how far from now a callback's timestamp may be: Slack's
// five minutes, which slack.NewSecretsVerifier checks. A callback handled
// once is remembered for this long (twice: before now and after), so a
// replay within it decides nothing.
const slackWindow = 5 * time.Minute

// slackPostTimeout bounds the post of an outcome to a callback's
// response_url.
const slackPostTimeout = 10 * time.Second

// slackOutcomeBlock starts the block_id of the block that says what
// became of a click, so that the next one replaces it rather than add
// another. Each gets an id of its own (the click's action_ts after it), as
// Slack asks of a block in a message that is updated.
const slackOutcomeBlock = "tollgate_outcome"

// errBadSlackSignature is the cause of a 401 to a callback that Slack did
// not sign, or signed too long ago.
var errBadSlackSignature = errors.New("not a callback Slack signed")

// slackGate takes Slack's interaction callbacks: it checks their signature
// (the Slack app's Signing Secret), maps the user who clicked to a
// principal, and remembers the callbacks it handled while a replay of
// them would still pass the signature check.
type slackGate struct {
	secret string
	// users maps a Slack user id to its principal; roles a principal to
	// the roles of its API tokens (nil when the API has none), and teams
	// to their team roles, sorted.
	users map[string]string
	roles map[string][]string
	teams map[string][]string
	// responseURL is what a response_url must start with.
	responseURL string
	client      *http.Client

	mu   sync.Mutex
	seen map[string]time.Time // signature: when it may be forgotten
	// work is the decisions and posts under way after their callbacks
	// were answered.
	work sync.WaitGroup
}

// newSlackGate returns the gate of c, or nil when approval from Slack is
// off. tokens give each principal its roles and team roles (all of its
// tokens', as a click names no token).
func newSlackGate(c config.Slack, tokens []config.APIToken) *slackGate {
	if c.SigningSecret == "" {
		return nil
	}
	g := &slackGate{
		secret: c.SigningSecret, users: c.Users, responseURL: c.ResponseURL,
		client: &http.Client{Timeout: slackPostTimeout},
		seen:   map[string]time.Time{},
	}
	if g.responseURL == "" {
		g.responseURL = config.DefaultSlackResponseURL
	}
	if len(tokens) > 0 {
		g.roles, g.teams = map[string][]string{}, map[string][]string{}
		for _, tok := range tokens {
			g.roles[tok.Principal] = append(g.roles[tok.Principal], tok.Roles...)
			if len(tok.Teams) > 0 {
				g.teams[tok.Principal] = slices.Compact(slices.Sorted(slices.Values(append(g.teams[tok.Principal], tok.Teams...))))
			}
		}
	}
	return g
}

// verify checks a callback's signature as Slack documents it (v0, an
// HMAC-SHA256 of "v0:timestamp:body" under the signing secret, compared in
// constant time, the timestamp within slackWindow of now) with slack-go's
// verifier, and says whether it is the first time this one came.
func (g *slackGate) verify(header http.Header, body []byte) (first bool, err error) {
	sv, err := slack.NewSecretsVerifier(header, g.secret)
	if err == nil {
		_, _ = sv.Write(body) // a hash's Write never fails
		err = sv.Ensure()
	}
	if err != nil {
		return false, fmt.Errorf("%w: %w", errBadSlackSignature, err)
	}
	now := time.Now()
	sig := header.Get("X-Slack-Signature")
	g.mu.Lock()
	defer g.mu.Unlock()
	for s, until := range g.seen {
		if now.After(until) {
			delete(g.seen, s)
		}
	}
	if _, ok := g.seen[sig]; ok {
		return false, nil
	}
	g.seen[sig] = now.Add(2 * slackWindow)
	return true, nil
}

// role is the role principal decides in, from its API tokens as a bearer
// token's caller would (approve, or admin), or why it may not decide. An
// API without tokens gives nobody a role and refuses nobody here; the
// rule's deciders still apply.
func (g *slackGate) role(principal string) (string, error) {
	if g.roles == nil {
		return "", nil
	}
	roles, ok := g.roles[principal]
	switch {
	case !ok:
		return "", fmt.Errorf("%s has no API token here, so no role that may decide (%s or %s)", principal, config.RoleApprove, config.RoleAdmin)
	case slices.Contains(roles, config.RoleApprove):
		return config.RoleApprove, nil
	case slices.Contains(roles, config.RoleAdmin):
		return config.RoleAdmin, nil
	default:
		return "", fmt.Errorf("%s's API tokens carry neither the %s nor the %s role", principal, config.RoleApprove, config.RoleAdmin)
	}
}

// slackInteraction serves POST /slack/interactions, the Slack app's
// Request URL. It takes no bearer token (Slack sends none): only a
// callback Slack signed is read. It answers Slack at once (Slack waits 3
// seconds) and then, in the background within updateTimeout and
// slackPostTimeout, decides as the mapped principal through decideAs, as
// POST /chat/approval does, and posts the outcome to the callback's
// response_url, which replaces the message.
func (s *Server) slackInteraction(c *gin.Context) {
	if s.slack == nil {
		c.JSON(http.StatusNotFound, gin.H{"error": "approval from Slack is off: set " + config.EnvSlackSigningSecret + " and " + config.EnvSlackUsers})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxBodyBytes))
	if err != nil {
		writeError(c, s.log, describeJSONError(err))
		return
	}
	first, err := s.slack.verify(c.Request.Header, body)
	if err != nil {
		s.log.Info("slack callback refused", "remote", c.ClientIP(), "error", err)
		writeError(c, s.log, err)
		return
	}
	if !first {
		// A replay: the first one decided, or was refused, and said so.
		s.log.Info("slack callback replayed: nothing done", "remote", c.ClientIP())
		c.Status(http.StatusOK)
		return
	}
	ic, err := parseSlackCallback(body)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	click, ok := tollgateClick(ic)
	if !ok {
		// Another kind of interaction, or a button that only opens a
		// link: nothing to decide.
		c.Status(http.StatusOK)
		return
	}
	if !strings.HasPrefix(ic.ResponseURL, s.slack.responseURL) {
		// Slack signed it, yet it would have the outcome posted
		// elsewhere: a leaked secret, or a setting that does not fit
		// this Slack. Nothing is decided where nobody would be told.
		// (The URL is a credential for the channel: not logged.)
		s.log.Warn("slack callback refused: its response_url does not start with "+config.EnvSlackResponseURL, "want", s.slack.responseURL, "slackUser", ic.User.ID)
		writeError(c, s.log, badRequest("the callback's response_url does not start with %s (%s): nothing was decided", config.EnvSlackResponseURL, s.slack.responseURL))
		return
	}
	c.Status(http.StatusOK)
	s.slack.work.Go(func() {
		ctx, cancel := context.WithTimeout(s.ctx, updateTimeout+slackPostTimeout)
		defer cancel()
		s.answerSlack(ctx, ic, click, s.decideInSlack(ctx, ic.User.ID, click))
	})
}

// parseSlackCallback reads a callback's body as Slack sends it: a form
// whose payload field holds the interaction as JSON.
func parseSlackCallback(body []byte) (slack.InteractionCallback, error) {
	var ic slack.InteractionCallback
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return ic, badRequest("the callback is not a form (payload=...): %v", err)
	}
	payload := form.Get("payload")
	if payload == "" {
		return ic, badRequest("the callback has no payload field")
	}
	if err := json.Unmarshal([]byte(payload), &ic); err != nil {
		return ic, badRequest("the callback's payload is not an interaction: %v", err)
	}
	return ic, nil
}

// tollgateClick is the decision a callback's button asks for: the first
// of its actions that is a tollgate_approve or tollgate_decline button,
// whose value is the request id.
func tollgateClick(ic slack.InteractionCallback) (*slack.BlockAction, bool) {
	if ic.Type != slack.InteractionTypeBlockActions {
		return nil, false
	}
	for _, a := range ic.ActionCallback.BlockActions {
		if (a.ActionID == protocol.SlackActionApprove || a.ActionID == protocol.SlackActionDecline) && a.Value != "" {
			return a, true
		}
	}
	return nil, false
}

// slackOutcome is what became of a click: the text that replaces the
// buttons' message, and whether the buttons stay (the request may still
// be decided, by someone else or after a retry).
type slackOutcome struct {
	text        string
	keepButtons bool
}

// decideInSlack decides the click of Slack user user, as the principal
// TOLLGATE_SLACK_USERS maps them to, and says what became of it.
func (s *Server) decideInSlack(ctx context.Context, user string, click *slack.BlockAction) slackOutcome {
	principal, ok := s.slack.users[user]
	if !ok {
		s.log.Warn("slack click by an unmapped user", "slackUser", user, "requestId", click.Value)
		return slackOutcome{text: fmt.Sprintf("Refused: Slack user <@%s> (%s) is not in %s, so tollgate does not know who they are.", user, user, config.EnvSlackUsers), keepButtons: true}
	}
	role, err := s.slack.role(principal)
	if err != nil {
		return slackOutcome{text: "Refused: " + err.Error() + ".", keepButtons: true}
	}
	d := s.decidedAs(protocol.ApprovalDecision{RequestID: click.Value, Decision: protocol.DecisionApprove}, principal, role, s.slack.teams[principal])
	if click.ActionID == protocol.SlackActionDecline {
		d.Decision = protocol.DecisionDecline
	}
	release, err := s.calls.acquire("decide from Slack")
	if err != nil {
		return slackOutcome{text: "Not decided: tollgate is busy; click again.", keepButtons: true}
	}
	defer release()
	res, why, err := s.decideAs(ctx, d)
	if err != nil {
		_, msg := errorStatus(s.temporal, err)
		s.log.Warn("slack decision not sent", "requestId", d.RequestID, "by", principal, "error", err)
		return slackOutcome{text: "Not decided: " + msg, keepButtons: true}
	}
	switch reason := res.Reason; {
	case reason == "" && res.Pending:
		// A vote on a rule with a quorum: others may still vote.
		return slackOutcome{text: fmt.Sprintf("%s voted to %s at %s: %s.", principal, d.Decision, clickTime(click).UTC().Format(time.RFC3339), res.Message), keepButtons: true}
	case reason == "":
		done := map[string]string{protocol.DecisionApprove: "Approved", protocol.DecisionDecline: "Declined"}[d.Decision]
		return slackOutcome{text: fmt.Sprintf("%s by %s at %s.", done, principal, clickTime(click).UTC().Format(time.RFC3339))}
	case reason == protocol.RejectForbidden, reason == protocol.RejectVoted:
		why = strings.TrimPrefix(why, fmt.Sprintf("approval request %q: ", d.RequestID))
		return slackOutcome{text: "Refused: " + why + ".", keepButtons: true}
	case reason == protocol.RejectDecided:
		return slackOutcome{text: "Refused: the request was already decided."}
	case reason == protocol.RejectExpired:
		return slackOutcome{text: "Refused: the request expired; it counts as declined."}
	default:
		return slackOutcome{text: "Refused: the turn no longer waits for this request (" + reason + ")."}
	}
}

// clickTime is when the button was clicked, by Slack's action_ts (seconds,
// with a fraction), so a replay's message says the same; now if it has
// none.
func clickTime(a *slack.BlockAction) time.Time {
	secs, err := strconv.ParseFloat(a.ActionTs, 64)
	if err != nil || secs <= 0 {
		return time.Now()
	}
	return time.Unix(int64(secs), 0)
}

// answerSlack posts the outcome to the callback's response_url (which
// slackInteraction checked), replacing the message: its blocks as they
// were, without the previous outcome (and the buttons, unless they stay),
// then the outcome.
func (s *Server) answerSlack(ctx context.Context, ic slack.InteractionCallback, click *slack.BlockAction, out slackOutcome) {
	var blocks []slack.Block
	for _, b := range ic.Message.Blocks.BlockSet {
		if strings.HasPrefix(b.ID(), slackOutcomeBlock) || (b.BlockType() == slack.MBTAction && !out.keepButtons) {
			continue
		}
		blocks = append(blocks, b)
	}
	id := slackOutcomeBlock + "_" + strings.ReplaceAll(click.ActionTs, ".", "_")
	blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, out.text, false, false), nil, nil, slack.SectionBlockOptionBlockID(id)))
	msg := &slack.WebhookMessage{Text: out.text, Blocks: &slack.Blocks{BlockSet: blocks}, ReplaceOriginal: true}
	ctx, cancel := context.WithTimeout(ctx, slackPostTimeout)
	defer cancel()
	if err := slack.PostWebhookCustomHTTPContext(ctx, ic.ResponseURL, s.slack.client, msg); err != nil {
		s.log.Warn("slack outcome not posted", "outcome", out.text, "error", err)
		return
	}
	s.log.Info("slack outcome", "slackUser", ic.User.ID, "outcome", out.text)
}
