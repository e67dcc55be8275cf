package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

// sandboxScript makes a batch of Bash calls, one of each command (the
// first's id is call_sh, the next ones call_sh1, ...), then answers
// "Done.".
func sandboxScript(commands ...string) scripted.Script {
	return func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Done."}
		}
		var calls []protocol.ToolCall
		for i, command := range commands {
			args, _ := json.Marshal(map[string]string{"command": command})
			id := "call_sh"
			if i > 0 {
				id += strconv.Itoa(i)
			}
			calls = append(calls, protocol.ToolCall{ID: id, Name: protocol.ToolBash, Arguments: string(args)})
		}
		return scripted.Reply{ToolCalls: calls}
	}
}

// requireSandbox fails a test on a machine where the sandbox cannot start:
// .ci/run installs bubblewrap, as it installs chromium for the console's.
func requireSandbox(t *testing.T) {
	t.Helper()
	require.NoError(t, activities.BashSandbox(), "the Bash sandbox cannot start here: apt-get install bubblewrap")
}

func withSandbox() stackOption {
	return withSettings(func(s *workflows.Settings) { s.BashSandbox = protocol.SandboxPreview })
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestASandboxedCommandShowsWhatItChangedAndAnApproveAppliesExactlyThat(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	const command = `printf 'new\n' > added.txt && printf '# changed\n' > README.md && rm gone.txt && mkdir -p sub && printf 'x' > sub/x.txt && echo ran`
	st := newStack(t, withScript(sandboxScript(command)), withSandbox())
	require.NoError(t, os.WriteFile(filepath.Join(st.workspace, "gone.txt"), []byte("bye\n"), 0o644))
	before := readFile(t, filepath.Join(st.workspace, "README.md"))

	_, msgs := st.chat(t, `{"query": "change things", "conversationId": "sandbox-apply"}`)
	seq := 0
	req := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	require.NotNil(t, req.Sandbox, "the request carries the sandboxed run")
	require.Equal(t, 0, req.Sandbox.ExitCode)
	require.Contains(t, req.Sandbox.Output, "ran")
	ops := map[string]string{}
	for _, c := range req.Sandbox.Changes {
		ops[c.Path] = c.Op
		require.Nil(t, c.Content, "events carry no contents")
	}
	require.Equal(t, map[string]string{
		"added.txt": protocol.ChangeAdded, "README.md": protocol.ChangeChanged, "gone.txt": protocol.ChangeDeleted, "sub/x.txt": protocol.ChangeAdded,
	}, onlyFiles(ops, req.Sandbox.Changes))
	require.Contains(t, req.Preview, "README.md")

	// Nothing of it is in the workspace until a person approves.
	require.Equal(t, before, readFile(t, filepath.Join(st.workspace, "README.md")))
	require.NoFileExists(t, filepath.Join(st.workspace, "added.txt"))
	require.FileExists(t, filepath.Join(st.workspace, "gone.txt"))

	postDecision(t, st.api, req.RequestID, protocol.DecisionApprove, "", true)
	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	results := ofType(rest, protocol.EventToolResult)[0].ToolResults
	require.Equal(t, []string{"call_sh Bash ok"}, resultStatuses(results))
	require.Contains(t, results[0].Result, "ran", "the model reads the run's output")

	require.Equal(t, "# changed\n", readFile(t, filepath.Join(st.workspace, "README.md")))
	require.Equal(t, "new\n", readFile(t, filepath.Join(st.workspace, "added.txt")))
	require.Equal(t, "x", readFile(t, filepath.Join(st.workspace, "sub", "x.txt")))
	require.NoFileExists(t, filepath.Join(st.workspace, "gone.txt"))
}

// onlyFiles keeps the changes of files (not of folders) of ops.
func onlyFiles(ops map[string]string, changes []protocol.FileChange) map[string]string {
	out := map[string]string{}
	for _, c := range changes {
		if c.Kind != "dir" {
			out[c.Path] = ops[c.Path]
		}
	}
	return out
}

func TestADeclinedSandboxedCommandLeavesTheWorkspaceAsItWas(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	st := newStack(t, withScript(sandboxScript(`rm -rf ./* && echo wiped`)), withSandbox())
	before := readFile(t, filepath.Join(st.workspace, "README.md"))

	_, msgs := st.chat(t, `{"query": "wipe", "conversationId": "sandbox-decline"}`)
	seq := 0
	req := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	require.NotEmpty(t, req.Sandbox.Changes)
	postDecision(t, st.api, req.RequestID, protocol.DecisionDecline, "no", true)
	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, []string{"call_sh Bash declined"}, resultStatuses(ofType(rest, protocol.EventToolResult)[0].ToolResults))
	require.Equal(t, before, readFile(t, filepath.Join(st.workspace, "README.md")))
}

