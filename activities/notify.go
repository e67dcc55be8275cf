package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// NotifyActivity is the name the notice activity is registered under.
const NotifyActivity = "Notify"

// Notice kinds.
const (
	NoticeApprovalRequest = "approval_request"
	NoticeReminder        = "reminder"
	// NoticeEscalation tells those a rule's escalation step adds
	// (EscalatedTo) that a call waits for them too.
	NoticeEscalation = "escalation"
)

// Notice tells a person's channel (a chat hook, a pager) that a call waits
// for approval, or that it will soon expire.
type Notice struct {
	Kind           string    `json:"kind"`
	RequestID      string    `json:"requestId"`
	Tool           string    `json:"tool"`
	Arguments      string    `json:"arguments"`
	ConversationID string    `json:"conversationId"`
	WorkflowID     string    `json:"workflowId"`
	ExpiresAt      time.Time `json:"expiresAt"`
	// Preview says what the call will do, as the worker read it (omitted
	// when there is none).
	Preview string `json:"preview,omitempty"`
	// Subagent names the subagent that made the call (omitted for a
	// turn's own).
	Subagent string `json:"subagent,omitempty"`
	// ApproveURL and DeclineURL are its signed one-click links (package
	// links), when the worker has a link secret and a public URL.
	ApproveURL string `json:"approveUrl,omitempty"`
	DeclineURL string `json:"declineUrl,omitempty"`
	// EscalatedTo, on an escalation's notice, are the principals and
	// roles that may decide the call from now on.
	EscalatedTo []string `json:"escalatedTo,omitempty"`
}

// Notice formats (TOLLGATE_NOTIFY_FORMAT).
const (
	NoticeFormatJSON  = "json"
	NoticeFormatSlack = "slack"
)

// Notifier POSTs notices to URL (TOLLGATE_NOTIFY_URL): as the Notice's
// JSON, or with Format slack as a Slack-compatible message (text, and
// blocks with the call, its two link buttons and, when Interactive, the
// two buttons that decide in Slack).
type Notifier struct {
	URL    string
	Client *http.Client
	Format string
	// Links, when set, signs each notice's links under PublicURL, the
	// API's address as people reach it.
	Links     *links.Key
	PublicURL string
	// Interactive gives slack-format notices Approve and Decline buttons
	// whose callbacks the API takes (TOLLGATE_SLACK_SIGNING_SECRET).
	Interactive bool
}

// Notify sends one notice. Any answer but 2xx is an error, which Temporal's
// retry policy retries.
func (n *Notifier) Notify(ctx context.Context, notice Notice) error {
	if n.Links != nil {
		l := links.Link{RequestID: notice.RequestID, ArgsDigest: links.ArgsDigest(notice.Arguments), Expires: notice.ExpiresAt}
		l.Decision = "approve"
		notice.ApproveURL = n.Links.URL(n.PublicURL, l)
		l.Decision = "decline"
		notice.DeclineURL = n.Links.URL(n.PublicURL, l)
	}
	var v any = notice
	if n.Format == NoticeFormatSlack {
		v = slackMessage(notice, n.Interactive)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("notice for %s: %w", notice.RequestID, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notice for %s: %w", notice.RequestID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := n.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("notice for %s to %s: %w", notice.RequestID, n.URL, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notice for %s to %s: answered %s", notice.RequestID, n.URL, resp.Status)
	}
	return nil
}

// slackLimit bounds the text of one block: Slack refuses a section past
// 3,000 characters.
const slackLimit = 2800

// slackMessage lays a notice out as a Slack message (an incoming webhook's
// body, which Mattermost and others accept too): a fallback text, a section
// with the call whole (multi-line commands as lines), the preview when
// there is one, and Approve and Decline buttons that open the links (a
// link shows the call and asks once more before it decides; a chat's link
// preview never decides). Interactive, Approve and Decline decide in Slack
// (their callbacks go to the API, which knows who clicked), and the links
// stay as buttons that open their pages.
func slackMessage(n Notice, interactive bool) map[string]any {
	what := "waits for your approval"
	if n.Kind == NoticeReminder {
		what = "still waits for your approval, and is declined at " + n.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if n.Kind == NoticeEscalation {
		what = "waits with no decision, escalated to " + strings.Join(n.EscalatedTo, ", ") + "; it is declined at " + n.ExpiresAt.UTC().Format(time.RFC3339)
	}
	who := ""
	if n.Subagent != "" {
		who = " (subagent " + n.Subagent + ")"
	}
	head := fmt.Sprintf("*%s*%s %s in conversation `%s`", n.Tool, who, what, n.ConversationID)
	blocks := []any{
		map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": head}},
		map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": codeBlock(protocol.ArgumentLines(n.Arguments))}},
	}
	if n.Preview != "" {
		blocks = append(blocks, map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "What it will do:\n" + codeBlock(n.Preview)}})
	}
	var buttons []any
	if interactive {
		buttons = append(buttons,
			map[string]any{"type": "button", "style": "primary", "text": map[string]any{"type": "plain_text", "text": "Approve"}, "action_id": protocol.SlackActionApprove, "value": n.RequestID},
			map[string]any{"type": "button", "style": "danger", "text": map[string]any{"type": "plain_text", "text": "Decline"}, "action_id": protocol.SlackActionDecline, "value": n.RequestID})
	}
	switch {
	case n.ApproveURL == "":
	case interactive:
		buttons = append(buttons,
			map[string]any{"type": "button", "text": map[string]any{"type": "plain_text", "text": "Open"}, "url": n.ApproveURL, "action_id": protocol.SlackActionLinkApprove},
			map[string]any{"type": "button", "text": map[string]any{"type": "plain_text", "text": "Decline with a reason"}, "url": n.DeclineURL, "action_id": protocol.SlackActionLinkDecline})
	default:
		buttons = append(buttons,
			map[string]any{"type": "button", "style": "primary", "text": map[string]any{"type": "plain_text", "text": "Approve"}, "url": n.ApproveURL, "action_id": "approve"},
			map[string]any{"type": "button", "style": "danger", "text": map[string]any{"type": "plain_text", "text": "Decline"}, "url": n.DeclineURL, "action_id": "decline"})
	}
	if len(buttons) > 0 {
		blocks = append(blocks, map[string]any{"type": "actions", "elements": buttons})
	}
	blocks = append(blocks, map[string]any{"type": "context", "elements": []any{
		map[string]any{"type": "mrkdwn", "text": "request `" + n.RequestID + "` · expires " + n.ExpiresAt.UTC().Format(time.RFC3339)},
	}})
	return map[string]any{"text": fmt.Sprintf("%s%s %s: %s", n.Tool, who, what, text.Truncate(n.Arguments, 200)), "blocks": blocks}
}

// codeBlock fences s for mrkdwn, cut to what a block holds (the cut says
// so; the links' page shows the whole call).
func codeBlock(s string) string {
	s = strings.ReplaceAll(s, "```", "` ` `")
	if len(s) > slackLimit {
		s = text.Cut(s, slackLimit) + "\n… (cut here: open a link to see the whole call)"
	}
	return "```\n" + s + "\n```"
}
