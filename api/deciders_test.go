package main

import (
	"net/http"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
)

func TestASecondPersonMustApproveWhatTheSenderAsked(t *testing.T) {
	st := newStack(t, withSettings(func(s *workflows.Settings) {
		s.Rules = []workflows.Rule{
			{Tool: activities.ToolWrite, Require: workflows.RequireAlways, SecondPerson: true},
			{Tool: activities.ToolBash, Require: workflows.RequireNever},
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
	decide := func(token string) string {
		resp, body := send(t, http.MethodPost, api.URL+"/chat/approval", "Bearer "+token, `{"requestId":"`+write.RequestID+`","decision":"approve"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		return body
	}
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decide(devToken), "the sender may not approve their own call")
	require.JSONEq(t, `{"accepted":true}`, decide(leadToken))

	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	d := ofType(events, protocol.EventApprovalDecision)[0]
	require.Equal(t, "lead", d.By)
	require.Equal(t, config.RoleApprove, d.Role)
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write ok", "call_0_2 Bash ok"}, resultStatuses(ofType(events, protocol.EventToolResult)[0].ToolResults))
}

func TestAClientToolThePolicyProtectsAsksBeforeTheClientIsToldToRunIt(t *testing.T) {
	script := func(req openai.ChatCompletionRequest) scripted.Reply {
		if countRole(req.Messages, openai.ChatMessageRoleTool) > 0 {
			return scripted.Reply{Content: "Paid."}
		}
		return scripted.Reply{ToolCalls: []activities.ToolCall{{ID: "call_pay", Name: "Pay", Arguments: `{"amount":12.5}`}}}
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
