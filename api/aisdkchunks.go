package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate/tollgate/protocol"
)

// uiChunk is one chunk of the AI SDK's UI message stream (the `ai`
// package's UIMessageChunk): a JSON object whose type says which fields it
// has.
type uiChunk struct {
	Type      string `json:"type"`
	ID        string `json:"id,omitempty"`
	Delta     string `json:"delta,omitempty"`
	MessageID string `json:"messageId,omitempty"`
	// MessageMetadata is set on start, finish and message-metadata.
	MessageMetadata any    `json:"messageMetadata,omitempty"`
	ToolCallID      string `json:"toolCallId,omitempty"`
	ToolName        string `json:"toolName,omitempty"`
	// Input is the call's arguments: their JSON, or their text when it is
	// not JSON.
	Input            any            `json:"input,omitempty"`
	ProviderExecuted *bool          `json:"providerExecuted,omitempty"`
	ToolMetadata     map[string]any `json:"toolMetadata,omitempty"`
	ApprovalID       string         `json:"approvalId,omitempty"`
	Approved         *bool          `json:"approved,omitempty"`
	Reason           string         `json:"reason,omitempty"`
	// Output is a tool's result text; a set interface holding "" is still
	// sent.
	Output       any    `json:"output,omitempty"`
	ErrorText    string `json:"errorText,omitempty"`
	FinishReason string `json:"finishReason,omitempty"`
	// Data and Transient are a data-* chunk's.
	Data      any  `json:"data,omitempty"`
	Transient bool `json:"transient,omitempty"`
}

// uiMetadata is tollgate's part of a turn's message metadata, under the
// key "tollgate": which turn the message is, and how it finished.
type uiMetadata struct {
	ConversationID string `json:"conversationId,omitempty"`
	TurnID         string `json:"turnId,omitempty"`
	RunID          string `json:"runId,omitempty"`
	Bypass         bool   `json:"bypass,omitempty"`
	FinishReason   string `json:"finishReason,omitempty"`
	Message        string `json:"message,omitempty"`
}

func (m uiMetadata) wrap() map[string]uiMetadata { return map[string]uiMetadata{"tollgate": m} }

// The data of tollgate's data-* parts (docs/ai-sdk.md).
type (
	// uiApprovalData is data-tollgate-approval: what a person is asked.
	uiApprovalData struct {
		RequestID  string     `json:"requestId"`
		ToolCallID string     `json:"toolCallId"`
		ToolName   string     `json:"toolName"`
		Arguments  string     `json:"arguments"`
		WorkflowID string     `json:"workflowId"`
		ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
		Preview    string     `json:"preview,omitempty"`
		Reason     string     `json:"reason,omitempty"`
		Kind       string     `json:"kind,omitempty"`
		Subagent   string     `json:"subagent,omitempty"`
		// Sandbox is what a Bash call did in the sandbox before it asked
		// (Event.Sandbox): an approve applies its changes.
		Sandbox *protocol.SandboxRun `json:"sandbox,omitempty"`
	}
	// uiDecisionData is data-tollgate-decision: how a call was decided.
	uiDecisionData struct {
		RequestID      string     `json:"requestId,omitempty"`
		ToolCallID     string     `json:"toolCallId"`
		Decision       string     `json:"decision"`
		Reason         string     `json:"reason,omitempty"`
		By             string     `json:"by,omitempty"`
		Role           string     `json:"role,omitempty"`
		Grant          string     `json:"grant,omitempty"`
		GrantUsesLeft  *int       `json:"grantUsesLeft,omitempty"`
		GrantExpiresAt *time.Time `json:"grantExpiresAt,omitempty"`
		Subagent       string     `json:"subagent,omitempty"`
	}
	// uiClientToolData is data-tollgate-client-tool-call: the turn waits
	// for the client's tool.
	uiClientToolData struct {
		RequestID  string     `json:"requestId"`
		ToolCallID string     `json:"toolCallId"`
		ToolName   string     `json:"toolName"`
		ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	}
	// uiCompactedData is data-tollgate-context-compacted.
	uiCompactedData struct {
		Elided      int    `json:"elided,omitempty"`
		Summarized  int    `json:"summarized,omitempty"`
		Kept        int    `json:"kept,omitempty"`
		Cut         int    `json:"cut,omitempty"`
		BytesBefore int    `json:"bytesBefore,omitempty"`
		BytesAfter  int    `json:"bytesAfter,omitempty"`
		Subagent    string `json:"subagent,omitempty"`
	}
	// uiSubagentData is data-tollgate-subagent: a subagent's run, one part
	// per run (its id the subagent's workflow id), updated when it ends.
	uiSubagentData struct {
		Name       string `json:"name"`
		WorkflowID string `json:"workflowId"`
		State      string `json:"state"`
		Reason     string `json:"reason,omitempty"`
		Text       string `json:"text,omitempty"`
		Message    string `json:"message,omitempty"`
	}
	// uiSubagentToken is the transient data-tollgate-subagent-token.
	uiSubagentToken struct {
		Name       string `json:"name"`
		WorkflowID string `json:"workflowId"`
		Delta      string `json:"delta"`
	}
	// uiQueued is the transient data-tollgate-queued.
	uiQueued struct {
		ConversationID string `json:"conversationId"`
		TurnID         string `json:"turnId"`
	}
	// uiVotesData is data-tollgate-votes: who may decide a waiting call
	// now, and where its rule's quorum stands, after a vote or an
	// escalation step.
	uiVotesData struct {
		RequestID  string          `json:"requestId"`
		ToolCallID string          `json:"toolCallId"`
		Deciders   []string        `json:"deciders,omitempty"`
		Votes      *protocol.Votes `json:"votes,omitempty"`
		Subagent   string          `json:"subagent,omitempty"`
	}
	// uiRefusedData is data-tollgate-refused: an answer of the client's
	// that the turn did not take, and why.
	uiRefusedData struct {
		RequestID string `json:"requestId"`
		Reason    string `json:"reason"`
	}
)

