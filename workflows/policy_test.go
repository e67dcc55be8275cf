package workflows

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

func ruleSettings(rules ...Rule) Settings {
	s := testSettings()
	s.Rules = rules
	return s
}

// nestedAll is n comprehensions over ten numbers, one inside the other:
// 10^n iterations, which cel-go's checker accepts; seven take seconds.
func nestedAll(n int) string {
	expr := "true"
	for i := n; i > 0; i-- {
		expr = "[0,1,2,3,4,5,6,7,8,9].all(x" + string(rune('0'+i)) + ", " + expr + ")"
	}
	return expr
}

const dangerousBash = `args.command.startsWith("rm ") || args.command.contains("sudo")`

func TestCELRuleAsksOnlyForTheMatchingCallOfABatch(t *testing.T) {
	h := newHarness(t, ruleSettings(Rule{Tool: "Bash", Require: RequireWhen, When: dangerousBash}),
		calls(call("a", "Bash", `{"command":"ls -la"}`), call("b", "Bash", `{"command":"rm -rf build"}`)))
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionDecline})
	}, time.Second)

	out := h.runTurn(userTurn("clean"))

	requests := 0
	for _, e := range out.Events {
		if e.Type == protocol.EventApprovalRequest {
			requests++
			require.Equal(t, "b", e.ToolCallID)
		}
	}
	require.Equal(t, 1, requests)
	require.Len(t, h.toolCalls, 1)
	require.Equal(t, `{"command":"ls -la"}`, h.toolCalls[0].Arguments)
}

func TestPolicyRuleThatCostsTooMuchAsksAndSaysWhy(t *testing.T) {
	// Settings recorded before rules had a cost limit may hold a rule that
	// would hold the workflow task for seconds.
	h := newHarness(t, ruleSettings(
		Rule{Tool: "Bash", Require: RequireWhen, When: nestedAll(7)},
		Rule{Tool: "Write", Require: RequireWhen, When: `args.content.matches("^[a-z]{1,100}$")`},
	), calls(
		call("b", "Bash", `{"command":"ls"}`),
		call("w0", "Write", `{"file_path":"a","content":"B"}`),
		call("w1", "Write", `{"file_path":"a","content":"`+strings.Repeat("B", 60_000)+`"}`),
	))
	h.env.RegisterDelayedCallback(func() {
		for _, e := range ofType(h.events(), protocol.EventApprovalRequest) {
			h.decide(protocol.ApprovalDecision{RequestID: e.RequestID, Decision: protocol.DecisionDecline})
		}
	}, time.Minute)

	out := h.runTurn(userTurn("go"))

	asked := map[string]string{}
	for _, e := range ofType(out.Events, protocol.EventApprovalRequest) {
		asked[e.ToolCallID] = e.Reason
	}
	require.Len(t, asked, 2, "w0's content is short: its rule says no")
	require.Contains(t, asked["b"], "policy rule for Bash could not decide")
	require.Contains(t, asked["b"], "past the limit of 500000 that one call may cost")
	require.Contains(t, asked["w1"], "on these arguments (a value 60000 long) the expression may cost up to")
	require.Equal(t, []string{"Write"}, h.ranTools())
}

func TestPolicyRuleThatFailsAtRunTimeRequiresApproval(t *testing.T) {
	h := newHarness(t, ruleSettings(
		Rule{Tool: "Bash", Require: RequireWhen, When: dangerousBash},
		Rule{Tool: "Read", Require: RequireNever},
	), calls(call("b", "Bash", `{"cmd":"rm -rf /"}`), call("r", "Read", `{"file_path":"x"}`)))
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionDecline})
	}, time.Second)

	out := h.runTurn(userTurn("go"))

	req := findEvent(t, out.Events, protocol.EventApprovalRequest)
	require.Equal(t, "b", req.ToolCallID, "a missing argument fails closed")
	require.Contains(t, req.Reason, "could not decide")
	require.Equal(t, []string{"Read"}, h.ranTools())
}

