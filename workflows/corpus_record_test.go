package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// envRecordCorpus names the release whose replay corpus
// TestRecordReplayCorpus records (`make corpus RELEASE=v0.2.0`); unset, the
// test is skipped.
const envRecordCorpus = "TOLLGATE_RECORD_CORPUS"

// envRecordOnly, when set, records only the scenarios whose names contain
// it (`make corpus RELEASE=unreleased ONLY=conversation-compaction`), for
// histories of paths newer than the last corpus (docs/versioning.md).
const envRecordOnly = "TOLLGATE_RECORD_ONLY"

// corpusWait bounds every wait of the recorder for a workflow to reach a
// state.
const corpusWait = 30 * time.Second

// TestRecordReplayCorpus runs every path of ChatTurn, Conversation and
// Subagent on a real dev server and writes their histories, and the event
// logs their turns served, into testdata/replay/<release>. Paused turns are
// recorded while they wait, as a deployment finds them.
func TestRecordReplayCorpus(t *testing.T) {
	release := os.Getenv(envRecordCorpus)
	if release == "" {
		t.Skip("set " + envRecordCorpus + "=<release> (make corpus) to record a replay corpus")
	}
	dir := filepath.Join(corpusDir, release)
	only := os.Getenv(envRecordOnly)
	if only == "" {
		// A whole corpus starts afresh; one scenario joins the others.
		require.NoError(t, os.RemoveAll(dir))
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	r := newRecorder(t, dir)

	for _, s := range []struct {
		name   string
		record func()
	}{
		{"update", r.recordDecisionsByUpdate},
		{"signal", r.recordDecisionsBySignal},
		{"timeout", r.recordTimeoutWithNotices},
		{"interrupt", r.recordInterruptByNewMessage},
		{"cancel", r.recordCancel},
		{"client-tool", r.recordClientTool},
		{"subagent", r.recordSubagent},
		{"continue-as-new", r.recordContinueAsNew},
		{"policy", r.recordPolicyRules},
		{"paused", r.recordPausedTurn},
		{"paused-subagent", r.recordPausedSubagent},
		{"bypass", r.recordBypassWithAnAlwaysRule},
		{"refused", r.recordRefusedArguments},
		{"protected-client-tool", r.recordProtectedClientTool},
		{"compaction", r.recordCompaction},
		{"seat", r.recordApproversSeat},
		{"keyed-retry", r.recordKeyedRetry},
		{"conversation-compaction", r.recordConversationCompaction},
		{"batch-decision", r.recordBatchDecision},
	} {
		if strings.Contains(s.name, only) {
			s.record()
		}
	}

	commit, err := exec.Command("git", "rev-parse", release+"^{commit}").Output()
	if err != nil {
		commit, err = exec.Command("git", "rev-parse", "HEAD").Output()
		require.NoError(t, err)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, corpusCommitFile), commit, 0o644))
}

// Task queues of the recorder's workers, one per set of settings.
const (
	queueDefault  = "corpus"
	queueTimeout  = "corpus-timeout"
	queueAgents   = "corpus-agents"
	queueContinue = "corpus-continue"
	queuePolicy   = "corpus-policy"
	queueStrict   = "corpus-strict"
	queueCompact  = "corpus-compact"
	queueSeat     = "corpus-seat"
	queueWindow   = "corpus-window"
	queueLedger   = "corpus-ledger"
)

// recorder is a dev server with workers of today's code, a scripted model
// that answers by the user message, and the folder it records into.
type recorder struct {
	t   *testing.T
	c   client.Client
	dir string
}

