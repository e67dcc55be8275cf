package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// The AI SDK's UI Message Stream protocol (the `ai` package's useChat and
// DefaultChatTransport, versions 6 and 7): POST aiSDKChatPath takes the
// transport's request and streams a turn as UI message chunks; GET
// aiSDKStreamPath is the transport's reconnectToStream. docs/ai-sdk.md maps
// every event to its chunk.
const (
	aiSDKChatPath   = "/ai-sdk/chat"
	aiSDKStreamPath = "/ai-sdk/chat/:conversationId/stream"
	// headerUIMessageStream marks a UI message stream, as the SDK's own
	// servers send it (UI_MESSAGE_STREAM_HEADERS).
	headerUIMessageStream = "x-vercel-ai-ui-message-stream"
)

// uiChatRequest is the body DefaultChatTransport posts: the chat's id, its
// messages, what triggered the request, and whatever the transport's body
// option adds (here bypassApproval and clientTools, as POST /chat/stream
// takes them).
type uiChatRequest struct {
	ID string `json:"id"`
	// Messages are kept raw: only the last one is read; what the client
	// holds of earlier turns is not tollgate's record and is never read.
	Messages       []json.RawMessage   `json:"messages"`
	Trigger        string              `json:"trigger"`
	MessageID      string              `json:"messageId"`
	BypassApproval bool                `json:"bypassApproval"`
	ClientTools    []protocol.ToolSpec `json:"clientTools"`
}

// uiMessage is the last message of a request: the user's new message, or
// the assistant's with the client's answers to the calls it waits on.
type uiMessage struct {
	ID    string   `json:"id"`
	Role  string   `json:"role"`
	Parts []uiPart `json:"parts"`
}

// uiPart is a UI message part, with the fields tollgate reads: a text
// part's text, and a tool part's call, state, output and approval.
type uiPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	ToolCallID string          `json:"toolCallId"`
	State      string          `json:"state"`
	Output     json.RawMessage `json:"output"`
	ErrorText  string          `json:"errorText"`
	Approval   *uiApproval     `json:"approval"`
}

// uiApproval is a tool part's approval: its id (tollgate's request id) and,
// once the user responded, whether they approved and why.
type uiApproval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved"`
	Reason   string `json:"reason"`
}

// isTool reports whether p is a tool part: tool-<name> or dynamic-tool.
func (p uiPart) isTool() bool {
	return strings.HasPrefix(p.Type, "tool-") || p.Type == "dynamic-tool"
}

// aiSDKChat handles POST /ai-sdk/chat. A last message from the user is a
// new message to the conversation the chat's id names, and the answer
// streams its turn; a last message from the assistant carries the client's
// answers (approval responses, client tool outputs) to the calls its turn
// waits on, which go through the same gate as POST /chat/approval and POST
// /chat/tool-result, and the answer streams the turn on from there.
func (s *Server) aiSDKChat(c *gin.Context) {
	var req uiChatRequest
	if err := decodeBody(c, &req); err != nil {
		writeError(c, s.log, err)
		return
	}
	if req.ID == "" {
		writeError(c, s.log, badRequest("id is missing: the chat's id is the conversation's"))
		return
	}
	if len(req.Messages) == 0 {
		writeError(c, s.log, badRequest("messages is empty: send the chat's messages, the new one last"))
		return
	}
	var last uiMessage
	if err := decodeJSON(bytes.NewReader(req.Messages[len(req.Messages)-1]), &last); err != nil {
		writeError(c, s.log, badRequest("messages[%d]: %s", len(req.Messages)-1, strings.TrimPrefix(err.Error(), "bad request: ")))
		return
	}
	switch last.Role {
	case "user":
		s.aiSDKMessage(c, req, last)
	case "assistant":
		s.aiSDKAnswers(c, req, last)
	default:
		writeError(c, s.log, badRequest("messages[%d] has the role %.20q: the last message is the user's (a new message) or the assistant's (answers to its calls)", len(req.Messages)-1, last.Role))
	}
}

