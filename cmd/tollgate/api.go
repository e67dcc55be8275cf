package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/protocol"
)

// decisionTimeout bounds POST /chat/approval; the API itself gives up on
// the turn after 30 s.
const decisionTimeout = 45 * time.Second

// apiClient speaks tollgate's HTTP API.
type apiClient struct {
	base string
	http *http.Client
	// token, when set, is sent as the bearer token of every request.
	token string
}

func newAPIClient(base string) *apiClient {
	// No overall timeout: a stream lasts as long as its turn.
	return &apiClient{base: strings.TrimRight(base, "/"), http: &http.Client{}}
}

// startChat sends a message and returns the open event stream of the turn
// that runs it.
func (c *apiClient) startChat(ctx context.Context, req protocol.ChatRequest) (*http.Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/chat/stream", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "text/event-stream")
	return c.stream(r)
}

// resume opens the turn's event stream after event number after.
func (c *apiClient) resume(ctx context.Context, turnID string, after int) (*http.Response, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/chat/turns/"+url.PathEscape(turnID)+"/events", nil)
	if err != nil {
		return nil, err
	}
	r.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		r.Header.Set(protocol.HeaderLastEventID, strconv.Itoa(after))
	}
	return c.stream(r)
}

func (c *apiClient) stream(r *http.Request) (*http.Response, error) {
	resp, err := c.do(r)
	if err != nil {
		return nil, err // names the method and URL
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, apiError(r, resp)
	}
	return resp, nil
}

// decide sends a decision and returns the API's answer: whether the
// waiting turn took it, and if not, why.
func (c *apiClient) decide(ctx context.Context, d protocol.ApprovalDecision) (protocol.ApprovalResult, error) {
	ctx, cancel := context.WithTimeout(ctx, decisionTimeout)
	defer cancel()
	var res protocol.ApprovalResult
	if err := c.postJSON(ctx, "/chat/approval", d, &res); err != nil {
		return protocol.ApprovalResult{}, err
	}
	return res, nil
}

// pending lists the approvals waiting across all conversations, optionally
// only those of one conversation or one tool.
func (c *apiClient) pending(ctx context.Context, conversationID, tool string) ([]protocol.PendingApproval, error) {
	q := url.Values{}
	if conversationID != "" {
		q.Set("conversationId", conversationID)
	}
	if tool != "" {
		q.Set("tool", tool)
	}
	u := c.base + "/approvals"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	var res struct {
		Approvals []protocol.PendingApproval `json:"approvals"`
	}
	if err := c.doJSON(r, &res); err != nil {
		return nil, err
	}
	return res.Approvals, nil
}

// compact asks the API to compact the conversation now.
func (c *apiClient) compact(ctx context.Context, conversationID string, req protocol.CompactRequest) (protocol.CompactResult, error) {
	var res protocol.CompactResult
	if err := c.postJSON(ctx, "/conversations/"+url.PathEscape(conversationID)+"/compact", req, &res); err != nil {
		return protocol.CompactResult{}, err
	}
	return res, nil
}

// postJSON POSTs body as JSON to path and decodes the answer into dst.
func (c *apiClient) postJSON(ctx context.Context, path string, body, dst any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	return c.doJSON(r, dst)
}

// do sends r with the client's token, if any.
func (c *apiClient) do(r *http.Request) (*http.Response, error) {
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
	return c.http.Do(r)
}

func (c *apiClient) doJSON(r *http.Request, dst any) error {
	resp, err := c.do(r)
	if err != nil {
		return err // names the method and URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return apiError(r, resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(dst); err != nil {
		return fmt.Errorf("%s %s: answer is not the JSON expected: %w", r.Method, r.URL.Path, err)
	}
	return nil
}

// apiError describes an answer other than 200, with the API's own message
// when it sent one.
func apiError(r *http.Request, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var e struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if resp.StatusCode == http.StatusUnauthorized {
		msg += " (give the token with --token or $" + EnvToken + ")"
	}
	return fmt.Errorf("%s %s: %s: %s", r.Method, r.URL.Path, resp.Status, msg)
}