func TestAChangeMadeUnderASandboxedRunIsRefusedAndTheRestApplied(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	st := newStack(t, withScript(sandboxScript(`printf 'sandbox\n' > README.md && printf 'b\n' > b.txt`)), withSandbox())

	_, msgs := st.chat(t, `{"query": "edit", "conversationId": "sandbox-conflict"}`)
	seq := 0
	req := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	// Someone edits the file while the call waits.
	require.NoError(t, os.WriteFile(filepath.Join(st.workspace, "README.md"), []byte("meanwhile\n"), 0o644))
	postDecision(t, st.api, req.RequestID, protocol.DecisionApprove, "", true)

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	result := ofType(rest, protocol.EventToolResult)[0].ToolResults[0].Result
	require.Contains(t, result, "README.md", "the model is told which file was refused: %s", result)
	require.Equal(t, "meanwhile\n", readFile(t, filepath.Join(st.workspace, "README.md")), "the later change is kept")
	require.Equal(t, "b\n", readFile(t, filepath.Join(st.workspace, "b.txt")), "the other change applied")
}

func TestAnUnconfinedApproveRunsTheCommandForRealWhereTheSandboxRefusedIt(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	outside := filepath.Join(t.TempDir(), "outside.txt")
	st := newStack(t, withScript(sandboxScript("printf real > "+outside)), withSandbox())

	_, msgs := st.chat(t, `{"query": "write outside", "conversationId": "sandbox-unconfined"}`)
	seq := 0
	req := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	require.NotEqual(t, 0, req.Sandbox.ExitCode, "the sandbox refused the write outside the workspace: %+v", req.Sandbox)
	require.NoFileExists(t, outside)

	status, body := st.postJSON(t, "/chat/approval", `{"requestId":"`+req.RequestID+`","decision":"decline","unconfined":true}`)
	require.Equal(t, 400, status, "unconfined is an approve's: %v", body)
	status, body = st.postJSON(t, "/chat/approval", `{"requestId":"`+req.RequestID+`","decision":"approve","unconfined":true}`)
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, true, body["accepted"], "%v", body)

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	decision := ofType(rest, protocol.EventApprovalDecision)[0]
	require.True(t, decision.Unconfined, "the decision says it ran unconfined")
	require.Equal(t, "real", readFile(t, outside))
}

func TestConsoleShowsASandboxedRunsChangesAndAppliesOrRunsItUnconfinedByClick(t *testing.T) {
	requireSandbox(t)
	outside := filepath.Join(t.TempDir(), "outside.txt")
	st := newStack(t, withScript(sandboxScript(`printf 'hello\n' > hello.txt && echo made`, "printf real > "+outside)), withSandbox())
	b := newBrowser(t)
	b.do(chromedp.Navigate(st.api.URL + "/"))
	sendFromConsole(b, "make things")
	turn := nthTurn(1)
	b.waitUntil(count(turn+` [data-testid="sandbox"]`) + ` === 2`)

	// The first call's card lists what its run changed, and its output.
	first := fmt.Sprintf(`%s .call[data-call-id="call_sh"]`, turn)
	change := eval[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsQuote(first+` [data-testid="sandbox-change"][data-op="added"]`)))
	require.Contains(t, change, "hello.txt")
	require.Contains(t, change, "+ hello", "with its diff")
	require.NoFileExists(t, filepath.Join(st.workspace, "hello.txt"), "nothing is applied before the click")
	b.screenshot("console-sandboxed")

	b.do(chromedp.Click(chromedp.CSS(first + ` [data-testid="approve"]`)))
	b.waitUntil(count(first+` [data-testid="approval-actions"]:not([hidden])`) + ` === 0`)
	second := fmt.Sprintf(`%s .call[data-call-id="call_sh1"]`, turn)
	b.do(chromedp.Click(chromedp.CSS(second + ` [data-testid="approve-unconfined"]`)))
	b.do(chromedp.WaitVisible(chromedp.CSS(turn + ` [data-testid="finish"]`)))

	require.Equal(t, "hello\n", readFile(t, filepath.Join(st.workspace, "hello.txt")), "Apply applied the run's change")
	require.Equal(t, "real", readFile(t, outside), "Run unconfined ran the command for real")
}

