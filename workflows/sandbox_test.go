package workflows

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// sandboxed is a harness whose turns run protected Bash calls in the
// sandbox first, with stand-ins for the sandbox's two activities that
// record what they were given.
type sandboxed struct {
	*harness
	// runs are the calls the sandbox ran; applied the runs applied.
	runs    []protocol.ToolCall
	applied []activities.SandboxApplyInput
	// answer is what a run answers.
	answer func(protocol.ToolCall) protocol.SandboxRun
}

// aRun is what `sed -i` on two files does in the sandbox.
func aRun(c protocol.ToolCall) protocol.SandboxRun {
	return protocol.SandboxRun{
		Command: c.Arguments, ExitCode: 0, Output: "done\n",
		Changes: []protocol.FileChange{
			{Path: "src/main.go", Op: protocol.ChangeChanged, Kind: "file", Before: "abc", Content: []byte("package main\n"), Size: 13, Diff: "-old\n+new"},
			{Path: "gone.txt", Op: protocol.ChangeDeleted, Kind: "file", Before: "def"},
		},
		Preview: "ran in the sandbox: exit 0\nchanged src/main.go\ndeleted gone.txt",
	}
}

func newSandboxed(t *testing.T, settings Settings, replies ...activities.ModelOutput) *sandboxed {
	settings.BashSandbox = protocol.SandboxPreview
	s := &sandboxed{harness: newHarness(t, settings, replies...), answer: aRun}
	s.env.RegisterActivityWithOptions(func(_ context.Context, in activities.ToolInput) (protocol.SandboxRun, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.runs = append(s.runs, in.Call)
		return s.answer(in.Call), nil
	}, activity.RegisterOptions{Name: activities.SandboxBashActivity})
	s.env.RegisterActivityWithOptions(func(_ context.Context, in activities.SandboxApplyInput) (activities.ToolOutput, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.applied = append(s.applied, in)
		return activities.ToolOutput{Status: protocol.StatusOK, Result: "done\napplied 2 changes"}, nil
	}, activity.RegisterOptions{Name: activities.ApplySandboxActivity})
	return s
}

func TestASandboxedCallShowsWhatItChangedAndItsApproveAppliesThatNotTheCommand(t *testing.T) {
	s := newSandboxed(t, testSettings(), calls(
		call("r", protocol.ToolRead, `{"file_path":"a.txt"}`),
		call("b", protocol.ToolBash, `{"command":"sed -i s/old/new/ src/main.go; rm gone.txt"}`),
	))
	s.env.RegisterDelayedCallback(func() {
		req := findEvent(t, s.events(), protocol.EventApprovalRequest)
		require.Equal(t, aRun(protocol.ToolCall{}).Preview, req.Preview, "the request shows the run as the worker wrote it")
		require.NotNil(t, req.Sandbox)
		require.Len(t, req.Sandbox.Changes, 2)
		require.Equal(t, "-old\n+new", req.Sandbox.Changes[0].Diff)
		require.Nil(t, req.Sandbox.Changes[0].Content, "events carry no contents")
		s.decide(protocol.ApprovalDecision{RequestID: req.RequestID, Decision: protocol.DecisionApprove})
	}, time.Second)

	out := s.runTurn(userTurn("fix it"))

	require.Equal(t, []string{protocol.ToolRead}, s.ranTools(), "Bash itself never ran")
	require.Len(t, s.runs, 1, "only the protected Bash call ran in the sandbox")
	require.Len(t, s.applied, 1)
	require.Equal(t, []byte("package main\n"), s.applied[0].Run.Changes[0].Content, "the apply gets the contents the run made")
	require.Equal(t, "b", s.applied[0].Call.ID)
	require.Equal(t, "done\napplied 2 changes", toolMessages(out.Messages)[1].Content)
}

func TestADeclinedSandboxedCallNeitherAppliesNorRuns(t *testing.T) {
	settings := testSettings()
	settings.Audit = true
	s := newSandboxed(t, settings, calls(call("b", protocol.ToolBash, `{"command":"rm -rf src"}`)))
	l := withLedger(t, s.harness, 0)
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflow(contract.PendingQuery)
		require.NoError(t, err)
		var pending []protocol.PendingApproval
		require.NoError(t, v.Get(&pending))
		require.Len(t, pending, 1)
		require.True(t, pending[0].Sandboxed, "the inbox knows an approve applies the run")
		require.Equal(t, audit.SandboxPreview, ledgerRows(t, l)["b"].Sandbox, "and so does the ledger's asked row")
		s.decide(protocol.ApprovalDecision{RequestID: s.requestID(protocol.ToolBash), Decision: protocol.DecisionDecline, Reason: "no"})
	}, time.Second)

	out := s.runTurn(userTurn("clean"))
	require.Equal(t, audit.SandboxPreview, ledgerRows(t, l)["b"].Sandbox, "it ran in the sandbox, and nothing was applied")

	require.Len(t, s.runs, 1)
	require.Empty(t, s.applied)
	require.Empty(t, s.ranTools())
	require.Contains(t, toolMessages(out.Messages)[0].Content, "Not executed")
}

