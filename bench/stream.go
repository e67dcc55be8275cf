package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tollgate/tollgate/protocol"
)

// stamped is an event and when the client got it.
type stamped struct {
	protocol.Event
	at time.Time
}

// apiClient speaks to one API over HTTP, as a client does.
type apiClient struct {
	base string
	http *http.Client
	// token, when set, is the bearer token every request carries.
	token string
}

// send sends req with the client's token.
func (a apiClient) send(req *http.Request) (*http.Response, error) {
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	return a.http.Do(req)
}

// chat posts a message and returns the response, whose body is the turn's
// stream, and the turn's workflow id.
func (a apiClient) chat(ctx context.Context, query, conv string) (*http.Response, string, error) {
	body, _ := json.Marshal(protocol.ChatRequest{Query: query, ConversationID: conv})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/chat/stream", bytes.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.send(req)
	if err != nil {
		return nil, "", fmt.Errorf("POST /chat/stream of %s: %w", conv, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, "", fmt.Errorf("POST /chat/stream of %s: %s: %s", conv, resp.Status, b)
	}
	return resp, resp.Header.Get(protocol.HeaderTurnID), nil
}

// approve posts an approval of requestID and requires it to be accepted.
func (a apiClient) approve(ctx context.Context, requestID string) error {
	_, err := a.approveOnce(ctx, requestID, false)
	return err
}

// approveAll approves requestIDs, requests of one turn, with one POST
// /chat/approvals.
func (a apiClient) approveAll(ctx context.Context, requestIDs []string) error {
	var batch protocol.ApprovalBatch
	for _, id := range requestIDs {
		batch.Decisions = append(batch.Decisions, protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove})
	}
	body, _ := json.Marshal(batch)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/chat/approvals", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.send(req)
	if err != nil {
		return fmt.Errorf("POST /chat/approvals of %d requests: %w", len(requestIDs), err)
	}
	defer resp.Body.Close()
	var out struct {
		Accepted bool   `json:"accepted"`
		Reason   string `json:"reason"`
		Message  string `json:"message"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || !out.Accepted {
		return fmt.Errorf("POST /chat/approvals of %d requests: %d %+v %v", len(requestIDs), resp.StatusCode, out, err)
	}
	return nil
}

// approveOnce sends one approval of requestID and returns the answer's
// status. again says the decision was sent before: the turn then may
// answer that it is decided, as it is.
func (a apiClient) approveOnce(ctx context.Context, requestID string, again bool) (int, error) {
	body, _ := json.Marshal(protocol.DecisionRequest{RequestID: requestID, Decision: protocol.DecisionApprove})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/chat/approval", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.send(req)
	if err != nil {
		return 0, fmt.Errorf("POST /chat/approval of %s: %w", requestID, err)
	}
	defer resp.Body.Close()
	var out struct {
		Accepted bool   `json:"accepted"`
		Reason   string `json:"reason"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	if err != nil || !(out.Accepted || again && out.Reason == protocol.RejectDecided) {
		return resp.StatusCode, fmt.Errorf("approval of %s not accepted (%s %s): %v", requestID, resp.Status, out.Reason, err)
	}
	return resp.StatusCode, nil
}

// events opens GET /chat/turns/:turnId/events from the turn's start.
func (a apiClient) events(ctx context.Context, turnID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/chat/turns/"+turnID+"/events?after=0", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.send(req)
	if err != nil {
		return nil, fmt.Errorf("GET events of %s: %w", turnID, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET events of %s: %s", turnID, resp.Status)
	}
	return resp, nil
}

// readStamped parses an SSE stream's events, noting when each arrived;
// keep-alives are skipped. The channel closes at the stream's end.
func readStamped(r io.Reader) <-chan stamped {
	out := make(chan stamped, 64)
	go func() {
		defer close(out)
		_ = protocol.ReadSSE(r, func(m protocol.SSEMessage) error {
			at := time.Now()
			var ev protocol.Event
			if json.Unmarshal([]byte(m.Data), &ev) != nil || ev.Type == protocol.EventHeartbeat {
				return nil
			}
			out <- stamped{Event: ev, at: at}
			return nil
		})
	}()
	return out
}

// awaitEvent returns the next event of type typ; an error event or the
// stream's end before it is an error.
func awaitEvent(ctx context.Context, events <-chan stamped, typ string) (stamped, error) {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return ev, fmt.Errorf("stream ended before %s", typ)
			}
			if ev.Type == typ {
				return ev, nil
			}
			if ev.Type == protocol.EventError || ev.Type == protocol.EventFinish {
				return ev, fmt.Errorf("%s before %s: %s%s", ev.Type, typ, ev.Message, ev.Reason)
			}
		case <-ctx.Done():
			return stamped{}, fmt.Errorf("no %s: %w", typ, ctx.Err())
		}
	}
}
