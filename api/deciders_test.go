package main

import (
	"net/http"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

func TestASecondPersonMustApproveWhatTheSenderAsked(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, SecondPerson: true},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	const devToken, leadToken = "dev-0123456789abcdef", "lead-0123456789abcde"
	o := st.apiOptions()
	o.Tokens = []config.APIToken{
		{Token: devToken, Principal: "dev", Roles: config.DefaultRoles},
		{Token: leadToken, Principal: "lead", Roles: []string{config.RoleApprove}},
	}
	api := serveAPI(t, NewServer(o))

	_, msgs := chatAs(t, api, devToken, `{"query": "tidy up", "conversationId": "second-person"}`)
	seq := 0
	write := ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1), protocol.EventApprovalRequest)[0]
	approve := `{"requestId":"` + write.RequestID + `","decision":"approve"}`
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decision(t, api.URL, devToken, approve), "the sender may not approve their own call")
	decideAs(t, api.URL, leadToken, approve)

	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	d := ofType(events, protocol.EventApprovalDecision)[0]
	require.Equal(t, "lead", d.By)
	require.Equal(t, config.RoleApprove, d.Role)
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write ok", "call_0_2 Bash ok"}, resultStatuses(ofType(events, protocol.EventToolResult)[0].ToolResults))
}

