package scripted

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// DemoIntro is the text of the demo model's answer to a user message.
const DemoIntro = "I'll read the README, write a note and list the workspace."

// DemoNotePath is the file the demo model asks to write.
const DemoNotePath = "notes/tollgate.txt"

// Demo returns the built-in model of `make dev`. To a user message it answers
// DemoIntro and asks for three calls at once: Read README.md (unprotected),
// Write a note that quotes the message and Bash ls -la (both protected by the
// default policy). To the tool results it answers with a few sentences that
// say what became of each call, so that the answer streams in many chunks.
// The same request always gets the same reply; tool call ids are
// call_<n>_<i>, n the number of assistant messages so far and i the call's
// position, so they are unique within a conversation.
func Demo() Script {
	return func(req openai.ChatCompletionRequest) Reply {
		msgs := req.Messages
		if len(msgs) == 0 {
			return Reply{Content: "Send me a message and I will read the README, write a note and list the workspace."}
		}
		switch last := msgs[len(msgs)-1]; last.Role {
		case openai.ChatMessageRoleUser:
			query := messageText(last)
			if strings.Contains(strings.ToLower(query), "subagent") {
				if agent := firstSubagent(req.Tools); agent != "" {
					return demoTask(msgs, agent, query)
				}
			}
			return demoCalls(msgs, query, offered(req.Tools))
		case openai.ChatMessageRoleTool:
			return Reply{Content: demoSummary(msgs)}
		default:
			return Reply{Content: "I have nothing to add. Send a message and I will read the README, write a note and list the workspace again."}
		}
	}
}

// demoTurn counts the assistant messages so far, for unique call ids.
func demoTurn(msgs []openai.ChatCompletionMessage) int {
	turn := 0
	for _, m := range msgs {
		if m.Role == openai.ChatMessageRoleAssistant {
			turn++
		}
	}
	return turn
}

// offered reports which tools the request offers; a request that offers
// none is taken to offer every tool.
func offered(tools []openai.Tool) func(string) bool {
	return func(name string) bool {
		if len(tools) == 0 {
			return true
		}
		for _, t := range tools {
			if t.Function != nil && t.Function.Name == name {
				return true
			}
		}
		return false
	}
}

// firstSubagent is the first subagent the Task tool of the request lists,
// or "" when it offers no Task tool.
func firstSubagent(tools []openai.Tool) string {
	for _, t := range tools {
		if t.Function == nil || t.Function.Name != protocol.TaskTool {
			continue
		}
		var schema struct {
			Properties struct {
				SubagentType struct {
					Enum []string `json:"enum"`
				} `json:"subagent_type"`
			} `json:"properties"`
		}
		raw, err := json.Marshal(t.Function.Parameters)
		if err == nil && json.Unmarshal(raw, &schema) == nil && len(schema.Properties.SubagentType.Enum) > 0 {
			return schema.Properties.SubagentType.Enum[0]
		}
	}
	return ""
}

// demoTask hands the user's query to a subagent.
func demoTask(msgs []openai.ChatCompletionMessage, agent, query string) Reply {
	return Reply{
		Content: "I'll hand this to the " + agent + " subagent.",
		ToolCalls: []protocol.ToolCall{{
			ID:   fmt.Sprintf("call_%d_0", demoTurn(msgs)),
			Name: protocol.TaskTool,
			Arguments: marshal(struct {
				SubagentType string `json:"subagent_type"`
				Description  string `json:"description"`
				Prompt       string `json:"prompt"`
			}{agent, "demo task", query}),
		}},
	}
}

// demoCalls is the answer to the user's query: the intro and three calls,
// less those the request does not offer.
func demoCalls(msgs []openai.ChatCompletionMessage, query string, offers func(string) bool) Reply {
	turn := demoTurn(msgs)
	note := "A note from tollgate's demo model.\nYou asked: " + query + "\n"
	args := []struct {
		name string
		args any
	}{
		{protocol.ToolRead, struct {
			FilePath string `json:"file_path"`
		}{"README.md"}},
		{protocol.ToolWrite, struct {
			FilePath string `json:"file_path"`
			Content  string `json:"content"`
		}{DemoNotePath, note}},
		{protocol.ToolBash, struct {
			Command string `json:"command"`
		}{"ls -la"}},
	}
	reply := Reply{Content: DemoIntro}
	for i, a := range args {
		if !offers(a.name) {
			continue
		}
		reply.ToolCalls = append(reply.ToolCalls, protocol.ToolCall{
			ID:        fmt.Sprintf("call_%d_%d", turn, i),
			Name:      a.name,
			Arguments: marshal(a.args),
		})
	}
	return reply
}