// aiSDKMessage sends the user's message to the chat's conversation and
// streams its turn. The message's id is its Idempotency-Key, so that a
// request sent again (or regenerated) streams the same turn, never a second.
func (s *Server) aiSDKMessage(c *gin.Context, req uiChatRequest, msg uiMessage) {
	if !s.may(c, config.RoleChat) {
		writeError(c, s.log, forbidden("%s %s with a user message needs a token with the role %s", c.Request.Method, c.FullPath(), config.RoleChat))
		return
	}
	var text []string
	for _, p := range msg.Parts {
		if p.Type == "text" {
			text = append(text, p.Text)
		}
	}
	key, err := idempotencyKey(c.Request)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if key == "" {
		// An id a header could not carry just goes without a key.
		key, _ = idempotencyKey(&http.Request{Header: http.Header{protocol.HeaderIdempotencyKey: {msg.ID}}})
	}
	ref, _, err := s.sendChat(c, protocol.ChatRequest{
		Query: strings.Join(text, "\n"), ConversationID: req.ID,
		BypassApproval: req.BypassApproval, ClientTools: req.ClientTools,
	}, key)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	s.streamUI(c, ref.ConversationID, ref.TurnID, newUITranslator(0))
}

// aiSDKAnswers delivers the answers the assistant's message carries for
// the calls its turn asked about: each approval-responded tool part whose
// approval names a request of the turn is a decision (which needs the
// approve role), each output of a client tool the turn asked for is its
// result (which needs the chat role, as POST /chat/tool-result does).
// Parts that name nothing the turn asked about are ignored, and so is a
// second part about the same call. The stream goes on after the last call
// answered.
func (s *Server) aiSDKAnswers(c *gin.Context, req uiChatRequest, msg uiMessage) {
	conv := req.ID
	ctx := c.Request.Context()
	// Refused before anything is read: an approval response is a decision.
	for _, p := range msg.Parts {
		if p.isTool() && p.State == "approval-responded" && !s.may(c, config.RoleApprove) {
			writeError(c, s.log, forbidden("%s %s with an approval response needs a token with the role %s", c.Request.Method, c.FullPath(), config.RoleApprove))
			return
		}
	}
	if err := s.checkConversation(ctx, conv); err != nil {
		writeError(c, s.log, err)
		return
	}
	// The answers hold a place among the Temporal calls in flight, as
	// POST /chat/approval does, until they are delivered; the stream does
	// not.
	release, err := s.calls.acquire("deliver the answers of conversation " + conv)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	x, turnID, err := s.deliverAnswers(c, conv, msg)
	release()
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	s.streamUI(c, conv, turnID, x)
}