func TestRuleTimeoutReplacesTheApprovalTimeout(t *testing.T) {
	h := newHarness(t, ruleSettings(Rule{Tool: "Write", Require: RequireAlways, Timeout: 10 * time.Minute}),
		calls(call("w", "Write", `{"file_path":"a","content":"b"}`)))
	start := h.env.Now()

	out := h.runTurn(userTurn("write"))

	req := findEvent(t, out.Events, protocol.EventApprovalRequest)
	require.WithinDuration(t, start.Add(10*time.Minute), *req.ExpiresAt, time.Second)
	require.Equal(t, protocol.DecisionTimeout, findEvent(t, out.Events, protocol.EventApprovalDecision).Decision)
}

func TestRuleValidationNamesToolAndExpression(t *testing.T) {
	err := Rule{Tool: "Bash", Require: RequireWhen, When: `args.command.startsWith(`}.Validate()
	require.ErrorContains(t, err, "tool Bash")
	require.ErrorContains(t, err, `args.command.startsWith(`)
	require.ErrorContains(t, Rule{Tool: "Bash", Require: RequireWhen, When: `size(args)`}.Validate(), "not bool")
	require.ErrorContains(t, Rule{Tool: "Read", Require: "sometimes"}.Validate(), `require "sometimes"`)
	require.NoError(t, Rule{Tool: "Bash", Require: RequireWhen, When: dangerousBash}.Validate())
}

func TestRememberedApprovalSkipsLaterApprovalsInTheConversationUntilRevoked(t *testing.T) {
	bash := calls(call("b", "Bash", `{"command":"make test"}`))
	h := newHarness(t, testSettings(), bash, activities.ModelOutput{Content: "1"}, bash, activities.ModelOutput{Content: "2"}, bash)
	var r1, r2, r3 contract.TurnRef
	var grants []contract.Grant
	h.env.RegisterDelayedCallback(func() { h.send("one", &r1) }, time.Second)
	h.env.RegisterDelayedCallback(func() {
		id := pendingRequest(t, h, r1.TurnID)
		require.NoError(t, h.env.UpdateWorkflowByID(r1.TurnID, contract.ApprovalUpdate, "d1", noRejection(t),
			protocol.ApprovalDecision{RequestID: id, Decision: protocol.DecisionApprove, Remember: protocol.RememberConversation}))
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() { h.send("two", &r2) }, 2*time.Minute)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(contract.GrantsQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&grants))
		require.Len(t, grants, 1)
		h.env.UpdateWorkflow(contract.RevokeGrantUpdate, "revoke", noRejection(t), contract.RevokeGrant{GrantID: grants[0].ID})
	}, 3*time.Minute)
	h.env.RegisterDelayedCallback(func() { h.send("three", &r3) }, 4*time.Minute)
	var pendingAfterRevoke []protocol.PendingApproval
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflowByID(r3.TurnID, contract.PendingQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&pendingAfterRevoke))
		h.env.CancelWorkflow()
	}, 5*time.Minute)

	h.env.ExecuteWorkflow(contract.ConversationWorkflow, contract.ConversationInput{ConversationID: "c1"})

	require.Equal(t, []string{"Bash", "Bash"}, h.ranTools(), "turn 2 ran Bash without asking")
	require.Equal(t, contract.Grant{ID: grants[0].ID, Tool: "Bash", Decision: protocol.DecisionApprove, TurnID: r1.TurnID, CreatedAt: grants[0].CreatedAt, Used: 1}, grants[0],
		"the conversation counts the call turn 2's grant decided")
	require.Len(t, pendingAfterRevoke, 1, "after the revoke, turn 3 asks again")
	// Turn 2's model saw the tool's result, not a decline.
	require.Contains(t, toolMessages(h.modelInputs[3].Messages)[1].Content, "Bash ran with")
}

