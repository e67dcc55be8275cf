package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

const testToken = "tok-0123456789abcdef"

// bearerGate answers 401 to any request without Authorization: Bearer
// testToken, as the API does with TOLLGATE_API_TOKENS set, and records the
// requests it let through.
type bearerGate struct {
	next http.Handler

	mu     sync.Mutex
	passed []string // "METHOD path"
}

func (g *bearerGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate"`)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"the bearer token is not valid"}`)
		return
	}
	g.mu.Lock()
	g.passed = append(g.passed, r.Method+" "+r.URL.Path)
	g.mu.Unlock()
	g.next.ServeHTTP(w, r)
}

func TestChatSendsTheTokenWithEveryRequest(t *testing.T) {
	f := &fakeAPI{t: t, finish: protocol.FinishStop, decided: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /chat/stream", f.chatStream)
	mux.HandleFunc("GET /chat/turns/{turnId}/events", f.resume)
	mux.HandleFunc("POST /chat/approval", f.approval)
	gate := &bearerGate{next: mux}
	ts := httptest.NewServer(gate)
	t.Cleanup(ts.Close)

	var out, errOut strings.Builder
	code := run(context.Background(), []string{"chat", "list", "--api", ts.URL, "--token", testToken},
		noEnv, strings.NewReader("y\n"), &out, &errOut)

	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.Equal(t, []string{
		"POST /chat/stream",
		"GET /chat/turns/" + fakeTurn + "/events", // the resumed stream
		"POST /chat/approval",
	}, gate.passed)
}

func TestApprovalsTakesTheTokenFromTheEnvironmentAndTheFlagWins(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /approvals", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"approvals":[]}`)
	})
	gate := &bearerGate{next: mux}
	ts := httptest.NewServer(gate)
	t.Cleanup(ts.Close)
	envWith := func(token string) func(string) string {
		return func(name string) string {
			if name == EnvToken {
				return token
			}
			return ""
		}
	}

	var out, errOut strings.Builder
	require.Equal(t, exitOK, run(context.Background(), []string{"approvals", "--api", ts.URL}, envWith(testToken),
		strings.NewReader(""), &out, &errOut), errOut.String())
	out.Reset()
	require.Equal(t, exitOK, run(context.Background(), []string{"approvals", "--api", ts.URL, "--token", testToken}, envWith("stale-token"),
		strings.NewReader(""), &out, &errOut), errOut.String())
	require.Equal(t, []string{"GET /approvals", "GET /approvals"}, gate.passed)
}

func TestWithoutTheTokenTheClientSaysHowToGiveIt(t *testing.T) {
	ts := httptest.NewServer(&bearerGate{next: http.NotFoundHandler()})
	t.Cleanup(ts.Close)
	var out, errOut strings.Builder

	code := run(context.Background(), []string{"approvals", "--api", ts.URL}, noEnv, strings.NewReader(""), &out, &errOut)

	require.Equal(t, exitFail, code)
	require.Equal(t, "tollgate approvals: GET /approvals: 401 Unauthorized: the bearer token is not valid "+
		"(give the token with --token or $TOLLGATE_API_TOKEN)\n", errOut.String())
}

func TestCompactAsksTheAPIWithTheInstructionsAndSaysWhatItDid(t *testing.T) {
	var got protocol.CompactRequest
	mux := http.NewServeMux()
	mux.HandleFunc("POST /conversations/{id}/compact", func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "schema:work", r.PathValue("id"))
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
		require.NoError(t, json.NewDecoder(r.Body).Decode(&got))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"compacted": true, "summarized": 40, "kept": 2, "bytesBefore": 409600, "bytesAfter": 20480}`)
	})
	mux.HandleFunc("POST /conversations/nobody/compact", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error": "compact conversation nobody: workflow not found"}`)
	})
	gate := &bearerGate{next: mux}
	ts := httptest.NewServer(gate)
	t.Cleanup(ts.Close)

	var out, errOut strings.Builder
	code := run(context.Background(), []string{"compact", "--conversation", "schema:work", "keep the decisions", "about the schema", "--api", ts.URL, "--token", testToken},
		noEnv, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitOK, code, errOut.String())
	require.Equal(t, "keep the decisions about the schema", got.Instructions)
	require.Equal(t, "Compacted: a summary stands for the first 40 messages, the next turn reads 2 after them whole (400 → 20 KiB); the transcript keeps them all.\n", out.String())

	out.Reset()
	code = run(context.Background(), []string{"compact", "--conversation", "nobody", "--api", ts.URL, "--token", testToken}, noEnv, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut.String(), "404 Not Found: compact conversation nobody: workflow not found")

	errOut.Reset()
	code = run(context.Background(), []string{"compact", "--api", ts.URL}, noEnv, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut.String(), "tollgate compact: no --conversation")
}
