package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/protocol"
)

func TestFreezeAndThawAskTheAPIAndSayWhatTheGateDoesNow(t *testing.T) {
	var froze protocol.FreezeRequest
	var thawed protocol.ThawRequest
	mux := http.NewServeMux()
	mux.HandleFunc("POST /admin/freeze", func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
		require.NoError(t, json.NewDecoder(r.Body).Decode(&froze))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"frozen":true,"blockNewTurns":%t,"by":"root","at":"2026-12-05T00:00:00Z","reason":%q}`, froze.BlockNewTurns, froze.Reason)
	})
	mux.HandleFunc("POST /admin/thaw", func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, json.NewDecoder(r.Body).Decode(&thawed))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"the gate is not frozen"}`)
	})
	ts := httptest.NewServer(&bearerGate{next: mux})
	t.Cleanup(ts.Close)

	var out, errOut strings.Builder
	code := run(context.Background(), []string{"freeze", "--block-new-turns", "--reason", "incident 42", "--api", ts.URL, "--token", testToken},
		noEnv, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitOK, code, errOut.String())
	require.Equal(t, protocol.FreezeRequest{Reason: "incident 42", BlockNewTurns: true}, froze)
	require.Equal(t, "The gate is frozen (by root at 2026-12-05T00:00:00Z: incident 42): every protected call asks a person, and no new message starts a turn. Thaw it with: tollgate thaw\n", out.String())

	code = run(context.Background(), []string{"thaw", "--reason", "over", "--api", ts.URL, "--token", testToken}, noEnv, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitFail, code)
	require.Equal(t, "over", thawed.Reason)
	require.Contains(t, errOut.String(), "tollgate thaw: POST /admin/thaw: 400 Bad Request: the gate is not frozen")

	errOut.Reset()
	code = run(context.Background(), []string{"thaw", "--block-new-turns", "--api", ts.URL}, noEnv, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitUsage, code, "only freeze blocks new turns")
	code = run(context.Background(), []string{"freeze", "because", "--api", ts.URL}, noEnv, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut.String(), "a reason goes in --reason")
}