// A grant lives in its conversation's state, so it cannot reach another
// conversation; api's TestRememberedApprovalSkipsTheNextAskUntilRevokedOverHTTP
// shows that on a real server.
func TestGrantCoversOnlyItsToolWithTheSameArguments(t *testing.T) {
	g := contract.Grant{ID: "g", Tool: "Bash", Decision: protocol.DecisionApprove, Arguments: canonicalJSON(`{"command": "make"}`)}
	now := time.Now()
	grantFor := func(c protocol.ToolCall) *contract.Grant {
		return grantFor([]contract.Grant{g}, c, now, (&turn{}).sameArguments(argumentsOf(c), true), nil)
	}
	require.NotNil(t, grantFor(call("x", "Bash", `{ "command":"make" }`)))
	require.Nil(t, grantFor(call("x", "Bash", `{"command":"make deploy"}`)))
	require.Nil(t, grantFor(call("x", "Write", `{"command":"make"}`)))
}

func TestRememberedDeclineDeclinesWithoutAsking(t *testing.T) {
	h := newHarness(t, testSettings(), calls(call("b", "Bash", `{"command":"make"}`)))
	in := userTurn("go")
	in.Grants = []contract.Grant{{ID: "g1", Tool: "Bash", Decision: protocol.DecisionDecline}}

	out := h.runTurn(in)

	require.Empty(t, h.ranTools())
	require.NotContains(t, eventTypes(out.Events), protocol.EventApprovalRequest)
	d := findEvent(t, out.Events, protocol.EventApprovalDecision)
	require.Equal(t, "g1", d.Grant)
	require.Equal(t, "Not executed: a person declined calls like this one earlier in this conversation, and that decision stands. Do not call it again unless the user asks you to.", toolMessages(out.Messages)[0].Content)
}

func TestNoticesReachTheNotifyURLWithARetryAndAReminder(t *testing.T) {
	var mu sync.Mutex
	var notices []activities.Notice
	attempts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		attempts++
		if attempts == 1 {
			http.Error(w, "try again", http.StatusInternalServerError)
			return
		}
		var n activities.Notice
		require.NoError(t, json.NewDecoder(r.Body).Decode(&n))
		notices = append(notices, n)
	}))
	defer srv.Close()

	settings := testSettings()
	settings.Notify = true
	settings.ApprovalTimeout = 10 * time.Minute
	h := newHarness(t, settings, calls(call("w", "Write", `{"file_path":"a","content":"b"}`)))
	RegisterNotifier(h.env, &activities.Notifier{URL: srv.URL})
	// Decided after the reminder (at 8 of 10 minutes), before the timeout.
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionApprove})
	}, 9*time.Minute)

	out := h.runTurn(userTurn("write"))

	require.Equal(t, []string{"Write"}, h.ranTools())
	req := findEvent(t, out.Events, protocol.EventApprovalRequest)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 3, attempts, "the first notice is retried after a 500")
	require.Len(t, notices, 2)
	require.Equal(t, activities.NoticeApprovalRequest, notices[0].Kind)
	require.Equal(t, activities.NoticeReminder, notices[1].Kind)
	for _, n := range notices {
		require.Equal(t, req.RequestID, n.RequestID)
		require.Equal(t, "Write", n.Tool)
		require.Equal(t, "c1", n.ConversationID)
		require.True(t, req.ExpiresAt.Equal(n.ExpiresAt))
		require.Equal(t, req.Preview, n.Preview, "the notice shows what the call will do")
		require.NotEmpty(t, n.Preview)
	}
}

