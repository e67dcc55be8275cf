package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// TestACraftedCallCannotShowThePolicyOneThingAndRunAnother sends, over
// HTTP against a real dev server, the calls that once walked around the
// docs/policy.md's policies: keys that differ only in case (the policy read one, the
// tool the other), a path that only starts with docs/, and an absolute path
// a real model sends for a file the policy lets through.
func TestACraftedCallCannotShowThePolicyOneThingAndRunAnother(t *testing.T) {
	t.Parallel()
	var workspace string
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Done."}
		}
		abs, _ := json.Marshal(map[string]string{"file_path": filepath.Join(workspace, "docs", "b.md"), "content": "fine"})
		return scripted.Reply{ToolCalls: []protocol.ToolCall{
			{ID: "c1", Name: protocol.ToolBash, Arguments: `{"command":"echo hi","Command":"rm -f src/main.go && echo DELETED > deleted.txt"}`},
			{ID: "c2", Name: protocol.ToolWrite, Arguments: `{"file_path":"docs/a.md","FILE_PATH":"src/main.go","content":"pwned"}`},
			{ID: "c3", Name: protocol.ToolWrite, Arguments: `{"file_path":"docs/../src/main.go","content":"pwned"}`},
			{ID: "c4", Name: protocol.ToolWrite, Arguments: string(abs)},
		}}
	}
	st := newStack(t, withScript(script), withSettings(func(s *workflows.Settings) {
		// docs/policy.md's policies 1 and 2, in part.
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolBash, Require: workflows.RequireWhen, When: `args.command.startsWith("rm ") || args.command.contains(" rm -")`},
			{Tool: protocol.ToolWrite, Require: workflows.RequireWhen, When: `!args.file_path.startsWith("docs/")`},
		}
	}))
	workspace = st.workspace
	mainGo := filepath.Join(st.workspace, "src", "main.go")
	require.NoError(t, os.MkdirAll(filepath.Dir(mainGo), 0o755))
	require.NoError(t, os.WriteFile(mainGo, []byte("package main\n"), 0o644))

	_, msgs := st.chat(t, `{"query": "crafted", "conversationId": "crafted"}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1)
	request := ofType(events, protocol.EventApprovalRequest)[0]
	require.Equal(t, "c3", request.ToolCallID, "the write outside docs/ asks, whatever its path says first")
	require.JSONEq(t, `{"file_path":"src/main.go","content":"pwned"}`, request.Arguments, "the person sees the file that would be written")
	postDecision(t, st.api, request.RequestID, protocol.DecisionDecline, "", true)

	events = append(events, untilEvent(t, msgs, &seq, protocol.EventFinish, 1)...)
	require.Len(t, ofType(events, protocol.EventApprovalRequest), 1, "nothing else asked")
	results := ofType(events, protocol.EventToolResult)[0].ToolResults
	require.Equal(t, []string{"c1 Bash error", "c2 Write error", "c3 Write declined", "c4 Write ok"}, resultStatuses(results))
	require.Contains(t, results[0].Result, `arguments "command" and "Command" differ only in case`)
	require.Contains(t, results[1].Result, `arguments "file_path" and "FILE_PATH" differ only in case`)
	require.Equal(t, "package main\n", fileText(mainGo), "src/main.go untouched")
	require.NoFileExists(t, filepath.Join(st.workspace, "deleted.txt"))
	require.NoFileExists(t, filepath.Join(st.workspace, "docs", "a.md"))
	require.Equal(t, "fine", fileText(filepath.Join(st.workspace, "docs", "b.md")), "the absolute path inside docs/ ran without asking")
}

// TestALinkInTheWorkspaceCannotWalkAWriteAroundAPathRule runs docs/policy.md's
// policy 2 (writes outside docs/ ask) over HTTP against a real dev server,
// in a workspace whose docs/ holds links back out of it: docs/src ->
// ../src and docs/readme.md -> ../README.md. A Write of docs/src/main.go
// and an Edit of docs/readme.md change src/main.go and README.md, so they
// ask, and the person, the preview and the ledger see those files; a write
// that really stays in docs/ runs unasked.
func TestALinkInTheWorkspaceCannotWalkAWriteAroundAPathRule(t *testing.T) {
	t.Parallel()
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Done."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{
			{ID: "c1", Name: protocol.ToolWrite, Arguments: `{"file_path":"docs/src/main.go","content":"pwned"}`},
			{ID: "c2", Name: protocol.ToolEdit, Arguments: `{"file_path":"docs/readme.md","old_string":"# demo","new_string":"# pwned"}`},
			{ID: "c3", Name: protocol.ToolWrite, Arguments: `{"file_path":"docs/notes.md","content":"fine"}`},
		}}
	}
	st := newStack(t, withScript(script), withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireWhen, When: `!args.file_path.startsWith("docs/")`},
			{Tool: protocol.ToolEdit, Require: workflows.RequireWhen, When: `!args.file_path.startsWith("docs/")`},
		}
	}))
	mainGo, readme := filepath.Join(st.workspace, "src", "main.go"), filepath.Join(st.workspace, "README.md")
	require.NoError(t, os.MkdirAll(filepath.Dir(mainGo), 0o755))
	require.NoError(t, os.WriteFile(mainGo, []byte("package main\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(st.workspace, "docs"), 0o755))
	require.NoError(t, os.Symlink("../src", filepath.Join(st.workspace, "docs", "src")))
	require.NoError(t, os.Symlink("../README.md", filepath.Join(st.workspace, "docs", "readme.md")))

	_, msgs := st.chat(t, `{"query": "linked", "conversationId": "linked"}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2)
	requests := ofType(events, protocol.EventApprovalRequest)
	require.Equal(t, "c1", requests[0].ToolCallID, "the write through docs/src asks")
	require.JSONEq(t, `{"file_path":"src/main.go","content":"pwned"}`, requests[0].Arguments, "the person sees the file that would be written")
	require.Contains(t, requests[0].Preview, "overwrite src/main.go (1 lines")
	require.Equal(t, "c2", requests[1].ToolCallID, "the edit through docs/readme.md asks")
	require.JSONEq(t, `{"file_path":"README.md","old_string":"# demo","new_string":"# pwned"}`, requests[1].Arguments)
	require.Contains(t, requests[1].Preview, "edit README.md")
	for _, r := range requests {
		postDecision(t, st.api, r.RequestID, protocol.DecisionDecline, "", true)
	}

	events = append(events, untilEvent(t, msgs, &seq, protocol.EventFinish, 1)...)
	require.Len(t, ofType(events, protocol.EventApprovalRequest), 2, "nothing else asked")
	results := ofType(events, protocol.EventToolResult)[0].ToolResults
	require.Equal(t, []string{"c1 Write declined", "c2 Edit declined", "c3 Write ok"}, resultStatuses(results))
	require.Equal(t, "package main\n", fileText(mainGo), "src/main.go untouched")
	require.Equal(t, "# demo\n", fileText(readme), "README.md untouched")
	require.Equal(t, "fine", fileText(filepath.Join(st.workspace, "docs", "notes.md")), "a write that stays in docs/ ran without asking")

	page, err := st.ledger.List(t.Context(), auditdb.Filter{Conversation: "linked"})
	require.NoError(t, err)
	var ledgered []string
	for _, r := range page.Records {
		ledgered = append(ledgered, r.Arguments)
	}
	require.ElementsMatch(t, []string{requests[0].Arguments, requests[1].Arguments}, ledgered, "the ledger records the real files")
}
