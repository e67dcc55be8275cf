package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// NotifyActivity is the name the notice activity is registered under.
const NotifyActivity = "Notify"

// Notice kinds.
const (
	NoticeApprovalRequest = "approval_request"
	NoticeReminder        = "reminder"
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
}

// Notifier POSTs notices as JSON to URL (TOLLGATE_NOTIFY_URL).
type Notifier struct {
	URL    string
	Client *http.Client
}

// Notify sends one notice. Any answer but 2xx is an error, which Temporal's
// retry policy retries.
func (n *Notifier) Notify(ctx context.Context, notice Notice) error {
	body, err := json.Marshal(notice)
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