// A run's changes travel in the activity's result, which Temporal caps at
// 2 MB a payload: past that they go through the payload store, and an
// approve still applies every byte.
func TestASandboxedRunPastTemporalsPayloadLimitIsAppliedWhole(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	const size = 3 << 20
	st := newStack(t, withScript(sandboxScript(fmt.Sprintf(`head -c %d /dev/zero | tr '\0' 'a' > big.txt`, size))), withSandbox(), withPayloadStore())

	_, msgs := st.chat(t, `{"query": "make a big file", "conversationId": "sandbox-big"}`)
	seq := 0
	req := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	require.Len(t, req.Sandbox.Changes, 1)
	require.Equal(t, int64(size), req.Sandbox.Changes[0].Size)
	require.Empty(t, req.Sandbox.TooLarge)
	postDecision(t, st.api, req.RequestID, protocol.DecisionApprove, "", true)
	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, []string{"call_sh Bash ok"}, resultStatuses(ofType(rest, protocol.EventToolResult)[0].ToolResults))
	info, err := os.Stat(filepath.Join(st.workspace, "big.txt"))
	require.NoError(t, err)
	require.Equal(t, int64(size), info.Size())
}

// With sandbox: auto and "writes outside docs/ ask", what a command really
// did decides, not its text: a sed on docs/ applies unasked, the same sed
// on src/ asks, over HTTP with the real sandbox, and the ledger says who
// decided each.
func TestWithSandboxAutoWhatACommandReallyChangedDecidesWhetherItAsks(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	st := newStack(t, withScript(sandboxScript(`sed -i s/old/new/ docs/a.md`, `f=docs; sed -i s/old/new/ ${f/docs/src}/main.go`)), withSandbox(),
		withSettings(func(s *workflows.Settings) {
			s.Rules = []workflows.Rule{
				{Tool: protocol.ToolBash, Require: policy.RequireAlways, Sandbox: policy.SandboxAuto},
				{Tool: protocol.ToolWrite, Require: policy.RequireWhen, When: `!args.file_path.startsWith("docs/")`},
			}
		}))
	for _, f := range []string{"docs/a.md", "src/main.go"} {
		require.NoError(t, os.MkdirAll(filepath.Join(st.workspace, filepath.Dir(f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(st.workspace, f), []byte("old\n"), 0o644))
	}

	_, msgs := st.chat(t, `{"query": "rename old to new", "conversationId": "sandbox-auto"}`)
	seq := 0
	first := untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1)
	req := lastOf(first)
	require.Equal(t, "call_sh1", req.ToolCallID, "only the command that wrote src/ asks, whatever its text")
	var contained []string
	for _, e := range ofType(first, protocol.EventApprovalDecision) {
		contained = append(contained, e.ToolCallID+" by "+e.By)
	}
	require.Equal(t, []string{"call_sh by " + workflows.DecidedBySandbox}, contained)
	require.Equal(t, "old\n", readFile(t, filepath.Join(st.workspace, "docs/a.md")), "nothing applies before the batch runs")

	postDecision(t, st.api, req.RequestID, protocol.DecisionApprove, "", true)
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, "new\n", readFile(t, filepath.Join(st.workspace, "docs/a.md")))
	require.Equal(t, "new\n", readFile(t, filepath.Join(st.workspace, "src/main.go")))

	rows := map[string]audit.Record{}
	page, err := st.ledger.List(t.Context(), auditdb.Filter{Conversation: "sandbox-auto"})
	require.NoError(t, err)
	for _, r := range page.Records {
		rows[r.ToolCallID] = r
	}
	require.Equal(t, workflows.DecidedBySandbox, rows["call_sh"].DecidedBy)
	require.Equal(t, audit.SandboxApplied, rows["call_sh"].Sandbox)
	require.Equal(t, workflows.DecidedByPerson, rows["call_sh1"].DecidedBy)
	require.Equal(t, audit.SandboxApplied, rows["call_sh1"].Sandbox)
}