func newRecorder(t *testing.T, dir string) *recorder {
	srv := devserver.ForTest(t)
	c, err := srv.Dial()
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), corpusWait)
	defer cancel()
	require.NoError(t, workflows.EnsureSearchAttributes(ctx, c, srv.Namespace, slog.New(slog.DiscardHandler)))

	// Small chunks with pauses, so that answers reach turns as token
	// batches while the model still answers.
	model := httptest.NewServer(scripted.New(corpusScript, scripted.ChunkDelay(10*time.Millisecond)))
	t.Cleanup(model.Close)
	notices := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(notices.Close)
	workspace := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(workspace, "README.md"), []byte("# corpus\n"), 0o644))
	tools := &activities.Tools{Workspace: workspace, BashTimeout: 10 * time.Second}
	base := workflows.Settings{
		RequiredTools:    []string{protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash},
		ApprovalTimeout:  time.Hour,
		Tools:            tools.Specs(),
		WorkspaceRoots:   []string{workspace},
		SearchAttributes: true,
	}
	ledger, err := auditdb.Open(ctx, filepath.Join(t.TempDir(), "audit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { ledger.Close() })
	start := func(queue string, change func(*workflows.Settings)) {
		s := base
		if change != nil {
			change(&s)
		}
		w := worker.New(c, queue, workflows.WorkerOptions())
		m := activities.NewModel(model.URL+"/v1", "test", scripted.ModelName, workflows.TokenSignaler{Client: c})
		m.FlushInterval = 20 * time.Millisecond
		tl := *tools
		if s.Audit {
			tl.Ledger, m.Ledger = ledger, ledger
		}
		workflows.Register(w, &workflows.Workflows{Settings: s}, m, &tl)
		if s.Notify {
			workflows.RegisterNotifier(w, &activities.Notifier{URL: notices.URL})
		}
		if s.Audit {
			workflows.RegisterAuditor(w, &activities.Auditor{Ledger: ledger})
		}
		require.NoError(t, w.Start())
		t.Cleanup(w.Stop)
	}
	start(queueDefault, nil)
	start(queueSeat, func(s *workflows.Settings) {
		s.Audit, s.Budgets = true, contract.Budgets{TurnToolCalls: 1}
	})
	start(queueTimeout, func(s *workflows.Settings) { s.ApprovalTimeout, s.Notify = 3*time.Second, true })
	start(queueAgents, func(s *workflows.Settings) {
		s.Agents = []workflows.AgentDef{{
			Name: "helper", Description: "writes notes", Tools: []string{protocol.ToolRead, protocol.ToolWrite},
			Prompt: "You write the notes you are asked for.",
		}}
	})
	start(queueContinue, func(s *workflows.Settings) { s.TurnsPerRun = 1 })
	start(queuePolicy, func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolBash, Require: workflows.RequireWhen, When: `args.command.startsWith("rm")`},
			{Tool: protocol.ToolWrite, Require: workflows.RequireNever},
		}
	})
	start(queueCompact, func(s *workflows.Settings) { s.ContextBudget = 4000 })
	start(queueWindow, func(s *workflows.Settings) { s.ContextBudget = 3000 })
	start(queueLedger, func(s *workflows.Settings) { s.Audit = true })
	require.NoError(t, os.WriteFile(filepath.Join(workspace, "big.txt"), []byte(strings.Repeat("a line of a big file\n", 300)), 0o644))
	start(queueStrict, func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolBash, Require: workflows.RequireAlways},
			{Tool: "Pay", Require: workflows.RequireWhen, When: `args.amount > 0`},
		}
	})
	return &recorder{t: t, c: c, dir: dir}
}