func TestTheReminderGoesOutWhenSettingsSayBeforeTheTimeout(t *testing.T) {
	var mu sync.Mutex
	var kinds []string
	var remindedAt time.Duration
	var h *harness
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n activities.Notice
		require.NoError(t, json.NewDecoder(r.Body).Decode(&n))
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, n.Kind)
		if n.Kind == activities.NoticeReminder {
			remindedAt = n.ExpiresAt.Sub(h.env.Now())
		}
	}))
	defer srv.Close()

	settings := testSettings()
	settings.Notify = true
	settings.ApprovalTimeout = 10 * time.Minute
	settings.ReminderBefore = time.Minute
	h = newHarness(t, settings, calls(call("w", "Write", `{"file_path":"a","content":"b"}`)))
	RegisterNotifier(h.env, &activities.Notifier{URL: srv.URL})

	out := h.runTurn(userTurn("write"))

	require.Equal(t, protocol.DecisionTimeout, findEvent(t, out.Events, protocol.EventApprovalDecision).Decision)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{activities.NoticeApprovalRequest, activities.NoticeReminder}, kinds)
	require.InDelta(t, float64(time.Minute), float64(remindedAt), float64(5*time.Second), "a minute before the timeout, not at four fifths")
}

func pendingRequest(t *testing.T, h *harness, turnID string) string {
	t.Helper()
	v, err := h.env.QueryWorkflowByID(turnID, contract.PendingQuery)
	require.NoError(t, err)
	var pending []protocol.PendingApproval
	require.NoError(t, v.Get(&pending))
	require.Len(t, pending, 1)
	return pending[0].RequestID
}

func noRejection(t *testing.T) *testsuite.TestUpdateCallback {
	return &testsuite.TestUpdateCallback{
		OnAccept:   func() {},
		OnReject:   func(err error) { t.Errorf("rejected: %v", err) },
		OnComplete: func(_ any, err error) { require.NoError(t, err) },
	}
}

func TestABatchWaitsOnOneTimerAndEachCallTimesOutAtItsOwnTime(t *testing.T) {
	settings := ruleSettings(Rule{Tool: "Bash", Require: RequireAlways, Timeout: time.Minute})
	h := newHarness(t, settings, calls(
		call("w1", "Write", `{"file_path":"a","content":"a"}`),
		call("b", "Bash", `{"command":"make"}`),
		call("w2", "Write", `{"file_path":"b","content":"b"}`),
		call("e", "Edit", `{"file_path":"a","old_string":"a","new_string":"c"}`),
	))
	var timers []time.Duration
	h.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) { timers = append(timers, d) })
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Edit"), Decision: protocol.DecisionApprove})
	}, 30*time.Second)

	out := h.runTurn(userTurn("write, build, edit"))

	var order []string
	for _, e := range ofType(out.Events, protocol.EventApprovalDecision) {
		order = append(order, e.ToolCallID+" "+e.Decision)
	}
	require.Equal(t, []string{"e approve", "b timeout", "w1 timeout", "w2 timeout"}, order,
		"the Edit decided, then the Bash timed out at its rule's minute, then the Writes with the default")
	require.Equal(t, []time.Duration{time.Minute, 2 * time.Minute}, timers,
		"one timer to the Bash's expiry, then one to the Writes': not one a call")
	require.Equal(t, []string{"Edit"}, h.ranTools())
}

func TestOneLocalActivityPreviewsABatch(t *testing.T) {
	h := newHarness(t, testSettings(), calls(
		call("w", "Write", `{"file_path":"a","content":"a"}`),
		call("b", "Bash", `{"command":"make"}`),
		call("r", "Read", `{"file_path":"a"}`),
	))
	var started []string
	h.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		started = append(started, info.ActivityType.Name)
	})
	h.env.RegisterDelayedCallback(func() {
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Write"), Decision: protocol.DecisionApprove})
		h.decide(protocol.ApprovalDecision{RequestID: h.requestID("Bash"), Decision: protocol.DecisionApprove})
	}, time.Minute)

	out := h.runTurn(userTurn("write and build"))

	require.Equal(t, []string{activities.PreviewsActivity}, started, "one preview activity for the batch's two protected calls")
	previews := map[string]string{}
	for _, e := range ofType(out.Events, protocol.EventApprovalRequest) {
		previews[e.ToolCallID] = e.Preview
	}
	require.Equal(t, map[string]string{
		"w": `preview of Write {"file_path":"a","content":"a"}`,
		"b": `preview of Bash {"command":"make"}`,
	}, previews)
}