// demoSummary says, one sentence per call, what became of the calls whose
// results end the conversation.
func demoSummary(msgs []openai.ChatCompletionMessage) string {
	first := len(msgs)
	for first > 0 && msgs[first-1].Role == openai.ChatMessageRoleTool {
		first--
	}
	results := msgs[first:]
	names := map[string]string{}
	if first > 0 {
		for _, c := range msgs[first-1].ToolCalls {
			names[c.ID] = c.Function.Name
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "Here is what came of the %s I asked for.", count(len(results), "tool call"))
	declined := 0
	for _, r := range results {
		name := r.Name
		if name == "" {
			name = names[r.ToolCallID]
		}
		if name == "" {
			name = "The call " + r.ToolCallID
		}
		content := strings.TrimSpace(r.Content)
		switch {
		case strings.HasPrefix(content, protocol.DeclinedResponse):
			declined++
			reason := strings.TrimSpace(strings.TrimPrefix(content, protocol.DeclinedResponse))
			reason = strings.TrimSpace(strings.TrimPrefix(reason, "Reason:"))
			if reason != "" {
				fmt.Fprintf(&b, " %s was declined, with the reason %q, so it did not run.", name, reason)
			} else {
				fmt.Fprintf(&b, " %s was declined, so it did not run.", name)
			}
		case strings.HasPrefix(content, protocol.PersonDeclined):
			declined++
			if _, reason, ok := strings.Cut(content, protocol.TheirReason); ok {
				fmt.Fprintf(&b, " %s was declined, with the reason %q, so it did not run.", name, strings.TrimSpace(reason))
			} else {
				fmt.Fprintf(&b, " %s was declined, so it did not run.", name)
			}
		case strings.HasPrefix(content, protocol.TimeoutResponse), strings.HasPrefix(content, protocol.NoDecision):
			declined++
			fmt.Fprintf(&b, " %s got no decision in time, so it did not run.", name)
		case strings.HasPrefix(content, protocol.NotExecuted):
			declined++
			why, _, _ := strings.Cut(strings.TrimPrefix(content, protocol.NotExecuted), protocol.DoNotRetry)
			fmt.Fprintf(&b, " %s did not run: %s", name, why)
		case strings.HasPrefix(strings.ToLower(content), "error"):
			fmt.Fprintf(&b, " %s failed: %s.", name, strings.TrimSuffix(firstLine(content), "."))
		default:
			fmt.Fprintf(&b, " %s ran and returned %s.", name, describe(content))
		}
	}
	if declined > 0 {
		pronoun := "them"
		if declined == 1 {
			pronoun = "it"
		}
		fmt.Fprintf(&b, " So %s did not run, and I will not try %s again without your approval.",
			count(declined, "call"), pronoun)
	} else {
		b.WriteString(" Everything I asked for ran.")
	}
	b.WriteString(" That is all for this turn; send another message and I will try the same three calls again.")
	return b.String()
}

// describe quotes the start of a tool's output and says how long it is.
func describe(output string) string {
	if output == "" {
		return "nothing"
	}
	line := firstLine(output)
	if r := []rune(line); len(r) > 60 {
		line = string(r[:60]) + "…"
	}
	lines := strings.Count(output, "\n") + 1
	if lines == 1 {
		return fmt.Sprintf("%q", line)
	}
	return fmt.Sprintf("%s starting with %q", count(lines, "line"), line)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// count says how many of noun there are: "1 call", "3 calls".
func count(n int, noun string) string {
	return fmt.Sprintf("%d %s", n, text.Plural(n, noun))
}

// messageText returns a message's text, also when it came as content parts.
func messageText(m openai.ChatCompletionMessage) string {
	if m.Content != "" || len(m.MultiContent) == 0 {
		return m.Content
	}
	var parts []string
	for _, p := range m.MultiContent {
		if p.Type == openai.ChatMessagePartTypeText {
			parts = append(parts, p.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// marshal encodes v as compact JSON without escaping <, > and &, so that the
// arguments read as the model would write them.
func marshal(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // the demo's argument structs always encode
	}
	return strings.TrimSuffix(buf.String(), "\n")
}
