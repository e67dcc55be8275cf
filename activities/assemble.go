package activities

import (
	"fmt"

	openai "github.com/sashabaranov/go-openai"

	"github.com/tollgate/tollgate/protocol"
)

// ToolCallAssembler rebuilds whole tool calls from the deltas of a streamed
// chat completion. OpenAI-compatible servers disagree on how they stream a
// call, and the assembler accepts all the styles seen in practice:
//
//   - OpenAI: the first delta of a call carries index, id and name; later
//     deltas carry only the index and a fragment of the arguments. Several
//     calls may be interleaved by index.
//   - vLLM: the same, but fragments may be a character long and the id may be
//     repeated on every delta, while the name arrives once.
//   - Ollama: each call arrives whole in one delta, several calls may share
//     one chunk, and the index is missing or the same (0) for every call.
//
// A delta whose non-empty id differs from the id of the call at its index
// starts a new call. The zero value is ready to use; it is not safe for
// concurrent use.
type ToolCallAssembler struct {
	calls   []*protocol.ToolCall // in order of first appearance
	byIndex map[int]int          // stream index → position in calls
	byID    map[string]int
	last    int // position of the call the previous delta went to
}

// Add takes the tool call deltas of one streamed chunk, in the order the
// server sent them.
func (a *ToolCallAssembler) Add(deltas []openai.ToolCall) {
	for _, d := range deltas {
		a.add(d)
	}
}

func (a *ToolCallAssembler) add(d openai.ToolCall) {
	pos, ok := a.find(d)
	if !ok {
		pos = len(a.calls)
		a.calls = append(a.calls, &protocol.ToolCall{ID: d.ID, Name: d.Function.Name})
		if d.ID != "" {
			if a.byID == nil {
				a.byID = make(map[string]int)
			}
			if _, seen := a.byID[d.ID]; !seen {
				a.byID[d.ID] = pos
			}
		}
	}
	if d.Index != nil {
		if a.byIndex == nil {
			a.byIndex = make(map[int]int)
		}
		a.byIndex[*d.Index] = pos
	}
	a.last = pos

	call := a.calls[pos]
	if call.ID == "" && d.ID != "" {
		call.ID = d.ID
	}
	if call.Name == "" {
		call.Name = d.Function.Name
	}
	call.Arguments += d.Function.Arguments
}

// find returns the position of the call that delta d continues, or false when
// d starts a new call.
func (a *ToolCallAssembler) find(d openai.ToolCall) (int, bool) {
	if d.Index != nil {
		pos, ok := a.byIndex[*d.Index]
		if !ok {
			return 0, false
		}
		return pos, a.continues(a.calls[pos], d)
	}
	// No index (Ollama and friends): an id we know names its call; a new id
	// or a new name starts one; a bare fragment continues the last call.
	if d.ID != "" {
		pos, ok := a.byID[d.ID]
		return pos, ok
	}
	if len(a.calls) == 0 || d.Function.Name != "" {
		return 0, false
	}
	return a.last, true
}

// continues reports whether delta d, which has the same index as call, is a
// further piece of that call rather than the start of another call that a
// server put at the same index.
func (a *ToolCallAssembler) continues(call *protocol.ToolCall, d openai.ToolCall) bool {
	if d.ID != "" && call.ID != "" && d.ID != call.ID {
		return false
	}
	if d.ID == "" && d.Function.Name != "" && call.Name != "" && d.Function.Name != call.Name {
		return false
	}
	return true
}

// Calls returns the assembled calls in the order they first appeared. A call
// the server gave no id gets a synthesized one, call_<n> with n its position,
// that is unique within the answer. Arguments are kept verbatim, except that
// empty arguments become "{}".
func (a *ToolCallAssembler) Calls() []protocol.ToolCall {
	if len(a.calls) == 0 {
		return nil
	}
	used := make(map[string]bool, len(a.calls))
	for _, c := range a.calls {
		if c.ID != "" {
			used[c.ID] = true
		}
	}
	out := make([]protocol.ToolCall, len(a.calls))
	for i, c := range a.calls {
		out[i] = *c
		if out[i].ID == "" {
			id := fmt.Sprintf("call_%d", i)
			for used[id] {
				id += "_"
			}
			used[id] = true
			out[i].ID = id
		}
		if out[i].Arguments == "" {
			out[i].Arguments = "{}"
		}
	}
	return out
}