// uiRequest is something a turn asked: a person's approval, or a client
// tool's result.
type uiRequest struct {
	seq        int
	requestID  string
	toolCallID string // the part's
	kind       string
	// open is true until the log says how it was answered.
	open bool
	// deciders and votes are who may decide an approval now and where its
	// quorum stands, as its events last said.
	deciders []string
	votes    *protocol.Votes
}

// uiTranslator turns a turn's events into UI message chunks: one assistant
// message per turn, a step per model call, a tool part per call shown
// when it asks (an approval, a client tool) or when its result comes, so
// that the SDK's sendAutomaticallyWhen helpers see a step whose every call
// is answered once the client has answered what it was asked. It learns
// from every event but sends only those after after, which the client
// already has.
type uiTranslator struct {
	after int
	// resumed is set once an event after after came.
	resumed bool
	// step is true while a step is open; text is the open text part's id.
	step bool
	text string
	// calls are the turn's and its subagents' calls by part id; shown
	// the part ids whose part was sent.
	calls map[string]protocol.ToolCall
	shown map[string]bool
	// requests are the approval requests by request id; clientCalls the
	// client tool calls by tool call id.
	requests    map[string]*uiRequest
	clientCalls map[string]*uiRequest
	// subagents names each subagent's running workflow.
	subagents map[string]string
	// waiting is true when the last event said the turn waits: the
	// heartbeat after a batch's requests, or a client tool call.
	waiting bool
	// settled are the requests this request answered, which the stream
	// does not stop for; first the chunks that say what it answered.
	settled map[string]bool
	first   []uiChunk
	// resultsAhead are the client calls that have their result later in
	// the batch of events being translated.
	resultsAhead map[string]bool
}

func newUITranslator(after int) *uiTranslator {
	return &uiTranslator{
		after: after, calls: map[string]protocol.ToolCall{}, shown: map[string]bool{},
		requests: map[string]*uiRequest{}, clientCalls: map[string]*uiRequest{},
		subagents: map[string]string{}, settled: map[string]bool{},
	}
}

// answered records the client's answer to request id (of the part
// partID) and whether the turn took it: refusal is a Reject reason, or ""
// when it did. A request refused as forbidden, or as voted, still waits
// (for someone else): it is asked again.
func (x *uiTranslator) answered(id, partID, refusal string) {
	if refusal == "" {
		x.settled[id] = true
		return
	}
	x.first = append(x.first, uiChunk{Type: "data-tollgate-refused", ID: id, Data: uiRefusedData{RequestID: id, Reason: refusal}})
	if (refusal == protocol.RejectForbidden || refusal == protocol.RejectVoted) && partID != "" {
		x.first = append(x.first, uiChunk{Type: "tool-approval-request", ApprovalID: id, ToolCallID: partID})
		return
	}
	x.settled[id] = true
}