func TestAnUnconfinedApproveRunsTheCommandForRealAndIsRecorded(t *testing.T) {
	settings := testSettings()
	settings.Audit = true
	s := newSandboxed(t, settings, calls(
		call("b1", protocol.ToolBash, `{"command":"curl -fsS https://example.com"}`),
		call("b2", protocol.ToolBash, `{"command":"go test ./..."}`),
	))
	l := withLedger(t, s.harness, 0)
	var edited *updateOutcome
	s.env.RegisterDelayedCallback(func() {
		var ids []string
		for _, e := range s.events() {
			if e.Type == protocol.EventApprovalRequest {
				ids = append(ids, e.RequestID)
			}
		}
		require.Len(t, ids, 2)
		// An edited command was never run in the sandbox: approving it
		// as if it had been is refused, naming the way that works.
		edited = s.decide(protocol.ApprovalDecision{RequestID: ids[0], Decision: protocol.DecisionApprove, Arguments: `{"command":"curl https://example.org"}`})
		s.decide(protocol.ApprovalDecision{RequestID: ids[0], Decision: protocol.DecisionApprove, Unconfined: true, Arguments: `{"command":"curl https://example.org"}`, Principal: "bob"})
		s.decide(protocol.ApprovalDecision{RequestID: ids[1], Decision: protocol.DecisionApprove, Principal: "bob"})
	}, time.Second)

	out := s.runTurn(userTurn("fetch and test"))

	require.True(t, edited.done)
	require.ErrorContains(t, edited.rejected, "unconfined")
	require.Len(t, s.toolCalls, 1, "only the unconfined call ran for real")
	require.JSONEq(t, `{"command":"curl https://example.org"}`, s.toolCalls[0].Arguments)
	require.Len(t, s.applied, 1)
	require.Equal(t, "b2", s.applied[0].Call.ID)
	var unconfined int
	for _, e := range out.Events {
		if e.Type == protocol.EventApprovalDecision && e.Unconfined {
			unconfined++
		}
	}
	require.Equal(t, 1, unconfined, "the decision event says it was unconfined")
	rows := ledgerRows(t, l)
	require.Equal(t, audit.SandboxUnconfined, rows["b1"].Sandbox)
	require.Equal(t, audit.SandboxApplied, rows["b2"].Sandbox)
	require.Equal(t, audit.OutcomeOK, rows["b2"].Outcome)
	require.Contains(t, rows["b2"].Preview, "changed src/main.go", "the ledger keeps the change list the person saw")
}

func TestUnconfinedIsRefusedForACallThatDidNotRunInTheSandbox(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("b", protocol.ToolBash, `{"command":"make"}`)))
	var o *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		o = h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove, Unconfined: true})
	}, time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove})
	}, 2*time.Second)

	h.runTurn(userTurn("build"))

	require.True(t, o.done)
	require.ErrorContains(t, o.rejected, "did not")
	require.Equal(t, []string{protocol.ToolBash}, h.ranTools())
}

func TestACallTheSandboxCouldNotRunSaysSoAndAsksAsWithoutIt(t *testing.T) {
	s := newSandboxed(t, testSettings(), calls(call("b", protocol.ToolBash, `{"command":"make"}`)))
	s.answer = func(protocol.ToolCall) protocol.SandboxRun {
		return protocol.SandboxRun{Unavailable: "bwrap is not installed"}
	}
	s.env.RegisterDelayedCallback(func() {
		req := findEvent(t, s.events(), protocol.EventApprovalRequest)
		require.True(t, strings.HasPrefix(req.Preview, "(not run in the sandbox: bwrap is not installed;"), req.Preview)
		require.True(t, strings.HasSuffix(req.Preview, "\npreview of Bash {\"command\":\"make\"}"), "and then the command as it will run: %s", req.Preview)
		s.decide(protocol.ApprovalDecision{RequestID: req.RequestID, Decision: protocol.DecisionApprove})
	}, time.Second)

	s.runTurn(userTurn("build"))

	require.Empty(t, s.applied)
	require.Equal(t, []string{protocol.ToolBash}, s.ranTools(), "an approve runs it as without a sandbox, as its preview said")
}