// corpusReplies are the model's answers by the user message (a turn's, or
// a subagent's prompt), one per step.
var corpusReplies = map[string][]scripted.Reply{
	"update: write and run": {
		{Content: "Reading, writing and running.", ToolCalls: []protocol.ToolCall{
			readCall("u1r"), writeCall("u1w", "notes/a.txt"), bashCall("u1b", "echo one"),
		}},
		{Content: "Done."},
	},
	"update: again": {
		{ToolCalls: []protocol.ToolCall{writeCall("u2w", "notes/b.txt"), bashCall("u2b", "echo two")}},
		{Content: "Done again."},
	},
	"signal: write and run": {
		{Content: "Writing and running.", ToolCalls: []protocol.ToolCall{writeCall("s1w", "notes/s.txt"), bashCall("s1b", "echo signal")}},
		{Content: "One ran, one did not."},
	},
	"timeout: write": {
		{ToolCalls: []protocol.ToolCall{writeCall("t1w", "notes/t.txt")}},
		{Content: "Nobody answered."},
	},
	"interrupt: first":   {{ToolCalls: []protocol.ToolCall{writeCall("i1w", "notes/i.txt")}}, {Content: "Never read."}},
	"interrupt: second":  {{Content: "The second message's answer."}},
	"cancel: write":      {{ToolCalls: []protocol.ToolCall{writeCall("c1w", "notes/c.txt")}}, {Content: "Never read."}},
	"client: pay":        {{ToolCalls: []protocol.ToolCall{{ID: "p1", Name: "Pay", Arguments: `{"amount":5}`}}}, {Content: "Paid."}},
	"subagent: delegate": {{ToolCalls: []protocol.ToolCall{taskCall("d1", "subagent prompt: write")}}, {Content: "The helper wrote it."}},
	"subagent prompt: write": {
		{ToolCalls: []protocol.ToolCall{writeCall("h1w", "notes/helper.txt")}},
		{Content: "Written by the helper."},
	},
	"continue: first":  {{Content: "First."}},
	"keyed: once":      {{Content: "Once."}},
	"continue: second": {{Content: "Second."}},
	"policy: calls": {
		{ToolCalls: []protocol.ToolCall{bashCall("r1a", "ls"), bashCall("r1b", "rm -f nothing.txt"), writeCall("r1c", "notes/r.txt")}},
		{Content: "Policy done."},
	},
	"paused: write and run": {
		{Content: "Writing and running.", ToolCalls: []protocol.ToolCall{writeCall("w1w", "notes/p.txt"), bashCall("w1b", "echo paused")}},
		{Content: "Both decided."},
	},
	"subagent: paused": {{ToolCalls: []protocol.ToolCall{taskCall("d2", "subagent prompt: pause")}}, {Content: "The helper is done."}},
	"bypass: calls": {
		{ToolCalls: []protocol.ToolCall{writeCall("b1w", "notes/bypass.txt"), bashCall("b1b", "echo always")}},
		{Content: "Bypassed, but asked for Bash."},
	},
	"refused: calls": {
		{ToolCalls: []protocol.ToolCall{
			{ID: "x1b", Name: protocol.ToolBash, Arguments: `{"command":"echo hi","Command":"rm -rf ."}`},
			writeCall("x1w", "notes/refused.txt"),
		}},
		{Content: "One refused, one declined."},
	},
	"client: protected pay": {{ToolCalls: []protocol.ToolCall{{ID: "q1", Name: "Pay", Arguments: `{"amount":50}`}}}, {Content: "Paid after approval."}},
	"compaction: read": {
		{ToolCalls: []protocol.ToolCall{{ID: "k1", Name: protocol.ToolRead, Arguments: `{"file_path":"big.txt"}`}}},
		{Content: strings.Repeat("The file has many lines about a big file. ", 120)},
	},
	"compaction: again":      {{Content: "From the summary: it was a big file."}},
	"window: first":          {{Content: strings.Repeat("A long first answer. ", 72)}},
	"window: second":         {{Content: strings.Repeat("A long second answer. ", 68)}},
	"window: third":          {{Content: "Third, from the summary."}},
	"window: fourth":         {{Content: "Fourth, reading the same summary."}},
	"window: fifth":          {{Content: "Fifth, after a person's compaction."}},
	"subagent prompt: pause": {{ToolCalls: []protocol.ToolCall{writeCall("h2w", "notes/paused.txt")}}, {Content: "Paused and done."}},
	"seat: first":            {{ToolCalls: []protocol.ToolCall{bashCall("g1", "git status")}}, {Content: "Status shown."}},
	"batch: three": {
		{ToolCalls: []protocol.ToolCall{writeCall("bd1", "notes/d1.txt"), writeCall("bd2", "notes/d2.txt"), bashCall("bd3", "echo batch")}},
		{Content: "Decided together."},
	},
	"seat: second": {{ToolCalls: []protocol.ToolCall{bashCall("g2", "git log")}}, {Content: "Log shown."}},
}

// corpusScript answers with corpusReplies: the reply for the last user
// message, at the step that the assistant messages after it count.
func corpusScript(req openai.ChatCompletionRequest) scripted.Reply {
	if len(req.Messages) > 0 && strings.HasPrefix(req.Messages[0].Content, "Summarize the conversation") {
		return scripted.Reply{Content: "The user had big.txt read; it is a big file."}
	}
	if len(req.Messages) > 0 && strings.HasPrefix(req.Messages[0].Content, "You keep the running summary") {
		return scripted.Reply{Content: "The user sent numbered messages; the answers were long."}
	}
	query, step := "", 0
	for _, m := range req.Messages {
		switch m.Role {
		case openai.ChatMessageRoleUser:
			query, step = m.Content, 0
		case openai.ChatMessageRoleAssistant:
			step++
		}
	}
	replies, ok := corpusReplies[query]
	if !ok {
		return scripted.Reply{Status: http.StatusBadRequest, Content: "the corpus script has no reply to " + query}
	}
	return replies[min(step, len(replies)-1)]
}

func readCall(id string) protocol.ToolCall {
	return protocol.ToolCall{ID: id, Name: protocol.ToolRead, Arguments: `{"file_path":"README.md"}`}
}

func writeCall(id, path string) protocol.ToolCall {
	args, _ := json.Marshal(map[string]string{"file_path": path, "content": "a note\n"})
	return protocol.ToolCall{ID: id, Name: protocol.ToolWrite, Arguments: string(args)}
}