func TestAClientToolThePolicyProtectsAsksBeforeTheClientIsToldToRunIt(t *testing.T) {
	t.Parallel()
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Paid."}
		}
		return scripted.Reply{ToolCalls: []protocol.ToolCall{{ID: "call_pay", Name: "Pay", Arguments: `{"amount":12.5}`}}}
	}
	// docs/policy.md's policy 3: every payment asks.
	st := newStack(t, withScript(script), withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{{Tool: "Pay", Require: workflows.RequireWhen, When: "args.amount > 0"}}
	}))
	_, msgs := st.chat(t, `{"query":"pay the invoice","clientTools":[{"name":"Pay","description":"pays","parameters":{"type":"object","properties":{"amount":{"type":"number"}}}}]}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1)
	require.Empty(t, ofType(events, protocol.EventClientToolCall), "the client is not asked to pay before a person approves")
	postDecision(t, st.api, ofType(events, protocol.EventApprovalRequest)[0].RequestID, protocol.DecisionApprove, "", true)
	call := untilEvent(t, msgs, &seq, protocol.EventClientToolCall, 1)
	require.Equal(t, "call_pay", call[len(call)-1].ToolCallID)
	status, body := st.postJSON(t, "/chat/tool-result", `{"toolCallId":"call_pay","result":"paid 12.50"}`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, true, body["accepted"])
	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, "Paid.", rest[len(rest)-1].Text)
}

// A grant is a decision made in advance: it answers only a call its
// maker could decide now. Bob's remembered approval of Alice's Write must
// not approve Bob's own Write, which the four-eyes rule keeps from him.
func TestAGrantDoesNotLetItsMakerSkipTheSecondPerson(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, SecondPerson: true},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	const aliceToken, bobToken = "alice-0123456789abcd", "bob-0123456789abcdef"
	o := st.apiOptions()
	o.Tokens = []config.APIToken{
		{Token: aliceToken, Principal: "alice", Roles: config.DefaultRoles},
		{Token: bobToken, Principal: "bob", Roles: config.DefaultRoles},
	}
	api := serveAPI(t, NewServer(o))
	const conv = "four-eyes-grant"

	// Alice's turn: Bob approves her Write, and remembers it.
	_, msgs := chatAs(t, api, aliceToken, `{"query": "write a note", "conversationId": "`+conv+`"}`)
	seq := 0
	write := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))["Write"]
	decideAs(t, api.URL, bobToken, `{"requestId":"`+write.RequestID+`","decision":"approve","remember":"conversation"}`)
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

	// Bob's turn: his Write asks; he may not approve it, Alice may.
	_, msgs = chatAs(t, api, bobToken, `{"query": "write another", "conversationId": "`+conv+`"}`)
	seq = 0
	events := untilEvent(t, msgs, &seq, protocol.EventHeartbeat, 1)
	require.Empty(t, ofType(events, protocol.EventApprovalDecision), "bob's grant decided nothing in bob's turn")
	write = requestsByTool(events)["Write"]
	require.NotEmpty(t, write.RequestID, "bob's Write asks")
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decision(t, api.URL, bobToken, `{"requestId":"`+write.RequestID+`","decision":"approve"}`))
	decideAs(t, api.URL, aliceToken, `{"requestId":"`+write.RequestID+`","decision":"approve"}`)
	events = untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	d := ofType(events, protocol.EventApprovalDecision)
	require.Len(t, d, 1)
	require.Equal(t, "alice", d[0].By)
	require.Empty(t, d[0].Grant)

	// Alice's next turn: Bob's grant answers her Write, as he could.
	_, msgs = chatAs(t, api, aliceToken, `{"query": "and one more", "conversationId": "`+conv+`"}`)
	seq = 0
	events = untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Empty(t, ofType(events, protocol.EventApprovalRequest))
	d = ofType(events, protocol.EventApprovalDecision)
	require.Len(t, d, 1)
	require.Equal(t, "bob", d[0].By)
	require.NotEmpty(t, d[0].Grant)
}

// A rule that names a team role (deciders: [role:finance]) is decided by
// a principal whose token carries it (carol: approve+finance), never by
// one whose token does not (dave: approve), whatever dave's body claims;
// and carol's remembered approval answers the next call, since its grant
// keeps her teams.
func TestATeamRoleOfTheTokenDecidesWhatARuleLeavesToTheTeam(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{workflows.DeciderRolePrefix + "finance"}},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	}))
	const devToken, carolToken, daveToken = "dev-0123456789abcdef", "carol-0123456789abcd", "dave-0123456789abcde"
	cfg, err := config.Load(func(name string) string {
		if name == config.EnvAPITokens {
			return devToken + ":dev," + carolToken + ":carol:approve+finance," + daveToken + ":dave:approve"
		}
		return ""
	})
	require.NoError(t, err)
	o := st.apiOptions()
	o.Tokens = cfg.APITokens
	api := serveAPI(t, NewServer(o))
	const conv = "team-finance"

	_, msgs := chatAs(t, api, devToken, `{"query": "tidy up", "conversationId": "`+conv+`"}`)
	seq := 0
	write := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))["Write"]
	require.Equal(t, []string{"role:finance"}, write.Deciders)
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decision(t, api.URL, daveToken, `{"requestId":"`+write.RequestID+`","decision":"approve"}`))
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decision(t, api.URL, daveToken, `{"requestId":"`+write.RequestID+`","decision":"approve","teams":["finance"],"role":"finance"}`),
		"the API sets teams and role from the token, whatever the body says")
	decideAs(t, api.URL, carolToken, `{"requestId":"`+write.RequestID+`","decision":"approve","remember":"conversation"}`)
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	d := ofType(events, protocol.EventApprovalDecision)[0]
	require.Equal(t, "carol", d.By)
	require.Equal(t, config.RoleApprove, d.Role, "the decision's role stays the token's permission")
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write ok", "call_0_2 Bash ok"}, resultStatuses(ofType(events, protocol.EventToolResult)[0].ToolResults))

	// The next turn's Write: carol's grant answers it, as carol could.
	_, msgs = chatAs(t, api, devToken, `{"query": "and again", "conversationId": "`+conv+`"}`)
	seq = 0
	events = untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Empty(t, ofType(events, protocol.EventApprovalRequest))
	d = ofType(events, protocol.EventApprovalDecision)[0]
	require.Equal(t, "carol", d.By)
	require.NotEmpty(t, d.Grant)
}

// restartWorker stops the stack's worker and starts another on its queue,
// with the stack's settings as change makes them: a new policy, say.
func restartWorker(t *testing.T, st *stack, change func(*workflows.Settings)) {
	t.Helper()
	st.worker.Stop()
	tools := stackTools(st.workspace)
	wf := &workflows.Workflows{Settings: stackSettings(tools, time.Minute)}
	change(&wf.Settings)
	st.worker = worker.New(st.client, st.queue, workflows.WorkerOptions())
	workflows.Register(st.worker, wf,
		activities.NewModel(st.model.URL+"/v1", "test", scripted.ModelName, workflows.TokenSignaler{Client: st.client}), tools)
	workflows.RegisterAuditor(st.worker, &activities.Auditor{Ledger: st.ledger})
	require.NoError(t, st.worker.Start())
	t.Cleanup(st.worker.Stop)
}

// A grant made before its tool's rule named deciders answers no call once
// it does, unless its maker is one of them.
func TestARuleThatGainsDecidersNarrowsTheGrantsMadeBefore(t *testing.T) {
	t.Parallel()
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{{Tool: protocol.ToolBash, Require: workflows.RequireNever}}
	}))
	const devToken, leadToken = "dev-0123456789abcdef", "lead-0123456789abcde"
	o := st.apiOptions()
	o.Tokens = []config.APIToken{
		{Token: devToken, Principal: "dev", Roles: config.DefaultRoles},
		{Token: leadToken, Principal: "lead", Roles: []string{config.RoleApprove}},
	}
	api := serveAPI(t, NewServer(o))
	const conv = "deciders-later"
	_, msgs := chatAs(t, api, devToken, `{"query": "write a note", "conversationId": "`+conv+`"}`)
	seq := 0
	write := requestsByTool(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1))["Write"]
	decideAs(t, api.URL, devToken, `{"requestId":"`+write.RequestID+`","decision":"approve","remember":"conversation"}`)
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

	// The operator's new policy: only lead decides Writes.
	restartWorker(t, st, func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: protocol.ToolWrite, Require: workflows.RequireAlways, Deciders: []string{"lead"}},
			{Tool: protocol.ToolBash, Require: workflows.RequireNever},
		}
	})

	_, msgs = chatAs(t, api, devToken, `{"query": "write another", "conversationId": "`+conv+`"}`)
	seq = 0
	events := untilEvent(t, msgs, &seq, protocol.EventHeartbeat, 1)
	require.Empty(t, ofType(events, protocol.EventApprovalDecision), "dev's grant decides no Write now that only lead may")
	write = requestsByTool(events)["Write"]
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decision(t, api.URL, devToken, `{"requestId":"`+write.RequestID+`","decision":"approve"}`))
	decideAs(t, api.URL, leadToken, `{"requestId":"`+write.RequestID+`","decision":"approve"}`)
	d := ofType(untilEvent(t, msgs, &seq, protocol.EventFinish, 1), protocol.EventApprovalDecision)
	require.Len(t, d, 1)
	require.Equal(t, "lead", d[0].By)
}