func TestWithoutTheSandboxModeNoCallRunsInTheSandbox(t *testing.T) {
	// A turn of a worker without the mode (or of any build before it)
	// records none in its settings, and runs nothing in the sandbox.
	s := newHarness(t, testSettings(), calls(call("b", protocol.ToolBash, `{"command":"make"}`)))
	s.env.RegisterActivityWithOptions(func(context.Context, activities.ToolInput) (protocol.SandboxRun, error) {
		t.Error("the sandbox ran a call of a turn without the mode")
		return protocol.SandboxRun{}, nil
	}, activity.RegisterOptions{Name: activities.SandboxBashActivity})
	s.env.RegisterDelayedCallback(func() {
		req := findEvent(t, s.events(), protocol.EventApprovalRequest)
		require.Nil(t, req.Sandbox)
		s.decide(protocol.ApprovalDecision{RequestID: req.RequestID, Decision: protocol.DecisionApprove})
	}, time.Second)

	s.runTurn(userTurn("build"))

	require.Equal(t, []string{protocol.ToolBash}, s.ranTools())
}

func TestOnlyProtectedBashCallsRunInTheSandbox(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{{Tool: protocol.ToolBash, Require: RequireWhen, When: `args.command != "ls"`}}
	s := newSandboxed(t, settings, calls(
		call("ls", protocol.ToolBash, `{"command":"ls"}`),
		call("w", protocol.ToolWrite, `{"file_path":"a.txt","content":"x"}`),
		call("rm", protocol.ToolBash, `{"command":"rm a.txt"}`),
	))
	s.env.RegisterDelayedCallback(func() {
		for _, e := range s.events() {
			if e.Type == protocol.EventApprovalRequest {
				require.Equal(t, e.ToolName == protocol.ToolBash, e.Sandbox != nil, "%s", e.ToolName)
				s.decide(protocol.ApprovalDecision{RequestID: e.RequestID, Decision: protocol.DecisionApprove})
			}
		}
	}, time.Second)

	s.runTurn(userTurn("tidy"))

	require.Len(t, s.runs, 1)
	require.Equal(t, "rm", s.runs[0].ID)
	require.Equal(t, []string{protocol.ToolBash, protocol.ToolWrite}, s.ranTools(), "ls runs unasked as before, Write as before")
	require.Len(t, s.applied, 1)
}

func TestWithSandboxAutoAContainedCallRunsUnaskedAndOneThatTouchesAProtectedFileAsks(t *testing.T) {
	settings := testSettings()
	settings.Audit = true
	settings.Rules = []Rule{
		{Tool: protocol.ToolBash, Require: RequireAlways, Sandbox: policy.SandboxAuto},
		{Tool: protocol.ToolWrite, Require: RequireWhen, When: `!args.file_path.startsWith("docs/")`},
	}
	s := newSandboxed(t, settings, calls(
		call("test", protocol.ToolBash, `{"command":"go test ./..."}`),
		call("docs", protocol.ToolBash, `{"command":"sed -i s/a/b/ docs/a.md"}`),
		call("src", protocol.ToolBash, `{"command":"sed -i s/a/b/ src/main.go"}`),
		call("move", protocol.ToolBash, `{"command":"mv src/x.go docs/x.go"}`),
		call("big", protocol.ToolBash, `{"command":"make dist"}`),
	))
	s.answer = func(c protocol.ToolCall) protocol.SandboxRun {
		run := protocol.SandboxRun{Command: c.Arguments, Preview: "ran " + c.ID}
		switch c.ID {
		case "docs":
			run.Changes = []protocol.FileChange{{Path: "docs/a.md", Op: protocol.ChangeChanged, Kind: "file", Content: []byte("b")}}
		case "src":
			run.Changes = []protocol.FileChange{{Path: "src/main.go", Op: protocol.ChangeChanged, Kind: "file", Content: []byte("b")}}
		case "move":
			// Written inside docs/, but taken from src/: a rename touches both.
			run.Changes = []protocol.FileChange{{Path: "docs/x.go", From: "src/x.go", Op: protocol.ChangeRenamed, Kind: "file"}}
		case "big":
			run.TooLarge = "3,000 files changed, past the 2,000 a run may hold"
		}
		return run
	}
	l := withLedger(t, s.harness, 0)
	var asked []string
	s.env.RegisterDelayedCallback(func() {
		for _, e := range s.events() {
			if e.Type == protocol.EventApprovalRequest {
				asked = append(asked, e.ToolCallID)
				s.decide(protocol.ApprovalDecision{RequestID: e.RequestID, Decision: protocol.DecisionApprove, Principal: "bob"})
			}
		}
	}, time.Second)

	out := s.runTurn(userTurn("work"))

	require.Equal(t, []string{"src", "move", "big"}, asked, "only the calls that touched a protected file, or whose changes were not held, asked")
	require.Empty(t, s.ranTools(), "nothing ran unconfined")
	var applied []string
	for _, a := range s.applied {
		applied = append(applied, a.Call.ID)
	}
	require.Equal(t, []string{"test", "docs", "src", "move", "big"}, applied)
	var contained []string
	for _, e := range out.Events {
		if e.Type == protocol.EventApprovalDecision && e.By == DecidedBySandbox {
			contained = append(contained, e.ToolCallID)
			require.NotNil(t, e.Sandbox)
		}
	}
	require.Equal(t, []string{"test", "docs"}, contained)
	rows := ledgerRows(t, l)
	require.Len(t, rows, 5, "a contained call has its row too")
	require.Equal(t, DecidedBySandbox, rows["test"].DecidedBy)
	require.Equal(t, audit.SandboxApplied, rows["test"].Sandbox)
	require.Equal(t, "ran docs", rows["docs"].Preview, "the row keeps the run the sandbox answered")
	require.Equal(t, audit.OutcomeOK, rows["docs"].Outcome)
	require.Equal(t, DecidedByPerson, rows["src"].DecidedBy)
	require.Equal(t, audit.SandboxApplied, rows["src"].Sandbox)
}