func bashCall(id, command string) protocol.ToolCall {
	args, _ := json.Marshal(map[string]string{"command": command})
	return protocol.ToolCall{ID: id, Name: protocol.ToolBash, Arguments: string(args)}
}

func taskCall(id, prompt string) protocol.ToolCall {
	args, _ := json.Marshal(map[string]string{"subagent_type": "helper", "description": "write a note", "prompt": prompt})
	return protocol.ToolCall{ID: id, Name: protocol.TaskTool, Arguments: string(args)}
}

// recordApproversSeat: a worker with the audit ledger and a budget of one
// tool call a turn. Turn 1's Bash is approved with a limited, scoped grant,
// and its spent budget raised; turn 2's Bash is answered by the grant (a
// SideEffect evaluates its scope) and its budget raised again.
func (r *recorder) recordApproversSeat() {
	const conv = "corpus-seat"
	turn1 := r.send(queueSeat, conv, contract.UserMessage{Query: "seat: first"})
	reqs := r.requests(turn1.TurnID, 1)
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionApprove, Remember: protocol.RememberConversation,
		RememberUses: 2, RememberFor: "1h", RememberWhen: `args.command.startsWith("git ")`})
	reqs = r.requests(turn1.TurnID, 2)
	require.Equal(r.t, protocol.KindBudget, reqs[1].Kind)
	r.decideByUpdate(reqs[1], protocol.ApprovalDecision{Decision: protocol.DecisionApprove})
	r.finished(turn1.TurnID)
	// The next message must find the conversation idle, which it is one
	// workflow task after its turn ends; sooner, it queues behind the turn
	// and is answered at once.
	r.idle(contract.ConversationWorkflowID(conv), turn1.TurnID)

	turn2 := r.send(queueSeat, conv, contract.UserMessage{Query: "seat: second"})
	reqs = r.requests(turn2.TurnID, 1)
	require.Equal(r.t, protocol.KindBudget, reqs[0].Kind, "the grant answered the Bash call; only the budget asks")
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionApprove, Arguments: `{"raiseTo":5}`})
	r.finished(turn2.TurnID)

	r.record("seat.conversation", contract.ConversationWorkflowID(conv), "")
	r.record("seat.turn-1", turn1.TurnID, "")
	r.record("seat.turn-2", turn2.TurnID, "")
}

func (r *recorder) recordDecisionsByUpdate() {
	const conv = "corpus-update"
	turn1 := r.send(queueDefault, conv, contract.UserMessage{Query: "update: write and run"})
	reqs := r.requests(turn1.TurnID, 2)
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionApprove, Remember: protocol.RememberConversation})
	r.decideByUpdate(reqs[1], protocol.ApprovalDecision{Decision: protocol.DecisionDecline, Reason: "not now"})
	r.finished(turn1.TurnID)

	// The Write grant decides the next Write; the Bash call is approved
	// with edited arguments.
	turn2 := r.send(queueDefault, conv, contract.UserMessage{Query: "update: again"})
	reqs = r.requests(turn2.TurnID, 1)
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionApprove, Arguments: `{"command":"echo edited"}`})
	r.finished(turn2.TurnID)

	r.record("update.conversation", contract.ConversationWorkflowID(conv), "")
	r.record("update.turn-1", turn1.TurnID, "")
	r.record("update.turn-2", turn2.TurnID, "")
}

func (r *recorder) recordDecisionsBySignal() {
	turn := r.send(queueDefault, "corpus-signal", contract.UserMessage{Query: "signal: write and run"})
	reqs := r.requests(turn.TurnID, 2)
	r.decideBySignal(reqs[1], protocol.ApprovalDecision{Decision: protocol.DecisionApprove})
	r.decideBySignal(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionDecline, Reason: "no notes today"})
	r.finished(turn.TurnID)
	r.record("signal.turn-1", turn.TurnID, "")
}

// recordBatchDecision: a batch of three, on a worker with the ledger, the
// first call decided alone, the other two with one approvals Update.
func (r *recorder) recordBatchDecision() {
	turn := r.send(queueLedger, "corpus-batch", contract.UserMessage{Query: "batch: three"})
	reqs := r.requests(turn.TurnID, 3)
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionApprove, Principal: "ann"})
	batch := protocol.ApprovalBatch{Decisions: []protocol.ApprovalDecision{
		{RequestID: reqs[1].RequestID, Decision: protocol.DecisionDecline, Reason: "not this one", Principal: "ann"},
		{RequestID: reqs[2].RequestID, Decision: protocol.DecisionApprove, Principal: "ann"},
	}}
	var res protocol.ApprovalBatchResult
	r.update(turn.TurnID, contract.ApprovalsUpdate, batch, &res)
	require.True(r.t, res.Accepted)
	r.finished(turn.TurnID)
	r.record("batch-decision.turn-1", turn.TurnID, "")
}

