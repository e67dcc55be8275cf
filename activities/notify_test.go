package activities

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/protocol"
)

// postedTo runs n.Notify(notice) against a hook that keeps the body.
func postedTo(t *testing.T, n *Notifier, notice Notice) []byte {
	t.Helper()
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
		body, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	n.URL = srv.URL
	require.NoError(t, n.Notify(context.Background(), notice))
	return body
}

var testNotice = Notice{
	Kind: NoticeApprovalRequest, RequestID: "tollgate-conv-c-turn-1/apr-0123", Tool: protocol.ToolBash,
	Arguments:      `{"command":"ls -la\nrm -rf ~/   # harmless cleanup"}`,
	ConversationID: "c", WorkflowID: "tollgate-conv-c-turn-1", ExpiresAt: time.Date(2026, 12, 1, 9, 3, 0, 0, time.UTC),
	Preview: "runs: bash -c (2 lines)", Subagent: "writer",
}

func TestANoticeCarriesLinksThatCheckForItsCall(t *testing.T) {
	key, err := links.NewKey(strings.Repeat("k", links.MinSecretLength))
	require.NoError(t, err)
	var got Notice
	require.NoError(t, json.Unmarshal(postedTo(t, &Notifier{Links: &key, PublicURL: "https://tollgate.example.com"}, testNotice), &got))
	require.Equal(t, testNotice.Preview, got.Preview)
	require.Equal(t, "writer", got.Subagent)
	for decision, u := range map[string]string{"approve": got.ApproveURL, "decline": got.DeclineURL} {
		parsed, err := url.Parse(u)
		require.NoError(t, err)
		require.Equal(t, "tollgate.example.com", parsed.Host)
		l, err := key.Check(parsed.Query(), testNotice.ExpiresAt.Add(-time.Minute))
		require.NoError(t, err)
		require.Equal(t, links.Link{RequestID: testNotice.RequestID, Decision: decision, ArgsDigest: links.ArgsDigest(testNotice.Arguments), Expires: testNotice.ExpiresAt}, l)
	}
	var plain Notice
	require.NoError(t, json.Unmarshal(postedTo(t, &Notifier{}, testNotice), &plain))
	require.Empty(t, plain.ApproveURL+plain.DeclineURL, "no links without a key")
}

func TestASlackNoticeShowsTheCallWholeAsLinesWithTheLinksAsButtons(t *testing.T) {
	key, err := links.NewKey(strings.Repeat("k", links.MinSecretLength))
	require.NoError(t, err)
	var msg struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text struct {
				Text string `json:"text"`
			} `json:"text"`
			Elements []struct {
				Type string          `json:"type"`
				URL  string          `json:"url"`
				Text json.RawMessage `json:"text"`
			} `json:"elements"`
		} `json:"blocks"`
	}
	require.NoError(t, json.Unmarshal(postedTo(t, &Notifier{Format: NoticeFormatSlack, Links: &key, PublicURL: "https://t.example"}, testNotice), &msg))
	require.Contains(t, msg.Text, "Bash (subagent writer) waits for your approval")
	var sections []string
	var buttons map[string]string
	for _, b := range msg.Blocks {
		switch b.Type {
		case "section":
			sections = append(sections, b.Text.Text)
		case "actions":
			buttons = map[string]string{}
			for _, e := range b.Elements {
				var label struct {
					Text string `json:"text"`
				}
				require.NoError(t, json.Unmarshal(e.Text, &label))
				buttons[label.Text] = e.URL
			}
		}
	}
	require.Len(t, sections, 3, "the head, the call, the preview")
	require.Equal(t, "```\ncommand:\n  ls -la\n  rm -rf ~/   # harmless cleanup\n```", sections[1], "a multi-line command stays lines")
	require.Contains(t, sections[2], testNotice.Preview)
	require.True(t, strings.HasPrefix(buttons["Approve"], "https://t.example/decide?"), buttons)
	require.True(t, strings.HasPrefix(buttons["Decline"], "https://t.example/decide?"), buttons)

	// A call too long for a block is cut there, and says so.
	long := testNotice
	long.Arguments = `{"command":"echo ` + strings.Repeat("x", 5000) + `; rm -rf /"}`
	require.NoError(t, json.Unmarshal(postedTo(t, &Notifier{Format: NoticeFormatSlack}, long), &msg))
	require.Contains(t, msg.Blocks[1].Text.Text, "cut here: open a link to see the whole call")
	require.LessOrEqual(t, len(msg.Blocks[1].Text.Text), 3000)
}

func TestAnInteractiveSlackNoticeDecidesInSlackAndKeepsTheLinksToOpen(t *testing.T) {
	key, err := links.NewKey(strings.Repeat("k", links.MinSecretLength))
	require.NoError(t, err)
	type button struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
		URL      string `json:"url"`
		Style    string `json:"style"`
	}
	actions := func(n *Notifier) []button {
		var msg struct {
			Blocks []struct {
				Type     string   `json:"type"`
				Elements []button `json:"elements"`
			} `json:"blocks"`
		}
		require.NoError(t, json.Unmarshal(postedTo(t, n, testNotice), &msg))
		var out []button
		for _, b := range msg.Blocks {
			if b.Type == "actions" {
				out = append(out, b.Elements...)
			}
		}
		return out
	}
	got := actions(&Notifier{Format: NoticeFormatSlack, Links: &key, PublicURL: "https://t.example", Interactive: true})
	require.Len(t, got, 4)
	require.Equal(t, button{ActionID: protocol.SlackActionApprove, Value: testNotice.RequestID, Style: "primary"}, got[0])
	require.Equal(t, button{ActionID: protocol.SlackActionDecline, Value: testNotice.RequestID, Style: "danger"}, got[1])
	require.Equal(t, protocol.SlackActionLinkApprove, got[2].ActionID)
	require.True(t, strings.HasPrefix(got[2].URL, "https://t.example/decide?"), got[2].URL)
	require.Equal(t, protocol.SlackActionLinkDecline, got[3].ActionID)
	require.Contains(t, got[3].URL, "decision=decline")

	// Without links, the two buttons that decide in Slack alone.
	got = actions(&Notifier{Format: NoticeFormatSlack, Interactive: true})
	require.Equal(t, []string{protocol.SlackActionApprove, protocol.SlackActionDecline}, []string{got[0].ActionID, got[1].ActionID})
	require.Len(t, got, 2)
}