// TestWorkerKilledDuringASandboxedRunLeavesNoProcessOfIt runs the worker
// binary with the sandbox, and a command that starts sleeps named by a
// marker, kills its parent and starts one more: the worker is killed
// while the run goes on, and every process of it must end with the worker.
func TestWorkerKilledDuringASandboxedRunLeavesNoProcessOfIt(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	if testing.Short() {
		t.Skip("builds the worker and starts a Temporal dev server")
	}
	marker := fmt.Sprintf("tollgate-sandbox-orphan-%d-%d", os.Getpid(), time.Now().UnixNano())
	sleeper := "(exec -a " + marker + " sleep 300) & "
	command := sleeper + "(setsid bash -c 'exec -a " + marker + " sleep 300' &); kill -9 $PPID; " + sleeper + "sleep 300"
	waitForBuild := proctest.Build(t, "github.com/tollgate/tollgate/worker")
	st := newStack(t, withScript(sandboxScript(command)), withoutWorker())
	bin := waitForBuild()
	worker := proctest.Start(t, "worker", bin, st.workerEnv(config.EnvBashSandbox+"="+protocol.SandboxPreview, config.EnvMetricsAddr+"=off"))
	t.Cleanup(func() {
		for _, pid := range processesNamed(marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	st.chat(t, `{"query": "sleep", "conversationId": "sandbox-worker-killed"}`)
	require.Eventually(t, func() bool { return len(processesNamed(marker)) == 3 }, waitFor, 20*time.Millisecond,
		"the command started its three sleeps in the sandbox, the last after it killed its parent: %v", processesNamed(marker))
	worker.Crash(t)

	require.Eventually(t, func() bool { return len(processesNamed(marker)) == 0 }, 10*time.Second, 20*time.Millisecond,
		"processes of the killed worker's sandboxed run kept running: %v", processesNamed(marker))
}

// processesNamed lists the live processes of the host whose argv[0] is
// name, whatever PID namespace they run in.
func processesNamed(name string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A zombie has no command line: it is gone.
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(cmdline), name+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// pathWithout is a PATH of one folder holding links to the programs of
// PATH named in keep, and to nothing else: a worker run with it finds no
// other program.
func pathWithout(t *testing.T, keep ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range keep {
		path, err := exec.LookPath(name)
		require.NoError(t, err)
		require.NoError(t, os.Symlink(path, filepath.Join(dir, name)))
	}
	return "PATH=" + dir
}

func TestATurnBegunWithTheSandboxKeepsItOnAWorkerThatCannotStartOne(t *testing.T) {
	// The operator moves the turn's worker to a machine without bwrap
	// while its first call waits: the approve applies the run made on the
	// first machine, and the next call, which the turn still runs in the
	// sandbox as it began, asks as without one, saying so.
	t.Parallel()
	requireSandbox(t)
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		switch countRole(req.Messages, openai.ChatMessageRoleTool) {
		case 0:
			return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: "call_a", Name: protocol.ToolBash, Arguments: `{"command":"printf a > a.txt"}`}}}
		case 1:
			return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: "call_b", Name: protocol.ToolBash, Arguments: `{"command":"printf b > b.txt"}`}}}
		}
		return scripted.Reply{Content: "Done."}
	}
	st := newStack(t, withScript(script), withoutWorker())
	first := st.startTestWorker(t, "worker-1", st.workerSettings(func(s *workflows.Settings) { s.BashSandbox = protocol.SandboxPreview }))
	_, msgs := st.chat(t, `{"query": "write", "conversationId": "sandbox-moved"}`)
	seq := 0
	req := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	require.True(t, req.Sandbox.Ran(), "%+v", req.Sandbox)
	first.Stop(t)

	// bwrap is missing here: its worker records no sandbox mode in the
	// turns it begins (worker/main.go's bashSandbox), and the probe fails.
	st.startTestWorkerWith(t, "worker-2", st.workerSettings(nil), pathWithout(t, "bash", "sh", "unshare", "prlimit", "mount"))
	postDecision(t, st.api, req.RequestID, protocol.DecisionApprove, "", true)
	next := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	require.Equal(t, "call_b", next.ToolCallID)
	require.NotNil(t, next.Sandbox)
	require.False(t, next.Sandbox.Ran())
	require.Contains(t, next.Preview, "(not run in the sandbox: ")
	require.Contains(t, next.Preview, "bwrap")
	require.Equal(t, "a", readFile(t, filepath.Join(st.workspace, "a.txt")), "the first call's run was applied where no sandbox can start")
	require.NoFileExists(t, filepath.Join(st.workspace, "b.txt"))

	status, body := st.postJSON(t, "/chat/approval", `{"requestId":"`+next.RequestID+`","decision":"approve","unconfined":true}`)
	require.Equal(t, 400, status, "unconfined is for a call that ran in the sandbox: %v", body)
	postDecision(t, st.api, next.RequestID, protocol.DecisionApprove, "", true)
	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, []string{"call_b Bash ok"}, resultStatuses(ofType(rest, protocol.EventToolResult)[0].ToolResults))
	require.Equal(t, "b", readFile(t, filepath.Join(st.workspace, "b.txt")), "an approve ran it as without a sandbox, as its preview said")
}