func (r *recorder) recordTimeoutWithNotices() {
	turn := r.send(queueTimeout, "corpus-timeout", contract.UserMessage{Query: "timeout: write"})
	r.requests(turn.TurnID, 1)
	r.finished(turn.TurnID)
	r.record("timeout.turn-1", turn.TurnID, "")
}

func (r *recorder) recordInterruptByNewMessage() {
	const conv = "corpus-interrupt"
	turn1 := r.send(queueDefault, conv, contract.UserMessage{Query: "interrupt: first"})
	r.requests(turn1.TurnID, 1)
	turn2 := r.send(queueDefault, conv, contract.UserMessage{Query: "interrupt: second"})
	r.finished(turn1.TurnID)
	r.finished(turn2.TurnID)
	r.record("interrupt.conversation", contract.ConversationWorkflowID(conv), "")
	r.record("interrupt.turn-1", turn1.TurnID, "")
	r.record("interrupt.turn-2", turn2.TurnID, "")
}

func (r *recorder) recordCancel() {
	const conv = "corpus-cancel"
	turn := r.send(queueDefault, conv, contract.UserMessage{Query: "cancel: write"})
	r.requests(turn.TurnID, 1)
	ctx, cancel := context.WithTimeout(context.Background(), corpusWait)
	defer cancel()
	require.NoError(r.t, r.c.CancelWorkflow(ctx, turn.TurnID, ""))
	r.finished(turn.TurnID)
	r.record("cancel.conversation", contract.ConversationWorkflowID(conv), "")
	r.record("cancel.turn-1", turn.TurnID, "")
}

// corpusPay is the client tool of the corpus's client-tool scenarios.
var corpusPay = protocol.ToolSpec{Name: "Pay", Description: "Pay an amount.", Parameters: json.RawMessage(
	`{"type":"object","properties":{"amount":{"type":"number"}},"required":["amount"]}`)}

func (r *recorder) recordClientTool() {
	turn := r.send(queueDefault, "corpus-client", contract.UserMessage{Query: "client: pay", ClientTools: []protocol.ToolSpec{corpusPay}})
	r.answerClientTool(turn.TurnID, "paid 5")
	r.finished(turn.TurnID)
	r.record("client-tool.turn-1", turn.TurnID, "")
}

// answerClientTool waits for the turn's client_tool_call and answers it.
func (r *recorder) answerClientTool(turnID, result string) {
	r.t.Helper()
	call := r.until(turnID, func(events []protocol.Event) bool {
		return len(ofType(events, protocol.EventClientToolCall)) == 1
	})
	req := ofType(call, protocol.EventClientToolCall)[0]
	r.update(req.WorkflowID, contract.ClientToolResultUpdate, contract.ClientToolResult{RequestID: req.RequestID, Result: result}, nil)
}

func (r *recorder) recordSubagent() {
	const conv = "corpus-subagent"
	turn := r.send(queueAgents, conv, contract.UserMessage{Query: "subagent: delegate"})
	reqs := r.requests(turn.TurnID, 1)
	require.Equal(r.t, contract.SubagentWorkflowID(turn.TurnID, 1), reqs[0].WorkflowID, "the subagent asks")
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionApprove})
	r.finished(turn.TurnID)
	r.record("subagent.conversation", contract.ConversationWorkflowID(conv), "")
	r.record("subagent.turn-1", turn.TurnID, "")
	r.record("subagent.subagent-1", reqs[0].WorkflowID, "")
}

func (r *recorder) recordContinueAsNew() {
	const conv = "corpus-continue"
	id := contract.ConversationWorkflowID(conv)
	turn1 := r.send(queueContinue, conv, contract.UserMessage{Query: "continue: first"})
	firstRun := r.runID(r.t, id)
	r.finished(turn1.TurnID)
	var secondRun string
	require.EventuallyWithT(r.t, func(c *assert.CollectT) {
		secondRun = r.runID(c, id)
		assert.NotEqual(c, firstRun, secondRun, "the conversation continued as new")
	}, corpusWait, 20*time.Millisecond)
	turn2 := r.send(queueContinue, conv, contract.UserMessage{Query: "continue: second"})
	r.finished(turn2.TurnID)
	// The second run continues as new after its turn too.
	require.EventuallyWithT(r.t, func(c *assert.CollectT) {
		assert.NotEqual(c, secondRun, r.runID(c, id))
	}, corpusWait, 20*time.Millisecond)
	r.record("continue-as-new.conversation-run-1", id, firstRun)
	r.record("continue-as-new.conversation-run-2", id, secondRun)
	r.record("continue-as-new.turn-2", turn2.TurnID, "")
}

