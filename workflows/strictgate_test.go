package workflows

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

func TestBypassedTurnStillAsksWhereARuleRequiresAToolAlways(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{{Tool: protocol.ToolBash, Require: RequireAlways}}
	h := newHarness(t, settings, calls(
		call("w", "Write", `{"file_path":"a","content":"b"}`),
		call("b", "Bash", `{"command":"rm -rf build"}`),
	))
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionDecline, Reason: "not even with bypass"})
	}, time.Minute)
	in := userTurn("clean up")
	in.BypassApproval = true

	out := h.runTurn(in)

	require.True(t, findEvent(t, out.Events, protocol.EventTurnStart).Bypass, "turn_start says the turn is bypassed")
	requests := ofType(out.Events, protocol.EventApprovalRequest)
	require.Len(t, requests, 1, "only the always-rule asks")
	require.Equal(t, "b", requests[0].ToolCallID)
	require.Equal(t, []string{"Write"}, h.ranTools(), "Write ran without asking; Bash was declined")
}

func TestClientToolThatThePolicyProtectsAsksBeforeItsCallIsPublished(t *testing.T) {
	settings := testSettings()
	settings.Rules = []Rule{{Tool: pickColor.Name, Require: RequireWhen, When: `args.color != "grey"`}}
	h := newHarness(t, settings,
		calls(call("c1", "PickColor", `{"color":"red"}`), call("c2", "PickColor", `{"color":"grey"}`)),
		activities.ModelOutput{Content: "only grey"},
	)
	var published []protocol.Event
	h.env.RegisterDelayedCallback(func() {
		// Asked about red, nothing published for either call yet.
		require.Empty(t, ofType(h.events(), protocol.EventClientToolCall))
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("PickColor"), Decision: protocol.DecisionDecline})
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		published = ofType(h.events(), protocol.EventClientToolCall)
		var rejected error
		h.answer(contract.ClientToolResult{ToolCallID: "c2", Result: "grey it is"}, &rejected)
		require.NoError(t, rejected)
	}, 2*time.Minute)

	out := h.runTurn(clientTurn())

	requests := ofType(out.Events, protocol.EventApprovalRequest)
	require.Len(t, requests, 1)
	require.Equal(t, "c1", requests[0].ToolCallID, "the rule protects red, not grey")
	require.Len(t, published, 1, "the declined call is never handed to the client")
	require.Equal(t, "c2", published[0].ToolCallID)
	results := findEvent(t, out.Events, protocol.EventToolResult).ToolResults
	require.Equal(t, protocol.StatusDeclined, results[0].Status)
	require.Equal(t, "grey it is", results[1].Result)
}

func TestDecisionRecordsTheRoleOfTheTokenItCameWith(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("w", "Write", `{"file_path":"a","content":"b"}`)))
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionApprove, Principal: "root", Role: "admin"})
	}, time.Minute)

	out := h.runTurn(userTurn("write"))

	d := findEvent(t, out.Events, protocol.EventApprovalDecision)
	require.Equal(t, "root", d.By)
	require.Equal(t, "admin", d.Role)
	require.False(t, findEvent(t, out.Events, protocol.EventTurnStart).Bypass)
}

func TestThePendingApprovalsAttributeStaysUnderItsBudgetAndSaysWhenItListsFewer(t *testing.T) {
	var ids []string
	for i := range 100 {
		ids = append(ids, fmt.Sprintf("tollgate-conv-a-long-conversation-id-turn-1/apr-%032d", i))
	}
	got := boundedKeywords(append([]string{contract.ClientToolSearchValue("call_pay")}, ids...), pendingAttributeBudget)
	b, err := json.Marshal(got)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), pendingAttributeBudget)
	require.Equal(t, contract.ClientToolSearchValue("call_pay"), got[0], "the client tool call is always listed")
	require.Equal(t, PendingMoreValue, got[len(got)-1])
	require.Equal(t, ids[:3], boundedKeywords(ids[:3], pendingAttributeBudget), "what fits is listed whole")
}