// voted records the client's answer to request id (of the part partID)
// that the turn took as a vote, leaving the call waiting for more: it is
// asked again, for the next person, and its data-tollgate-votes part (from
// the approval_vote event) says where the votes stand.
func (x *uiTranslator) voted(id, partID string) {
	x.first = append(x.first, uiChunk{Type: "tool-approval-request", ApprovalID: id, ToolCallID: partID})
}

// waitsForClient reports whether the turn waits for something the client
// can answer and has not: the stream then ends, and the client's answer
// continues it.
func (x *uiTranslator) waitsForClient() bool {
	if !x.waiting {
		return false
	}
	for _, set := range []map[string]*uiRequest{x.requests, x.clientCalls} {
		for _, r := range set {
			if r.open && !x.settled[r.requestID] {
				return true
			}
		}
	}
	return false
}

// events translates a batch of events.
func (x *uiTranslator) events(evs []protocol.Event) []uiChunk {
	out := x.first
	x.first = nil
	x.resultsAhead = map[string]bool{}
	for _, e := range evs {
		if e.Type == protocol.EventToolResult {
			for _, r := range e.ToolResults {
				x.resultsAhead[r.ID] = true
			}
		}
	}
	for _, e := range evs {
		if e.Seq > x.after && !x.resumed {
			x.resumed = true
			if x.after > 0 {
				// The client's stream ended where the turn waited, which
				// closed its step.
				x.step, x.text = false, ""
			}
		}
		chunks := x.event(e)
		if e.Seq > x.after {
			out = append(out, chunks...)
		}
	}
	return out
}