// recordKeyedRetry: a message with an idempotency key, sent again once
// the run that took it has continued as new, gets its turn back and queues
// none (the idempotent-messages patch: its marker is in the second run).
func (r *recorder) recordKeyedRetry() {
	const conv = "corpus-keyed"
	id := contract.ConversationWorkflowID(conv)
	msg := contract.UserMessage{Query: "keyed: once", IdempotencyKey: contract.MessageKey("corpus", "key-1")}
	turn := r.send(queueContinue, conv, msg)
	firstRun := r.runID(r.t, id)
	r.finished(turn.TurnID)
	require.EventuallyWithT(r.t, func(c *assert.CollectT) {
		assert.NotEqual(c, firstRun, r.runID(c, id), "the conversation continued as new")
	}, corpusWait, 20*time.Millisecond)
	require.Equal(r.t, turn, r.send(queueContinue, conv, msg), "the retry gets the message's turn")
	r.record("keyed-retry.conversation-run-1", id, firstRun)
	r.record("keyed-retry.conversation-run-2", id, "")
}

func (r *recorder) recordPolicyRules() {
	turn := r.send(queuePolicy, "corpus-policy", contract.UserMessage{Query: "policy: calls"})
	reqs := r.requests(turn.TurnID, 1)
	require.Equal(r.t, "r1b", reqs[0].ToolCallID, "only rm asks")
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionApprove})
	r.finished(turn.TurnID)
	r.record("policy.turn-1", turn.TurnID, "")
}

// recordPausedTurn leaves a turn as a deployment finds it: one call of its
// batch decided, the other waiting.
func (r *recorder) recordPausedTurn() {
	const conv = "corpus-paused"
	turn := r.send(queueDefault, conv, contract.UserMessage{Query: "paused: write and run"})
	reqs := r.requests(turn.TurnID, 2)
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionApprove})
	r.until(turn.TurnID, func(events []protocol.Event) bool {
		return len(ofType(events, protocol.EventApprovalDecision)) == 1
	})
	r.record("paused.conversation", contract.ConversationWorkflowID(conv), "")
	r.record("paused.turn-1", turn.TurnID, "")
}

func (r *recorder) recordPausedSubagent() {
	const conv = "corpus-paused-subagent"
	turn := r.send(queueAgents, conv, contract.UserMessage{Query: "subagent: paused"})
	reqs := r.requests(turn.TurnID, 1)
	r.record("paused-subagent.conversation", contract.ConversationWorkflowID(conv), "")
	r.record("paused-subagent.turn-1", turn.TurnID, "")
	r.record("paused-subagent.subagent-1", reqs[0].WorkflowID, "")
}

// send hands msg to the conversation as the API does: update-with-start.
func (r *recorder) send(queue, conv string, msg contract.UserMessage) contract.TurnRef {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), corpusWait)
	defer cancel()
	start := r.c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       contract.ConversationWorkflowID(conv),
		TaskQueue:                queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, contract.ConversationWorkflow, contract.ConversationInput{ConversationID: conv})
	h, err := r.c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: contract.SendMessageUpdate, Args: []any{msg}, WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	require.NoError(r.t, err)
	var ref contract.TurnRef
	require.NoError(r.t, h.Get(ctx, &ref))
	return ref
}

// until polls the events of workflow id until done holds for them.
func (r *recorder) until(id string, done func([]protocol.Event) bool) []protocol.Event {
	r.t.Helper()
	var events []protocol.Event
	require.Eventually(r.t, func() bool {
		events = queryEvents(r.t, r.c, id)
		return done(events)
	}, corpusWait, 20*time.Millisecond, "workflow %s did not reach the state the recorder waits for", id)
	return events
}

// requests waits for n approval requests in the turn's stream (a
// subagent's included) and returns them.
func (r *recorder) requests(turnID string, n int) []protocol.Event {
	r.t.Helper()
	events := r.until(turnID, func(events []protocol.Event) bool { return len(approvalRequests(events)) >= n })
	return approvalRequests(events)
}