func TestAPathThroughALinkIsAskedAboutAsTheFileItReaches(t *testing.T) {
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "src"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "docs"), 0o755))
	require.NoError(t, os.Symlink("../src", filepath.Join(ws, "docs", "src")))
	settings := testSettings()
	write := slices.IndexFunc(settings.Tools, func(s protocol.ToolSpec) bool { return s.Name == protocol.ToolWrite })
	settings.Tools[write] = (&activities.Tools{}).Specs()[1] // with its workspace path
	require.Equal(t, protocol.ToolWrite, settings.Tools[write].Name)
	settings.WorkspaceRoots = []string{ws}
	settings.Rules = []Rule{{Tool: protocol.ToolWrite, Require: RequireWhen, When: `!args.file_path.startsWith("docs/")`}}
	h := newHarness(t, settings, calls(
		call("w1", "Write", `{"file_path":"docs/src/main.go","content":"x"}`),
		call("w2", "Write", `{"file_path":"docs/a.md","content":"y"}`),
	))
	var request protocol.Event
	var edited *updateOutcome
	h.env.RegisterDelayedCallback(func() {
		request = findEvent(t, h.events(), protocol.EventApprovalRequest)
		edited = h.decide(protocol.ApprovalDecision{RequestID: request.RequestID, Decision: protocol.DecisionApprove, Arguments: `{"file_path":"docs/src/other.go","content":"x"}`})
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: request.RequestID, Decision: protocol.DecisionApprove})
	}, 2*time.Minute)

	out := h.runTurn(userTurn("write"))

	require.Equal(t, "w1", request.ToolCallID, "the write through docs/src asks: it writes src/main.go")
	require.Equal(t, `{"file_path":"src/main.go","content":"x"}`, request.Arguments)
	require.Len(t, ofType(out.Events, protocol.EventApprovalRequest), 1, "docs/a.md is in docs/")
	require.ErrorContains(t, edited.rejected, `the edited arguments of Write: file_path leads through a symbolic link to "src/other.go": name that file`)
	var ran []string
	for _, c := range h.toolCalls {
		ran = append(ran, c.Arguments)
	}
	require.Equal(t, []string{`{"file_path":"src/main.go","content":"x"}`, `{"file_path":"docs/a.md","content":"y"}`}, ran, "the tool gets the path the policy read")
}

func TestAGrantScopedToAFolderAnswersNoCallThatALinkLeadsOutOf(t *testing.T) {
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "src"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "docs"), 0o755))
	require.NoError(t, os.Symlink("../src", filepath.Join(ws, "docs", "src")))
	settings := testSettings()
	write := slices.IndexFunc(settings.Tools, func(s protocol.ToolSpec) bool { return s.Name == protocol.ToolWrite })
	settings.Tools[write] = (&activities.Tools{}).Specs()[1]
	require.Equal(t, protocol.ToolWrite, settings.Tools[write].Name)
	settings.WorkspaceRoots = []string{ws}
	h := newHarness(t, settings, calls(
		call("w1", "Write", `{"file_path":"docs/a.md","content":"x"}`),
		call("w2", "Write", `{"file_path":"docs/src/main.go","content":"y"}`),
	))
	in := userTurn("write")
	in.Grants = []contract.Grant{{ID: "g1", Tool: "Write", Decision: protocol.DecisionApprove, When: `args.file_path.startsWith("docs/")`}}
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionDecline})
	}, time.Minute)

	out := h.runTurn(in)

	used := grantDecisions(out.Events)
	require.Len(t, used, 1)
	require.Equal(t, "w1", used[0].ToolCallID, "the grant for docs/ answers docs/a.md")
	asked := ofType(out.Events, protocol.EventApprovalRequest)
	require.Len(t, asked, 1, "and not docs/src/main.go, which is src/main.go")
	require.Equal(t, `{"file_path":"src/main.go","content":"y"}`, asked[0].Arguments)
	require.Equal(t, []string{"Write"}, h.ranTools())
}

// TestAFrozenGateAsksABypassedTurnsCallsFromItsNextBatch: the gate
// freezes while a bypassed turn runs; its first batch ran unasked, its
// next asks of every protected call, and the batch's vetting records it.
func TestAFrozenGateAsksABypassedTurnsCallsFromItsNextBatch(t *testing.T) {
	settings := testSettings()
	h := newHarness(t, settings,
		calls(call("w1", "Write", `{"file_path":"a","content":"b"}`)),
		calls(call("w2", "Write", `{"file_path":"c","content":"d"}`), call("r", "Read", `{"file_path":"a"}`)),
	)
	h.env.SetOnActivityCompletedListener(func(info *activity.Info, _ converter.EncodedValue, _ error) {
		if info.ActivityType.Name == "Write" {
			h.admin.Set(contract.ControlState{Freeze: protocol.GateFreeze{Frozen: true, By: "root"}, Changes: 1})
		}
	})
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionApprove})
	}, time.Minute)
	in := userTurn("write twice")
	in.BypassApproval = true

	out := h.runTurn(in)

	requests := ofType(out.Events, protocol.EventApprovalRequest)
	require.Len(t, requests, 1, "the frozen batch's Write asks, its Read (no rule) does not")
	require.Equal(t, "w2", requests[0].ToolCallID)
	require.Equal(t, reasonFrozen, requests[0].Reason, "the request says why it asks")
	require.Equal(t, []string{"Write", "Write", "Read"}, h.ranTools())
}
