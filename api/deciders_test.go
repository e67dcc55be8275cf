package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/config"
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
	write := ofType(untilEvent(t, msgs, &seq, workflows.EventApprovalRequest, 1), workflows.EventApprovalRequest)[0]
	decide := func(token string) string {
		resp, body := send(t, http.MethodPost, api.URL+"/chat/approval", "Bearer "+token, `{"requestId":"`+write.RequestID+`","decision":"approve"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		return body
	}
	require.JSONEq(t, `{"accepted":false,"reason":"forbidden"}`, decide(devToken), "the sender may not approve their own call")
	require.JSONEq(t, `{"accepted":true}`, decide(leadToken))

	events := untilEvent(t, msgs, &seq, workflows.EventFinish, 1)
	d := ofType(events, workflows.EventApprovalDecision)[0]
	require.Equal(t, "lead", d.By)
	require.Equal(t, config.RoleApprove, d.Role)
	require.Equal(t, []string{"call_0_0 Read ok", "call_0_1 Write ok", "call_0_2 Bash ok"}, resultStatuses(ofType(events, workflows.EventToolResult)[0].ToolResults))
}