// event translates one event.
func (x *uiTranslator) event(e protocol.Event) []uiChunk {
	sub := ""
	typ := e.Type
	if rest, ok := strings.CutPrefix(e.Type, protocol.EventSubagentPrefix); ok && e.Type != protocol.EventSubagentStart && e.Type != protocol.EventSubagentFinish {
		sub, typ = e.Name, rest
	}
	if e.Seq > 0 && typ != protocol.EventApprovalDecision && typ != protocol.EventApprovalVote && typ != protocol.EventApprovalEscalated {
		// A decision leaves the turn waiting while others of its batch
		// are open (waitsForClient looks at them), and a vote or an
		// escalation step leaves its call waiting; anything else means
		// it moved on.
		x.waiting = false
	}
	switch typ {
	case protocol.EventTurnStart:
		return []uiChunk{{Type: "message-metadata", MessageMetadata: uiMetadata{RunID: e.RunID, Bypass: e.Bypass}.wrap()}}
	case protocol.EventToken:
		if sub != "" {
			return []uiChunk{{Type: "data-tollgate-subagent-token", Transient: true, Data: uiSubagentToken{Name: sub, WorkflowID: x.subagents[sub], Delta: e.Data}}}
		}
		var out []uiChunk
		out = x.openStep(out)
		if e.Reset && x.text != "" {
			out = append(out, uiChunk{Type: "reset-step"})
			x.text = ""
		}
		if x.text == "" {
			x.text = fmt.Sprintf("text-%d", e.Seq)
			out = append(out, uiChunk{Type: "text-start", ID: x.text})
		}
		return append(out, uiChunk{Type: "text-delta", ID: x.text, Delta: e.Data})
	case protocol.EventToolCall:
		for _, call := range e.ToolCalls {
			x.calls[x.partID(sub, call.ID)] = call
		}
		if sub != "" {
			return nil
		}
		return x.openStep(x.closeText(nil))
	case protocol.EventApprovalRequest:
		id := x.partID(sub, e.ToolCallID)
		call, ok := x.calls[id]
		if !ok || e.Kind == protocol.KindBudget {
			call = protocol.ToolCall{ID: e.ToolCallID, Name: e.ToolName, Arguments: e.Arguments}
		}
		x.requests[e.RequestID] = &uiRequest{seq: e.Seq, requestID: e.RequestID, toolCallID: id, kind: e.Kind, open: true, deciders: e.Deciders, votes: e.Votes}
		out := x.show(nil, id, call, sub, true)
		return append(out,
			uiChunk{Type: "tool-approval-request", ApprovalID: e.RequestID, ToolCallID: id, Reason: e.Reason},
			uiChunk{Type: "data-tollgate-approval", ID: e.RequestID, Data: uiApprovalData{
				RequestID: e.RequestID, ToolCallID: id, ToolName: e.ToolName, Arguments: e.Arguments, WorkflowID: e.WorkflowID,
				ExpiresAt: e.ExpiresAt, Preview: e.Preview, Reason: e.Reason, Kind: e.Kind, Subagent: sub,
				Sandbox: e.Sandbox,
			}})
	case protocol.EventApprovalDecision:
		id := x.partID(sub, e.ToolCallID)
		var out []uiChunk
		if r, ok := x.requests[e.RequestID]; ok && e.RequestID != "" {
			r.open = false
			approved := e.Decision == protocol.DecisionApprove
			out = append(out, uiChunk{Type: "tool-approval-response", ApprovalID: e.RequestID, Approved: &approved, Reason: e.Reason})
			if r.kind == protocol.KindBudget {
				// A budget's request has no tool_result: its decision is its
				// outcome.
				switch e.Decision {
				case protocol.DecisionApprove:
					out = append(out, uiChunk{Type: "tool-output-available", ToolCallID: r.toolCallID, Output: "the budget was raised"})
				case protocol.DecisionDecline:
					out = append(out, uiChunk{Type: "tool-output-denied", ToolCallID: r.toolCallID})
				default:
					out = append(out, uiChunk{Type: "tool-output-error", ToolCallID: r.toolCallID, ErrorText: cmp.Or(e.Reason, "no decision came in time")})
				}
			}
		}
		key := e.RequestID
		if key == "" {
			key = "grant:" + id
		}
		return append(out, uiChunk{Type: "data-tollgate-decision", ID: key, Data: uiDecisionData{
			RequestID: e.RequestID, ToolCallID: id, Decision: e.Decision, Reason: e.Reason, By: e.By, Role: e.Role,
			Grant: e.Grant, GrantUsesLeft: e.GrantUsesLeft, GrantExpiresAt: e.GrantExpiresAt, Subagent: sub,
		}})
	case protocol.EventApprovalVote, protocol.EventApprovalEscalated:
		// One part a call, which each vote and step replaces whole.
		r := x.requests[e.RequestID]
		if r == nil {
			r = &uiRequest{} // its request came before the events read
		}
		if typ == protocol.EventApprovalEscalated {
			r.deciders = e.Deciders
		}
		if e.Votes != nil {
			r.votes = e.Votes
		}
		return []uiChunk{{Type: "data-tollgate-votes", ID: "votes-" + e.RequestID, Data: uiVotesData{
			RequestID: e.RequestID, ToolCallID: x.partID(sub, e.ToolCallID), Deciders: r.deciders, Votes: r.votes, Subagent: sub,
		}}}
	case protocol.EventClientToolCall:
		x.waiting = true
		id := x.partID(sub, e.ToolCallID)
		x.clientCalls[id] = &uiRequest{seq: e.Seq, requestID: e.RequestID, toolCallID: id, open: true}
		call, ok := x.calls[id]
		if !ok {
			call = protocol.ToolCall{ID: e.ToolCallID, Name: e.ToolName, Arguments: e.Arguments}
		}
		// Sent as the client's to run, which calls its onToolCall; a call
		// whose result the replayed log holds already is not run again.
		out := x.show(nil, id, call, sub, x.resultsAhead[e.ToolCallID])
		return append(out, uiChunk{Type: "data-tollgate-client-tool-call", ID: e.RequestID, Data: uiClientToolData{
			RequestID: e.RequestID, ToolCallID: id, ToolName: e.ToolName, ExpiresAt: e.ExpiresAt,
		}})
	case protocol.EventToolResult:
		var out []uiChunk
		for _, r := range e.ToolResults {
			id := x.partID(sub, r.ID)
			if cc, ok := x.clientCalls[id]; ok {
				cc.open = false
			}
			call, ok := x.calls[id]
			if !ok {
				call = protocol.ToolCall{ID: r.ID, Name: r.Name}
			}
			out = x.show(out, id, call, sub, true)
			switch r.Status {
			case protocol.StatusOK:
				out = append(out, uiChunk{Type: "tool-output-available", ToolCallID: id, Output: r.Result})
			case protocol.StatusDeclined:
				out = append(out, uiChunk{Type: "tool-output-denied", ToolCallID: id})
			default:
				out = append(out, uiChunk{Type: "tool-output-error", ToolCallID: id, ErrorText: cmp.Or(r.Result, "the call failed ("+r.Status+")")})
			}
		}
		if sub == "" && x.step {
			out = append(out, uiChunk{Type: "finish-step"})
			x.step = false
		}
		return out
	case protocol.EventHeartbeat:
		if e.Seq > 0 {
			x.waiting = true
		}
		return nil
	case protocol.EventContextCompacted:
		return []uiChunk{{Type: "data-tollgate-context-compacted", Data: uiCompactedData{
			Elided: e.Elided, Summarized: e.Summarized, Kept: e.Kept, Cut: e.Cut, BytesBefore: e.BytesBefore, BytesAfter: e.BytesAfter, Subagent: sub,
		}}}
	case protocol.EventSubagentStart:
		x.subagents[e.Name] = e.TurnID
		return []uiChunk{{Type: "data-tollgate-subagent", ID: e.TurnID, Data: uiSubagentData{Name: e.Name, WorkflowID: e.TurnID, State: "running"}}}
	case protocol.EventSubagentFinish:
		wid := x.subagents[e.Name]
		return []uiChunk{{Type: "data-tollgate-subagent", ID: wid, Data: uiSubagentData{
			Name: e.Name, WorkflowID: wid, State: "finished", Reason: e.Reason, Text: e.Text, Message: e.Message,
		}}}
	case protocol.EventError:
		if sub != "" {
			return nil
		}
		return append(x.close(), uiChunk{Type: "error", ErrorText: e.Message})
	case protocol.EventFinish:
		return append(x.close(), uiChunk{
			Type: "finish", FinishReason: uiFinishReason(e.Reason),
			MessageMetadata: uiMetadata{FinishReason: e.Reason, Message: e.Message}.wrap(),
		})
	}
	return nil
}

