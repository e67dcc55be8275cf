package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/protocol"
)

// retryPause is how long a client waits before it tries another API
// instance after one failed it.
const retryPause = 100 * time.Millisecond

// apis are the API instances a load balancer would send requests to: those
// up and healthy. Each request goes to one of them; one that fails is
// tried again on another, as a client behind a balancer would.
type apis struct {
	mu    sync.Mutex
	addrs []string
	next  int
}

// add puts addr behind the balancer.
func (a *apis) add(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addrs = append(a.addrs, addr)
}

// remove takes addr from behind the balancer.
func (a *apis) remove(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addrs = slices.DeleteFunc(a.addrs, func(s string) bool { return s == addr })
}

// pick returns an instance other than avoid when there is one, taking them
// in turn.
func (a *apis) pick(avoid string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for range a.addrs {
		a.next++
		if addr := a.addrs[a.next%len(a.addrs)]; addr != avoid || len(a.addrs) == 1 {
			return addr
		}
	}
	return avoid
}

// turn is one client's turn: its message, its stream read to the end
// (resumed on another instance whenever a connection dropped), and its
// decision.
type turn struct {
	N      int
	Conv   string
	TurnID string

	// Events are the numbered events the client received, each once.
	Events []protocol.Event
	// Resumes counts the streams resumed after a dropped connection; Shed
	// the messages sent again after a 503.
	Resumes, Shed int
	// Approval is the approval_request the decision answers.
	Approval protocol.Event
	// Answers are the API's answers to the decision, in order: one per
	// attempt that got an HTTP answer.
	Answers []decisionAnswer
	// Retries counts the decisions sent again after an attempt got no
	// answer (its API was killed, or Temporal did not answer in time),
	// SecondRetries the same for the conflicting decision.
	Retries, SecondRetries int
	// Second is the answer to a conflicting decision sent after the
	// first was accepted.
	Second decisionAnswer

	// Decided is the time the decision was accepted, Finished the time
	// the finish event arrived.
	Decided, Finished time.Time
}

// decisionAnswer is POST /chat/approval's answer.
type decisionAnswer struct {
	Addr     string `json:"-"`
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason"`
}

// run sends the turn's message through one instance and reads its stream
// to the finish event. At its approval_request it waits for release, then
// decides (approve) through another instance, and once that is accepted
// sends a conflicting decision (decline), which must be refused. It calls
// paused at the approval_request and decided once the approval is
// answered.
func (tr *turn) run(ctx context.Context, pool *apis, release <-chan struct{}, paused, decided func()) error {
	addr := pool.pick("")
	// Every instance is up until the first message of every turn has
	// been answered, so no instance is killed before then. A 503 (an API
	// that sheds load past TOLLGATE_MAX_TEMPORAL_CALLS) is sent again with
	// the message's idempotency key (sendMessage).
	resp, shed, err := sendMessage(ctx, addr, protocol.ChatRequest{Query: fmt.Sprintf("turn %d", tr.N), ConversationID: tr.Conv}, tr.Conv+"-message-1")
	tr.Shed = shed
	if err != nil {
		return fmt.Errorf("turn %d: %w", tr.N, err)
	}
	tr.TurnID = resp.Header.Get(protocol.HeaderTurnID)

	decisionDone := make(chan error, 1)
	onEvent := func(e protocol.Event) {
		if e.Type != protocol.EventApprovalRequest {
			return
		}
		tr.Approval = e
		paused()
		go func() {
			select {
			case <-release:
			case <-ctx.Done():
				decisionDone <- ctx.Err()
				return
			}
			decisionDone <- tr.decide(ctx, pool, addr, decided)
		}()
	}
	if err := tr.follow(ctx, pool, resp, addr, onEvent); err != nil {
		return err
	}
	tr.Finished = time.Now()
	if tr.Approval.RequestID == "" {
		return fmt.Errorf("turn %d finished without an approval_request", tr.N)
	}
	return <-decisionDone
}

// follow reads the turn's stream from resp, at addr, to its finish event,
// requiring every event once and in order. When the connection drops
// before the finish, it asks another instance for the events after the
// last one it has (Last-Event-ID).
func (tr *turn) follow(ctx context.Context, pool *apis, resp *http.Response, addr string, onEvent func(protocol.Event)) error {
	errFinished := errors.New("finished")
	for {
		err := protocol.ReadSSE(resp.Body, func(m protocol.SSEMessage) error {
			if m.ID == "" {
				if m.Data == `{"type":"`+protocol.EventHeartbeat+`"}` {
					return nil
				}
				return brokenStream{fmt.Errorf("an unnumbered message: %s", m.Data)}
			}
			var e protocol.Event
			if err := json.Unmarshal([]byte(m.Data), &e); err != nil {
				return brokenStream{fmt.Errorf("event %s: %w", m.ID, err)}
			}
			if strconv.Itoa(e.Seq) != m.ID || e.Seq != len(tr.Events)+1 {
				return brokenStream{fmt.Errorf("event id %s (seq %d) after %d events: not the next one", m.ID, e.Seq, len(tr.Events))}
			}
			tr.Events = append(tr.Events, e)
			onEvent(e)
			if e.Type == protocol.EventFinish {
				return errFinished
			}
			return nil
		})
		resp.Body.Close()
		if errors.Is(err, errFinished) {
			return nil
		}
		if errors.As(err, new(brokenStream)) {
			return fmt.Errorf("turn %d: stream from %s: %w", tr.N, addr, err)
		}
		// Anything else is a connection that ended before the finish
		// event (its instance was killed): resume on another.
		tr.Resumes++
		for {
			if ctx.Err() != nil {
				return fmt.Errorf("turn %d: resume after event %d: %w (last: %v)", tr.N, len(tr.Events), ctx.Err(), err)
			}
			addr = pool.pick(addr)
			if resp, err = tr.resume(ctx, addr); err == nil {
				break
			}
			pause(ctx)
		}
	}
}