// deliverAnswers sends the answers msg carries to conv's turn, and returns
// the translator that streams the turn on from after the last call answered.
func (s *Server) deliverAnswers(c *gin.Context, conv string, msg uiMessage) (*uiTranslator, string, error) {
	ctx := c.Request.Context()
	turnID, err := s.aiSDKTurn(c, conv, msg.ID)
	if err != nil {
		return nil, "", err
	}
	if turnID == "" {
		return nil, "", badRequest("conversation %s has no turn to answer: send a user message", conv)
	}
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	log, err := s.hub.src.Events(qctx, turnID, 0, false)
	cancel()
	if err != nil {
		return nil, "", fmt.Errorf("read turn %s: %w", turnID, err)
	}
	asked := newUITranslator(len(log.Events) + 1) // silent: it only learns
	asked.events(log.Events)

	var (
		decisions []protocol.ApprovalDecision
		results   []protocol.ToolResultRequest
		cursor    int
		// answered are the requests a part answered: the first part about
		// a call is its answer, so a message of many copies of one part
		// costs one delivery.
		answered = map[string]bool{}
	)
	for _, p := range msg.Parts {
		switch {
		case !p.isTool():
		case p.State == "approval-responded" && p.Approval != nil && p.Approval.Approved != nil:
			r, ok := asked.requests[p.Approval.ID]
			if !ok || r.toolCallID != p.ToolCallID || answered[r.requestID] {
				// Not this turn's request, or not this part's call: a client
				// that put one call's approval on another's part is not
				// believed about either. A call is answered once.
				continue
			}
			answered[r.requestID] = true
			cursor = max(cursor, r.seq)
			if !r.open {
				continue // decided already: its decision is in the stream
			}
			d := protocol.ApprovalDecision{RequestID: p.Approval.ID, Decision: protocol.DecisionDecline, Reason: p.Approval.Reason}
			if *p.Approval.Approved {
				d.Decision = protocol.DecisionApprove
			}
			decisions = append(decisions, d)
		case p.State == "output-available" || p.State == "output-error":
			r, ok := asked.clientCalls[p.ToolCallID]
			if !ok || answered[r.requestID] {
				continue
			}
			answered[r.requestID] = true
			cursor = max(cursor, r.seq)
			if !r.open {
				continue
			}
			b := protocol.ToolResultRequest{RequestID: r.requestID, Result: p.Output, IsError: p.State == "output-error"}
			if b.IsError || len(bytes.TrimSpace(b.Result)) == 0 {
				b.Result, _ = json.Marshal(p.ErrorText)
			}
			results = append(results, b)
		}
	}
	if len(results) > 0 && !s.may(c, config.RoleChat) {
		return nil, "", forbidden("%s %s with a client tool's output needs a token with the role %s", c.Request.Method, c.FullPath(), config.RoleChat)
	}
	if cursor == 0 {
		return nil, "", badRequest("the last message answers no call that turn %s asked about: send a user message, or respond to its approvals (addToolApprovalResponse) or client tools (addToolOutput)", turnID)
	}
	x := newUITranslator(cursor)
	for _, d := range decisions {
		_, res, err := s.decideAsCaller(c, d)
		if err != nil {
			return nil, "", err
		}
		if res.Pending {
			// A vote of a quorum's: the call waits for more.
			x.voted(d.RequestID, asked.requests[d.RequestID].toolCallID)
			continue
		}
		x.answered(d.RequestID, asked.requests[d.RequestID].toolCallID, res.Reason)
	}
	for _, b := range results {
		var none struct{}
		wid, _ := contract.RequestWorkflowID(b.RequestID)
		reason, err := s.offer(ctx, wid, contract.ClientToolResultUpdate, "", clientToolResult(b), &none)
		if err != nil {
			return nil, "", err
		}
		x.answered(b.RequestID, "", reason)
	}
	return x, turnID, nil
}

// aiSDKTurn is the turn of conversation conv that a request is about: the
// assistant message's id when it names one of conv's turns (the stream
// gives each turn's message its turn's id), else conv's newest turn; ""
// when it has none.
func (s *Server) aiSDKTurn(c *gin.Context, conv, messageID string) (string, error) {
	if owner, _, ok := contract.ParseTurnWorkflowID(messageID); ok && owner == conv {
		return messageID, nil
	}
	state, err := s.conversationState(c.Request.Context(), conv)
	if err != nil {
		return "", err
	}
	if state.Turns == 0 {
		return "", nil
	}
	return contract.TurnWorkflowID(conv, state.Turns), nil
}

// aiSDKResume handles GET /ai-sdk/chat/:conversationId/stream, the AI SDK's
// resumeStream: the conversation's newest turn from its start, while it
// runs, waits or is queued; 204 when nothing runs (no turn, or the newest
// has ended), which the SDK reads as nothing to resume.
func (s *Server) aiSDKResume(c *gin.Context) {
	conv := c.Param("conversationId")
	if err := checkConversationID(conv); err != nil {
		writeError(c, s.log, err)
		return
	}
	state, err := s.conversationState(c.Request.Context(), conv)
	switch {
	case isNotFound(err):
		c.Status(http.StatusNoContent)
		return
	case err != nil:
		writeError(c, s.log, err)
		return
	case state.Running == "" && state.Queued == 0:
		c.Status(http.StatusNoContent)
		return
	}
	s.streamUI(c, conv, contract.TurnWorkflowID(conv, state.Turns), newUITranslator(0))
}

