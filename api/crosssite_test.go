package main

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// post sends body to path with the given Content-Type and Origin (none
// when "") and returns the status and the error the API gave.
func post(t *testing.T, url, contentType, origin, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	return doJSON(t, req)
}

// requireNoConversation checks that conversation conv was never started.
func (st *stack) requireNoConversation(t *testing.T, conv string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err := st.client.DescribeWorkflow(ctx, contract.ConversationWorkflowID(conv), "")
	require.True(t, isNotFound(err), "conversation %s was never started: %v", conv, err)
}

func TestAWebPageCannotStartATurnOrDecideOne(t *testing.T) {
	t.Parallel()
	st := newStack(t, withBypassAllowed())
	const forged = `{"query": "tidy up", "conversationId": "cross-site", "bypassApproval": true}`

	// What a page may send with no CORS preflight: text/plain, a form.
	status, msg := post(t, st.api.URL+"/chat/stream", "text/plain", "https://evil.example", forged)
	require.Equal(t, http.StatusForbidden, status, msg)
	status, msg = post(t, st.api.URL+"/chat/stream", "text/plain", "", forged)
	require.Equal(t, http.StatusUnsupportedMediaType, status, msg)
	require.Contains(t, msg, "application/json")
	status, msg = post(t, st.api.URL+"/chat/stream", "application/x-www-form-urlencoded", "", "query=tidy+up")
	require.Equal(t, http.StatusUnsupportedMediaType, status, msg)
	status, msg = post(t, st.api.URL+"/chat/stream", "", "", forged)
	require.Equal(t, http.StatusUnsupportedMediaType, status, msg)
	// JSON from another origin, or from a sandboxed page.
	for _, origin := range []string{"https://evil.example", "null", strings.Replace(st.api.URL, "127.0.0.1", "localhost", 1)} {
		status, msg = post(t, st.api.URL+"/chat/stream", "application/json", origin, forged)
		require.Equal(t, http.StatusForbidden, status, origin)
		require.Contains(t, msg, config.EnvAllowedOrigins)
	}
	st.requireNoConversation(t, "cross-site")
	require.NoFileExists(t, filepath.Join(st.workspace, scripted.DemoNotePath))

	// A pending approval cannot be decided from another site either; the
	// API's own pages (the console) can.
	_, msgs := st.chat(t, `{"query": "tidy up", "conversationId": "cross-site-decide"}`)
	seq := 0
	requests := ofType(untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2), protocol.EventApprovalRequest)
	decision := `{"requestId": "` + requests[0].RequestID + `", "decision": "approve"}`
	status, _ = post(t, st.api.URL+"/chat/approval", "text/plain", "", decision)
	require.Equal(t, http.StatusUnsupportedMediaType, status)
	status, _ = post(t, st.api.URL+"/chat/approval", "application/json", "https://evil.example", decision)
	require.Equal(t, http.StatusForbidden, status)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Len(c, approvalsAt(c, st.api.URL, "?conversationId=cross-site-decide"), 2, "both still wait")
	}, waitFor, 20*time.Millisecond)
	req, err := http.NewRequest(http.MethodPost, st.api.URL+"/chat/approval", strings.NewReader(decision))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Origin", st.api.URL)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the API's own origin decides")
}

func TestAnAllowedOriginMaySendStateChangingRequests(t *testing.T) {
	s := newServer(Options{AllowedOrigins: []string{"https://console.example.com"}}, newFakeSource(), fastSettings)
	ts := serveAPI(t, s)
	// Past the origin check, the body is read: a bad one is a 400.
	status, msg := post(t, ts.URL+"/chat/approval", "application/json", "https://console.example.com", `{}`)
	require.Equal(t, http.StatusBadRequest, status, msg)
	status, _ = post(t, ts.URL+"/chat/approval", "application/json", "https://console.example.com.evil.example", `{}`)
	require.Equal(t, http.StatusForbidden, status)
}

// A page on a name re-pointed at 127.0.0.1 (DNS rebinding) is its own
// origin to the browser; an API without tokens refuses it by its Host, for
// reads too, and answers loopback names. One served beyond loopback on
// purpose (AnyHost) or with tokens answers any name.
func TestAnAPIWithoutTokensAnswersOnlyLoopbackNames(t *testing.T) {
	get := func(ts string, host string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, ts+"/approvals", nil)
		require.NoError(t, err)
		req.Host = host
		return doJSON(t, req)
	}
	ts := serveAPI(t, newServer(Options{}, newFakeSource(), fastSettings))
	status, msg := get(ts.URL, "rebound.example:8080")
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, msg, `"rebound.example:8080"`)
	require.Contains(t, msg, config.EnvAPITokens)
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/chat/approval", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Host, req.Header["Content-Type"], req.Header["Origin"] = "rebound.example:8080", []string{"application/json"}, []string{"http://rebound.example:8080"}
	status, _ = doJSON(t, req)
	require.Equal(t, http.StatusForbidden, status, "the rebound page's own origin decides nothing")
	for _, host := range []string{"localhost:8080", "LOCALHOST", "127.0.0.1:8080", "127.0.0.2", "[::1]:8080"} {
		status, msg := get(ts.URL, host)
		require.NotEqual(t, http.StatusForbidden, status, "%s: %s", host, msg)
	}

	anyHost := serveAPI(t, newServer(Options{AnyHost: true}, newFakeSource(), fastSettings))
	status, msg = get(anyHost.URL, "tollgate.lan:8080")
	require.NotEqual(t, http.StatusForbidden, status, msg)
	withTokens := serveAPI(t, newServer(Options{Tokens: []config.APIToken{{Token: "t", Principal: "p", Roles: []string{config.RoleApprove}}}}, newFakeSource(), fastSettings))
	status, msg = get(withTokens.URL, "tollgate.example.com")
	require.Equal(t, http.StatusUnauthorized, status, "past the host check, the token is asked for: %s", msg)
}