func approvalRequests(events []protocol.Event) []protocol.Event {
	var reqs []protocol.Event
	for _, e := range events {
		if e.Type == protocol.EventApprovalRequest || e.Type == protocol.EventSubagentPrefix+protocol.EventApprovalRequest {
			reqs = append(reqs, e)
		}
	}
	return reqs
}

func ofType(events []protocol.Event, typ string) []protocol.Event {
	var out []protocol.Event
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) decideByUpdate(req protocol.Event, d protocol.ApprovalDecision) {
	r.t.Helper()
	d.RequestID = req.RequestID
	var res protocol.ApprovalResult
	r.update(req.WorkflowID, contract.ApprovalUpdate, d, &res)
	require.True(r.t, res.Accepted)
}

func (r *recorder) decideBySignal(req protocol.Event, d protocol.ApprovalDecision) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), corpusWait)
	defer cancel()
	d.RequestID = req.RequestID
	require.NoError(r.t, r.c.SignalWorkflow(ctx, req.WorkflowID, "", contract.ApprovalSignal, d))
}

func (r *recorder) update(id, name string, arg, result any) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), corpusWait)
	defer cancel()
	h, err := r.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(r.t, err)
	require.NoError(r.t, h.Get(ctx, result))
}

// finished waits for the turn to start, if it has not yet (a queued
// message's turn starts when the one before it ends), and to close.
func (r *recorder) finished(id string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), corpusWait)
	defer cancel()
	require.Eventually(r.t, func() bool {
		_, err := r.c.DescribeWorkflow(ctx, id, "")
		return err == nil
	}, corpusWait, 20*time.Millisecond, "turn %s starts", id)
	require.NoError(r.t, r.c.GetWorkflow(ctx, id, "").Get(ctx, nil), "turn %s", id)
}

// idle waits until conversation id has taken the end of its turn turnID:
// its history holds the child's completion and no workflow task is
// pending after it.
func (r *recorder) idle(id, turnID string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), corpusWait)
	defer cancel()
	require.EventuallyWithT(r.t, func(c *assert.CollectT) {
		// History first: the task that the child's end schedules is over
		// once a description read after it shows none pending.
		ended := false
		for _, e := range r.history(ctx, c, id, "").GetEvents() {
			if a := e.GetChildWorkflowExecutionCompletedEventAttributes(); a != nil && a.GetWorkflowExecution().GetWorkflowId() == turnID {
				ended = true
			}
		}
		require.True(c, ended, "conversation %s has the end of %s", id, turnID)
		resp, err := r.c.DescribeWorkflow(ctx, id, "")
		require.NoError(c, err)
		assert.Nil(c, resp.RawResponse.GetPendingWorkflowTask(), "conversation %s is between tasks", id)
	}, corpusWait, 20*time.Millisecond)
}

// history is the whole history of run runID of workflow id (its latest
// run when runID is ""); it fails t, which may be a wait's collector.
func (r *recorder) history(ctx context.Context, t require.TestingT, id, runID string) *historypb.History {
	return fetchHistory(ctx, t, r.c, id, runID)
}

// runID is the current run of workflow id; it fails t, which is the wait's
// collector inside a wait.
func (r *recorder) runID(t require.TestingT, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), corpusWait)
	defer cancel()
	resp, err := r.c.DescribeWorkflow(ctx, id, "")
	require.NoError(t, err)
	return resp.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// record writes the history of workflow id (its latest run unless runID
// says otherwise) to <name>.json, once no workflow task is pending, and,
// for a turn or a subagent, the events its query serves to
// <name>.events.json.
func (r *recorder) record(name, id, runID string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), corpusWait)
	defer cancel()
	if runID == "" {
		require.EventuallyWithT(r.t, func(c *assert.CollectT) {
			resp, err := r.c.DescribeWorkflow(ctx, id, "")
			require.NoError(c, err)
			assert.Nil(c, resp.RawResponse.GetPendingWorkflowTask(), "workflow %s is between tasks", id)
		}, corpusWait, 20*time.Millisecond)
	}
	history := r.history(ctx, r.t, id, runID)
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(history)
	require.NoError(r.t, err)
	require.NoError(r.t, os.WriteFile(filepath.Join(r.dir, name+".json"), b, 0o644))

	if strings.Contains(name, ".turn-") || strings.Contains(name, ".subagent-") {
		v, err := r.c.QueryWorkflow(ctx, id, runID, contract.EventsQuery, contract.EventsRequest{})
		require.NoError(r.t, err)
		var resp contract.EventsResponse
		require.NoError(r.t, v.Get(&resp))
		b, err := json.MarshalIndent(resp.Events, "", "  ")
		require.NoError(r.t, err)
		require.NoError(r.t, os.WriteFile(filepath.Join(r.dir, name+eventsSuffix), b, 0o644))
	}
}