func TestWithSandboxAutoARunThatMakesASymbolicLinkAsks(t *testing.T) {
	// A link in docs/ changes no protected file itself, but leads to one,
	// or out of the workspace, for whatever follows it later: an editor,
	// a build, a site generator that publishes docs/.
	settings := testSettings()
	settings.Rules = []Rule{
		{Tool: protocol.ToolBash, Require: RequireAlways, Sandbox: policy.SandboxAuto},
		{Tool: protocol.ToolWrite, Require: RequireWhen, When: `!args.file_path.startsWith("docs/")`},
	}
	s := newSandboxed(t, settings, calls(
		call("in", protocol.ToolBash, `{"command":"ln -s ../src/main.go docs/main.go"}`),
		call("out", protocol.ToolBash, `{"command":"ln -s /home docs/home"}`),
		call("unlink", protocol.ToolBash, `{"command":"rm docs/old"}`),
	))
	s.answer = func(c protocol.ToolCall) protocol.SandboxRun {
		run := protocol.SandboxRun{Command: c.Arguments, Preview: "ran " + c.ID}
		switch c.ID {
		case "in":
			run.Changes = []protocol.FileChange{{Path: "docs/main.go", Op: protocol.ChangeAdded, Kind: "symlink", Link: "../src/main.go"}}
		case "out":
			run.Changes = []protocol.FileChange{{Path: "docs/home", Op: protocol.ChangeAdded, Kind: "symlink", Link: "/home"}}
		case "unlink":
			run.Changes = []protocol.FileChange{{Path: "docs/old", Op: protocol.ChangeDeleted, Kind: "symlink", Before: "abc"}}
		}
		return run
	}
	var asked []string
	s.env.RegisterDelayedCallback(func() {
		for _, e := range s.events() {
			if e.Type == protocol.EventApprovalRequest {
				asked = append(asked, e.ToolCallID)
				s.decide(protocol.ApprovalDecision{RequestID: e.RequestID, Decision: protocol.DecisionDecline, Reason: "no links"})
			}
		}
	}, time.Second)

	s.runTurn(userTurn("link"))

	require.Equal(t, []string{"in", "out"}, asked, "a run that makes a link asks; deleting one is a change of its path alone")
	require.Len(t, s.applied, 1)
	require.Equal(t, "unlink", s.applied[0].Call.ID)
}

