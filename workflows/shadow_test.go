package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/protocol"
)

// shadowSettings watch a broader Bash rule beside the live one, a Write
// rule that would ask no one beside the default that asks, and an Edit
// rule that cannot decide.
func shadowSettings() Settings {
	settings := testSettings()
	settings.Audit = true
	settings.Rules = []Rule{
		{Tool: protocol.ToolBash, Require: RequireWhen, When: `args.command.startsWith("rm ")`},
		{Tool: protocol.ToolBash, Require: RequireWhen, When: `args.command.startsWith("rm ") || args.command.startsWith("curl ")`, Shadow: true},
		{Tool: protocol.ToolWrite, Require: RequireNever, Shadow: true},
		{Tool: protocol.ToolRead, Require: RequireWhen, When: `args.missing == "x"`, Shadow: true},
	}
	return settings
}

func TestShadowRulesActOnNothingAndTheLedgerRecordsWhatTheyWouldHaveDone(t *testing.T) {
	h := newHarness(t, shadowSettings(), calls(
		call("call_rm", protocol.ToolBash, `{"command":"rm -rf build"}`),
		call("call_curl", protocol.ToolBash, `{"command":"curl example.com"}`),
		call("call_ls", protocol.ToolBash, `{"command":"ls"}`),
		call("call_write", protocol.ToolWrite, `{"file_path":"a.txt","content":"x"}`),
		call("call_read", protocol.ToolRead, `{"file_path":"a.txt"}`),
	))
	l := withLedger(t, h, 0)
	var asked []string
	h.env.RegisterDelayedCallback(func() {
		for _, e := range h.events() {
			if e.Type == protocol.EventApprovalRequest {
				asked = append(asked, e.ToolCallID)
			}
		}
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove, Principal: "bob"})
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolWrite), Decision: protocol.DecisionDecline, Principal: "bob"})
	}, time.Minute)

	out := h.runTurn(userTurn("clean up"))

	require.Equal(t, []string{"call_rm", "call_write"}, asked, "the live rules alone decide what asks")
	require.Equal(t, []string{protocol.ToolBash, protocol.ToolBash, protocol.ToolBash, protocol.ToolRead}, h.ranTools(),
		"what ran is what the live rules and the decisions let run")

	rows := ledgerRows(t, l)
	require.NotContains(t, rows, "call_ls", "neither rule asks about it: no row")
	require.Len(t, rows, 4)

	rm := rows["call_rm"]
	require.Equal(t, audit.ShadowWouldAsk, rm.Shadow)
	require.Equal(t, DecidedByPerson, rm.DecidedBy)
	require.False(t, rm.Disagrees())

	curl := rows["call_curl"]
	workflowID := findEvent(t, out.Events, protocol.EventTurnStart).WorkflowID
	require.Equal(t, "policy:"+workflowID+":1:1:call_curl", curl.ID)
	require.Equal(t, audit.ShadowWouldAsk, curl.Shadow)
	require.Equal(t, DecidedByPolicy, curl.DecidedBy)
	require.Equal(t, protocol.DecisionApprove, curl.Decision)
	require.Empty(t, curl.Asked, "nothing asked")
	require.Equal(t, `no rule asks about it; shadow rule Bash: when args.command.startsWith("rm ") || args.command.startsWith("curl ") would have`, curl.Reason)
	require.Equal(t, audit.StageEnded, curl.Stage)
	require.Equal(t, audit.OutcomeOK, curl.Outcome)
	require.True(t, curl.Disagrees())

	write := rows["call_write"]
	require.Equal(t, audit.ShadowWouldNotAsk, write.Shadow)
	require.Equal(t, "default: Write is a protected tool", write.Asked)
	require.Equal(t, protocol.DecisionDecline, write.Decision)
	require.True(t, write.Disagrees())

	read := rows["call_read"]
	require.Equal(t, audit.ShadowCouldNotDecide, read.Shadow, "a shadow rule that fails would have asked, and fails nothing live")
	require.Equal(t, DecidedByPolicy, read.DecidedBy)
	require.Contains(t, read.Reason, "shadow rule for Read could not decide")
	require.Equal(t, audit.OutcomeOK, read.Outcome)
}

func TestATurnWithoutShadowRulesRecordsNoVerdict(t *testing.T) {
	settings := testSettings()
	settings.Audit = true
	h := newHarness(t, settings, calls(call("call_1", protocol.ToolBash, `{"command":"ls"}`)))
	l := withLedger(t, h, 0)
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID(protocol.ToolBash), Decision: protocol.DecisionApprove})
	}, time.Minute)
	h.runTurn(userTurn("ls"))
	rows := ledgerRows(t, l)
	require.Empty(t, rows["call_1"].Shadow)
	require.False(t, rows["call_1"].Disagrees())
}

func TestTheRulesOfATurnAreItsLiveOnes(t *testing.T) {
	s := shadowSettings()
	require.Equal(t, `args.command.startsWith("rm ")`, s.rule(protocol.ToolBash).When)
	require.Nil(t, s.rule(protocol.ToolWrite), "a tool with only a shadow rule follows the required tools")
	require.True(t, RequiresApproval(s, protocol.ToolWrite, `{"file_path":"a.txt","content":"x"}`))
	require.False(t, RequiresApproval(s, protocol.ToolBash, `{"command":"curl example.com"}`))
	require.Equal(t, &shadowCheck{Required: true}, s.shadow(protocol.ToolCall{Name: protocol.ToolBash, Arguments: `{"command":"curl example.com"}`}, nil))
	require.Nil(t, s.shadow(protocol.ToolCall{Name: protocol.ToolEdit, Arguments: `{}`}, nil))
}