// brokenStream is a stream that broke the protocol, not one whose
// connection dropped.
type brokenStream struct{ error }

// resume asks addr for the turn's events after the last one the client
// has.
func (tr *turn) resume(ctx context.Context, addr string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/chat/turns/"+tr.TurnID+"/events", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(protocol.HeaderLastEventID, strconv.Itoa(len(tr.Events)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	return resp, nil
}

// decide approves the turn's call through an instance other than the
// stream's, sending the same decision again, to another instance, for as
// long as attempts get no answer; it calls decided once one is answered,
// then sends a conflicting decision the same way.
func (tr *turn) decide(ctx context.Context, pool *apis, streamAddr string, decided func()) error {
	approve := protocol.DecisionRequest{RequestID: tr.Approval.RequestID, Decision: protocol.DecisionApprove}
	addr := streamAddr
	for {
		addr = pool.pick(addr)
		answer, err := postDecision(ctx, addr, approve)
		if err == nil {
			tr.Answers = append(tr.Answers, answer)
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("turn %d: decide %s: %w (last: %v)", tr.N, approve.RequestID, ctx.Err(), err)
		}
		tr.Retries++
		pause(ctx)
	}
	tr.Decided = time.Now()
	decided()
	decline := protocol.DecisionRequest{RequestID: tr.Approval.RequestID, Decision: protocol.DecisionDecline, Reason: "second thoughts"}
	for {
		addr = pool.pick(addr)
		answer, err := postDecision(ctx, addr, decline)
		if err == nil {
			tr.Second = answer
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("turn %d: second decision on %s: %w (last: %v)", tr.N, decline.RequestID, ctx.Err(), err)
		}
		tr.SecondRetries++
		pause(ctx)
	}
}

// postDecision posts d to addr's POST /chat/approval. Only a 200 is an
// answer: no connection, a dropped one, or a 5xx (Temporal did not answer
// in time) is an error to try again.
func postDecision(ctx context.Context, addr string, d protocol.DecisionRequest) (decisionAnswer, error) {
	body, err := json.Marshal(d)
	if err != nil {
		return decisionAnswer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/chat/approval", bytes.NewReader(body))
	if err != nil {
		return decisionAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return decisionAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return decisionAnswer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return decisionAnswer{}, fmt.Errorf("POST %s: %s: %s", req.URL, resp.Status, b)
	}
	answer := decisionAnswer{Addr: addr}
	if err := json.Unmarshal(b, &answer); err != nil {
		return decisionAnswer{}, fmt.Errorf("POST %s: %w: %s", req.URL, err, b)
	}
	return answer, nil
}

// pause waits retryPause before a client tries again, as a client backs
// off from an instance that does not answer, or less when ctx ends.
func pause(ctx context.Context) {
	select {
	case <-time.After(retryPause):
	case <-ctx.Done():
	}
}

// sendMessage posts msg to addr's POST /chat/stream with idempotency key
// key, and sends it again after its Retry-After while the API answers 503,
// as a client does: a message that was taken is answered with its turn,
// never a second one. It returns the stream's response (200) and how many
// 503s came first.
func sendMessage(ctx context.Context, addr string, msg protocol.ChatRequest, key string) (*http.Response, int, error) {
	body, err := json.Marshal(msg)
	if err != nil {
		return nil, 0, err
	}
	for shed := 0; ; shed++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/chat/stream", bytes.NewReader(body))
		if err != nil {
			return nil, shed, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(protocol.HeaderIdempotencyKey, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, shed, fmt.Errorf("%s: POST /chat/stream to %s: %w", msg.ConversationID, addr, err)
		}
		if resp.StatusCode == http.StatusOK {
			return resp, shed, nil
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return nil, shed, fmt.Errorf("%s: POST /chat/stream to %s: %s: %s", msg.ConversationID, addr, resp.Status, strings.TrimSpace(string(b)))
		}
		wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil {
			return nil, shed, fmt.Errorf("%s: a 503 without a Retry-After in seconds: %w", msg.ConversationID, err)
		}
		select {
		case <-ctx.Done():
			return nil, shed, fmt.Errorf("%s: still 503 at the test's deadline: %s", msg.ConversationID, b)
		case <-time.After(time.Duration(wait) * time.Second):
		}
	}
}