// streamUI streams turnID as a UI message stream: its message's start
// (the turn's id as the message's), then x's chunks of its events.
func (s *Server) streamUI(c *gin.Context, conv, turnID string, x *uiTranslator) {
	h := c.Writer.Header()
	h.Set(headerUIMessageStream, "v1")
	h.Set(protocol.HeaderConversationID, conv)
	h.Set(protocol.HeaderTurnID, turnID)
	sse, err := startSSE(c.Writer)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	out := &uiStream{w: sse.w, x: x}
	meta := uiMetadata{ConversationID: conv, TurnID: turnID}
	if err := out.write([]uiChunk{{Type: "start", MessageID: turnID, MessageMetadata: meta.wrap()}}); err != nil {
		return
	}
	s.streamTo(c, turnID, 0, out)
}

// uiStream writes a turn as UI message chunks, each an SSE data line.
type uiStream struct {
	w flushWriter
	x *uiTranslator
}

func (u *uiStream) events(evs []protocol.Event) error {
	chunks := u.x.events(evs)
	finished := contract.Finished(evs)
	waits := !finished && u.x.waitsForClient()
	if waits {
		chunks = append(chunks, u.x.close()...)
		chunks = append(chunks, uiChunk{Type: "finish", FinishReason: "tool-calls"})
	}
	if err := u.write(chunks); err != nil {
		return err
	}
	if finished || waits {
		return u.done()
	}
	return nil
}

func (u *uiStream) unnumbered(e protocol.Event) error {
	switch e.Type {
	case protocol.EventQueued:
		return u.write([]uiChunk{{Type: "data-tollgate-queued", Transient: true, Data: uiQueued{ConversationID: e.ConversationID, TurnID: e.TurnID}}})
	case protocol.EventError:
		chunks := append(u.x.close(), uiChunk{Type: "error", ErrorText: e.Message}, uiChunk{Type: "finish", FinishReason: "error"})
		if err := u.write(chunks); err != nil {
			return err
		}
		return u.done()
	}
	return nil
}

// keepAlive writes an SSE comment, not the API's heartbeat event: the SDK
// parses every data line as a chunk, and a heartbeat is not one.
func (u *uiStream) keepAlive() error {
	return u.raw(": keep-alive\n\n")
}

// raw writes s as it is and flushes.
func (u *uiStream) raw(s string) error {
	if _, err := io.WriteString(u.w, s); err != nil {
		return err
	}
	u.w.Flush()
	return nil
}

// write sends chunks, each one data line, and flushes.
func (u *uiStream) write(chunks []uiChunk) error {
	if len(chunks) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for _, ch := range chunks {
		b, err := json.Marshal(ch)
		if err != nil {
			return fmt.Errorf("encode a %s chunk: %w", ch.Type, err)
		}
		buf.WriteString("data: ")
		buf.Write(b)
		buf.WriteString("\n\n")
	}
	if _, err := u.w.Write(buf.Bytes()); err != nil {
		return err
	}
	u.w.Flush()
	return nil
}

// done ends the stream as the SDK's servers do.
func (u *uiStream) done() error {
	if err := u.raw("data: [DONE]\n\n"); err != nil {
		return err
	}
	return errStreamEnded
}

// conversationState asks conv's workflow for its state, for at most
// queryTimeout: a conversation whose worker is gone fails the request
// rather than holding it open.
func (s *Server) conversationState(ctx context.Context, conv string) (contract.ConversationState, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	return temporalSource{client: s.client}.Conversation(ctx, conv)
}