// partID is the tool part's id of a call: the model's id for the turn's
// own calls, and the subagent's workflow id, ':', and the model's id for a
// subagent's, whose ids may repeat the turn's.
func (x *uiTranslator) partID(sub, toolCallID string) string {
	if sub == "" {
		return toolCallID
	}
	return x.subagents[sub] + ":" + toolCallID
}

// show sends call's part (input available) unless it was sent already;
// a call the client runs is sent again as the client's, so that the SDK
// calls its onToolCall. tollgate marks its own calls providerExecuted:
// the client neither runs them nor waits for them.
func (x *uiTranslator) show(out []uiChunk, id string, call protocol.ToolCall, sub string, tollgates bool) []uiChunk {
	if x.shown[id] && tollgates {
		return out
	}
	x.shown[id] = true
	ch := uiChunk{Type: "tool-input-available", ToolCallID: id, ToolName: call.Name, Input: uiInput(call.Arguments), ProviderExecuted: &tollgates}
	if sub != "" {
		ch.ToolMetadata = map[string]any{"subagent": sub}
	}
	return append(out, ch)
}

// openStep starts a step, for a model call, unless one is open.
func (x *uiTranslator) openStep(out []uiChunk) []uiChunk {
	if x.step {
		return out
	}
	x.step = true
	return append(out, uiChunk{Type: "start-step"})
}

// closeText ends the open text part, if any.
func (x *uiTranslator) closeText(out []uiChunk) []uiChunk {
	if x.text == "" {
		return out
	}
	out = append(out, uiChunk{Type: "text-end", ID: x.text})
	x.text = ""
	return out
}

// close ends the open text part and step.
func (x *uiTranslator) close() []uiChunk {
	out := x.closeText(nil)
	if x.step {
		out = append(out, uiChunk{Type: "finish-step"})
		x.step = false
	}
	return out
}

// uiInput is a call's arguments as a part's input: their JSON, or their
// text when the model wrote no JSON.
func uiInput(arguments string) any {
	if arguments == "" {
		return map[string]any{}
	}
	if json.Valid([]byte(arguments)) {
		return json.RawMessage(arguments)
	}
	return arguments
}

// uiFinishReason is the SDK's finish reason of a turn's; tollgate's own
// is in the message's metadata.
func uiFinishReason(reason string) string {
	switch reason {
	case protocol.FinishStop:
		return "stop"
	case protocol.FinishError:
		return "error"
	default:
		return "other"
	}
}