func TestASignalsDecisionOnASandboxedCallIsCheckedAsTheUpdatesIs(t *testing.T) {
	// The Update's validator refuses these; a signal skips it, and must
	// not get them through: an edit approved without unconfined would
	// apply the run of the command the model wrote while the model read
	// that the edited one ran, and unconfined on a call that never ran
	// in the sandbox would be recorded for nothing.
	settings := testSettings()
	settings.Audit = true
	s := newSandboxed(t, settings, calls(
		call("b", protocol.ToolBash, `{"command":"make"}`),
		call("w", protocol.ToolWrite, `{"file_path":"a.txt","content":"x"}`),
	))
	l := withLedger(t, s.harness, 0)
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: s.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove,
			Arguments: `{"command":"make install"}`, Principal: "ops"})
		s.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: s.requestID(protocol.ToolWrite), Decision: protocol.DecisionApprove,
			Unconfined: true, Principal: "ops"})
	}, time.Second)
	var pending []protocol.PendingApproval
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflow(contract.PendingQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&pending))
		s.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: s.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove, Principal: "ops"})
		s.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: s.requestID(protocol.ToolWrite), Decision: protocol.DecisionApprove, Principal: "ops"})
	}, 2*time.Second)

	out := s.runTurn(userTurn("build"))

	require.Len(t, pending, 2, "neither signal was taken")
	for _, e := range ofType(out.Events, protocol.EventApprovalDecision) {
		require.False(t, e.Unconfined, "%s", e.ToolCallID)
	}
	require.Len(t, s.applied, 1)
	require.JSONEq(t, `{"command":"make"}`, s.applied[0].Call.Arguments)
	require.NotContains(t, toolMessages(out.Messages)[0].Content, "edited")
	require.Equal(t, []string{protocol.ToolWrite}, s.ranTools())
	rows := ledgerRows(t, l)
	require.Equal(t, audit.SandboxApplied, rows["b"].Sandbox)
	require.Empty(t, rows["b"].EditedArguments)
}

func TestUnconfinedIsDecidedOnlyByWhomTheRuleLets(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{{Tool: protocol.ToolBash, Require: RequireAlways, Deciders: []string{"dev", "lead"}, SecondPerson: true}}
	s := newSandboxed(t, settings, calls(call("b", protocol.ToolBash, `{"command":"curl -fsS https://example.com"}`)))
	refused := map[string]*updateOutcome{}
	s.env.RegisterDelayedCallback(func() {
		id := s.requestID(protocol.ToolBash)
		refused["its sender"] = s.decide(protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Unconfined: true, Principal: "dev", Role: "approve"})
		refused["not a decider"] = s.decide(protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Unconfined: true, Principal: "eve", Role: "approve"})
		s.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Unconfined: true, Principal: "eve"})
		s.env.SignalWorkflow(contract.ApprovalSignal, protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Unconfined: true, Principal: "dev"})
	}, time.Second)
	var allowed *updateOutcome
	s.env.RegisterDelayedCallback(func() {
		allowed = s.decide(protocol.ApprovalDecision{RequestID: s.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove, Unconfined: true, Principal: "lead", Role: "approve"})
	}, 2*time.Second)
	in := userTurn("fetch")
	in.Sender = "dev"

	out := s.runTurn(in)

	for name, o := range refused {
		require.Equal(t, protocol.RejectForbidden, contract.RejectionReason(o.rejected), "%s: %v", name, o.rejected)
	}
	require.NoError(t, allowed.rejected)
	decisions := ofType(out.Events, protocol.EventApprovalDecision)
	require.Len(t, decisions, 1)
	require.Equal(t, "lead", decisions[0].By)
	require.True(t, decisions[0].Unconfined)
	require.Equal(t, []string{protocol.ToolBash}, s.ranTools())
	require.Empty(t, s.applied)
}

func TestAGrantFromAnUnconfinedApproveAppliesLaterRunsAndNeverRunsThemUnconfined(t *testing.T) {
	// Unconfined is one call's decision, taken by a person who saw that
	// call's run; what a grant remembers is the approve.
	s := newSandboxed(t, testSettings(),
		calls(call("b1", protocol.ToolBash, `{"command":"npm install"}`)),
		calls(call("b2", protocol.ToolBash, `{"command":"npm install"}`)),
	)
	s.env.RegisterDelayedCallback(func() {
		s.decide(protocol.ApprovalDecision{RequestID: s.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove, Unconfined: true,
			Remember: protocol.RememberConversation, SameArguments: true, Principal: "bob"})
	}, time.Second)

	out := s.runTurn(userTurn("install"))

	require.Len(t, out.Grants, 1)
	require.Len(t, s.runs, 2, "both ran in the sandbox first")
	require.Len(t, s.toolCalls, 1)
	require.Equal(t, "b1", s.toolCalls[0].ID, "only the call the person chose to run unconfined ran for real")
	require.Len(t, s.applied, 1)
	require.Equal(t, "b2", s.applied[0].Call.ID, "the grant's call applied its run")
	for _, e := range ofType(out.Events, protocol.EventApprovalDecision) {
		require.Equal(t, e.ToolCallID == "b1", e.Unconfined, "%s", e.ToolCallID)
	}
}