// recordBypassWithAnAlwaysRule: a bypassed turn runs Write unasked, but a
// rule that says always still asks for Bash.
func (r *recorder) recordBypassWithAnAlwaysRule() {
	turn := r.send(queueStrict, "corpus-bypass", contract.UserMessage{Query: "bypass: calls", BypassApproval: true})
	reqs := r.requests(turn.TurnID, 1)
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionApprove, Principal: "root", Role: "admin"})
	r.finished(turn.TurnID)
	r.record("bypass.turn-1", turn.TurnID, "")
}

// recordRefusedArguments: a call whose keys differ only in case is refused
// and never asks; the other call asks and is declined.
func (r *recorder) recordRefusedArguments() {
	turn := r.send(queueDefault, "corpus-refused", contract.UserMessage{Query: "refused: calls"})
	reqs := r.requests(turn.TurnID, 1)
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionDecline})
	r.finished(turn.TurnID)
	r.record("refused.turn-1", turn.TurnID, "")
}

// recordProtectedClientTool: a client tool the policy protects asks before
// its call is handed to the client.
func (r *recorder) recordProtectedClientTool() {
	turn := r.send(queueStrict, "corpus-protected-client", contract.UserMessage{Query: "client: protected pay", ClientTools: []protocol.ToolSpec{corpusPay}})
	reqs := r.requests(turn.TurnID, 1)
	r.decideByUpdate(reqs[0], protocol.ApprovalDecision{Decision: protocol.DecisionApprove})
	r.answerClientTool(turn.TurnID, "paid 50")
	r.finished(turn.TurnID)
	r.record("protected-client-tool.turn-1", turn.TurnID, "")
}

// recordCompaction: a conversation whose second turn compacts its view:
// the first turn's tool output left out, then the first turn summarized.
func (r *recorder) recordCompaction() {
	const conv = "corpus-compaction"
	turn1 := r.send(queueCompact, conv, contract.UserMessage{Query: "compaction: read"})
	r.finished(turn1.TurnID)
	turn2 := r.send(queueCompact, conv, contract.UserMessage{Query: "compaction: again"})
	r.finished(turn2.TurnID)
	events := r.until(turn2.TurnID, contract.Finished)
	require.NotEmpty(r.t, ofType(events, protocol.EventContextCompacted))
	r.record("compaction.conversation", contract.ConversationWorkflowID(conv), "")
	r.record("compaction.turn-1", turn1.TurnID, "")
	r.record("compaction.turn-2", turn2.TurnID, "")
}

// recordConversationCompaction: a conversation whose third turn folds the
// first into a summary the conversation keeps, whose fourth reads it
// without summarizing again, and which a person then compacts, with
// instructions, before the fifth.
func (r *recorder) recordConversationCompaction() {
	const conv = "corpus-conversation-compaction"
	var turns []contract.TurnRef
	for _, q := range []string{"window: first", "window: second", "window: third", "window: fourth"} {
		turn := r.send(queueWindow, conv, contract.UserMessage{Query: q})
		r.finished(turn.TurnID)
		r.idle(contract.ConversationWorkflowID(conv), turn.TurnID)
		turns = append(turns, turn)
	}
	third := r.until(turns[2].TurnID, contract.Finished)
	require.Equal(r.t, 2, ofType(third, protocol.EventContextCompacted)[0].Summarized, "turn 3 summarized turn 1")
	ctx, cancel := context.WithTimeout(context.Background(), corpusWait)
	defer cancel()
	h, err := r.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: contract.ConversationWorkflowID(conv), UpdateName: contract.CompactUpdate,
		Args: []any{protocol.CompactRequest{Instructions: "keep the numbers"}}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(r.t, err)
	var res protocol.CompactResult
	require.NoError(r.t, h.Get(ctx, &res))
	require.True(r.t, res.Compacted)
	fifth := r.send(queueWindow, conv, contract.UserMessage{Query: "window: fifth"})
	r.finished(fifth.TurnID)
	r.idle(contract.ConversationWorkflowID(conv), fifth.TurnID)
	r.record("conversation-compaction.conversation", contract.ConversationWorkflowID(conv), "")
	for i, turn := range append(turns, fifth) {
		r.record(fmt.Sprintf("conversation-compaction.turn-%d", i+1), turn.TurnID, "")
	}
}