func TestBypassIsRefusedUnlessTheOperatorAllowsIt(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	status, msg := post(t, st.api.URL+"/chat/stream", "application/json", "",
		`{"query": "tidy up", "conversationId": "no-bypass", "bypassApproval": true}`)
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, msg, config.EnvAllowBypass)
	st.requireNoConversation(t, "no-bypass")

	// Allowed, a bypassed turn says so at its start and asks for nothing.
	o := st.apiOptions()
	o.AllowBypass = true
	allowed := serveAPI(t, NewServer(o))
	_, msgs := chatAt(t, allowed.URL, `{"query": "tidy up", "conversationId": "bypass", "bypassApproval": true}`)
	events := streamToEnd(t, msgs)
	require.True(t, events[0].Bypass, "turn_start records the bypass")
	require.Empty(t, ofType(events, protocol.EventApprovalRequest))
	require.FileExists(t, filepath.Join(st.workspace, scripted.DemoNotePath))
}

func TestRolesDecideWhoMaySendDecideAndBypass(t *testing.T) {
	const (
		chatToken    = "chat-0123456789abcdef"
		approveToken = "approve-0123456789abcd"
		bypassToken  = "bypass-0123456789abcde"
		adminToken   = "admin-0123456789abcdef"
	)
	ts := serveAPI(t, newServer(Options{Tokens: []config.APIToken{
		{Token: chatToken, Principal: "dev", Roles: []string{config.RoleChat}},
		{Token: approveToken, Principal: "lead", Roles: []string{config.RoleApprove}},
		{Token: bypassToken, Principal: "ci", Roles: []string{config.RoleBypass, config.RoleChat}},
		{Token: adminToken, Principal: "root", Roles: []string{config.RoleAdmin}},
	}}, newFakeSource(), fastSettings))
	call := func(method, path, token, body string) (int, string) {
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		return doJSON(t, req)
	}
	// Each refused call is a 403 that names the role it needs; one let
	// through reaches the body check (400) or the handler.
	for _, tc := range []struct {
		token, method, path, body string
		want                      int
		role                      string
	}{
		{chatToken, http.MethodPost, "/chat/approval", `{}`, http.StatusForbidden, config.RoleApprove},
		{chatToken, http.MethodGet, "/approvals", "", http.StatusForbidden, config.RoleApprove},
		{chatToken, http.MethodDelete, "/conversations/c1/grants/g1", "", http.StatusForbidden, config.RoleApprove},
		{chatToken, http.MethodPost, "/chat/stream", `{"query": "hi", "bypassApproval": true}`, http.StatusForbidden, config.RoleBypass},
		{chatToken, http.MethodPost, "/chat/stream", `{}`, http.StatusBadRequest, ""},
		{approveToken, http.MethodPost, "/chat/stream", `{}`, http.StatusForbidden, config.RoleChat},
		{approveToken, http.MethodPost, "/chat/tool-result", `{}`, http.StatusForbidden, config.RoleChat},
		{approveToken, http.MethodPost, "/chat/approval", `{}`, http.StatusBadRequest, ""},
		{bypassToken, http.MethodPost, "/chat/stream", `{"bypassApproval": true}`, http.StatusBadRequest, ""},
		{adminToken, http.MethodPost, "/chat/stream", `{"bypassApproval": true}`, http.StatusBadRequest, ""},
		{adminToken, http.MethodPost, "/chat/approval", `{}`, http.StatusBadRequest, ""},
	} {
		status, msg := call(tc.method, tc.path, tc.token, tc.body)
		require.Equal(t, tc.want, status, "%s %s as %s: %s", tc.method, tc.path, strings.Split(tc.token, "-")[0], msg)
		if tc.role != "" {
			require.Contains(t, msg, "role "+tc.role)
		}
	}
}

func TestWithoutTokensTheAPIRefusesToListenBeyondLoopback(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the API")
	}
	bin := proctest.Build(t, "github.com/tollgate/tollgate/api")()
	env := append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_", "HTTP_ADDR"), "TEMPORAL_ADDRESS=127.0.0.1:1")
	port := proctest.FreeAddr(t)[len("127.0.0.1:"):]

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(env, "HTTP_ADDR=0.0.0.0:"+port)
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the API exits at once")
	require.Contains(t, string(out), "listens beyond loopback")
	require.Contains(t, string(out), config.EnvAllowUnauthenticated)

	// Told so explicitly, it serves.
	p := proctest.Start(t, "api", bin, append(env, "HTTP_ADDR=0.0.0.0:"+port, config.EnvAllowUnauthenticated+"=true"))
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true // 503 without Temporal, but it answers
	}, waitFor, 20*time.Millisecond, "the API serves:\n%s", p.Log())
}