func TestABatchOfDecisionsMayRunOneSandboxedCallUnconfinedAndApplyAnother(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	outside := filepath.Join(t.TempDir(), "outside.txt")
	st := newStack(t, withScript(sandboxScript("printf real > "+outside, "printf in > in.txt")), withSandbox())
	_, msgs := st.chat(t, `{"query": "write", "conversationId": "sandbox-batch"}`)
	seq := 0
	reqs := ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2), protocol.EventApprovalRequest)
	require.Len(t, reqs, 2)

	status, body := st.postJSON(t, "/chat/approvals", fmt.Sprintf(`{"decisions":[{"requestId":%q,"decision":"approve","unconfined":true},{"requestId":%q,"decision":"approve","arguments":{"command":"printf edited > in.txt"}}]}`,
		reqs[0].RequestID, reqs[1].RequestID))
	require.Equal(t, 400, status, "an edit of a sandboxed command needs unconfined, and the batch is taken all or none: %v", body)
	status, body = st.postJSON(t, "/chat/approvals", fmt.Sprintf(`{"decisions":[{"requestId":%q,"decision":"approve","unconfined":true},{"requestId":%q,"decision":"approve"}]}`,
		reqs[0].RequestID, reqs[1].RequestID))
	require.Equal(t, 200, status, "%v", body)

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	unconfined := map[string]bool{}
	for _, e := range ofType(rest, protocol.EventApprovalDecision) {
		unconfined[e.ToolCallID] = e.Unconfined
	}
	require.Equal(t, map[string]bool{"call_sh": true, "call_sh1": false}, unconfined)
	require.Equal(t, "real", readFile(t, outside))
	require.Equal(t, "in", readFile(t, filepath.Join(st.workspace, "in.txt")))
}

// Running a sandboxed command unconfined is a decision like any other:
// under second_person, the sender's own token may not make it, over HTTP
// with two real tokens, and another person's may.
func TestOnlyASecondPersonMayRunTheSendersSandboxedCommandUnconfined(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	outside := filepath.Join(t.TempDir(), "outside.txt")
	st := newStack(t, withScript(sandboxScript("printf real > "+outside)), withSandbox(), withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{{Tool: protocol.ToolBash, Require: workflows.RequireAlways, SecondPerson: true}}
	}))
	const devToken, leadToken = "dev-0123456789abcdef", "lead-0123456789abcde"
	o := st.apiOptions()
	o.Tokens = []config.APIToken{
		{Token: devToken, Principal: "dev", Roles: config.DefaultRoles},
		{Token: leadToken, Principal: "lead", Roles: []string{config.RoleApprove}},
	}
	api := serveAPI(t, NewServer(o))

	_, msgs := chatAs(t, api, devToken, `{"query": "write outside", "conversationId": "sandbox-second-person"}`)
	seq := 0
	req := lastOf(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))
	require.True(t, req.Sandbox.Ran())
	decide := func(token string) string {
		resp, body := send(t, http.MethodPost, api.URL+"/chat/approval", "Bearer "+token, `{"requestId":"`+req.RequestID+`","decision":"approve","unconfined":true}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		return body
	}
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decide(devToken), "the sender may not run their own command unconfined")
	require.NoFileExists(t, outside)
	require.JSONEq(t, `{"accepted":true}`, decide(leadToken))

	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	d := ofType(events, protocol.EventApprovalDecision)[0]
	require.Equal(t, "lead", d.By)
	require.True(t, d.Unconfined)
	require.Equal(t, "real", readFile(t, outside))
}
