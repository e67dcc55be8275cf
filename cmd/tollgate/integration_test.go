package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// realStack is a Temporal dev server, an in-process worker on the scripted
// demo model with a metrics registry, and the real API as a process.
type realStack struct {
	api       string
	workspace string
	metrics   *metrics.Registry
}

func startRealStack(t *testing.T) *realStack {
	t.Helper()
	// The worker and the API share the audit ledger, as production.md
	// has them: the inbox the terminal lists is read from it.
	l := newLedgerAPI(t)
	ctx, srv, ledger := l.ctx, l.srv, l.ledger

	reg, err := metrics.New(workflows.MetricHelp)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	workflows.AddApprovalsPending(reg)
	opts := srv.ClientOptions()
	opts.MetricsHandler = reg.Handler()
	c, err := client.Dial(opts)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.NoError(t, workflows.EnsureSearchAttributes(ctx, c, srv.Namespace, slog.New(slog.DiscardHandler)))

	modelServer := httptest.NewServer(scripted.New(scripted.Demo()))
	t.Cleanup(modelServer.Close)
	workspace := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(workspace, "README.md"), []byte("# the workspace readme\n"), 0o644))
	tools := &activities.Tools{Workspace: workspace, BashTimeout: 10 * time.Second, Ledger: ledger}
	model := activities.NewModel(modelServer.URL+"/v1", "test", scripted.ModelName, workflows.TokenSignaler{Client: c})
	model.Ledger = ledger
	queue := "tollgate-cli-" + uuid.NewString()
	w := worker.New(c, queue, workflows.WorkerOptions())
	workflows.RegisterAuditor(w, &activities.Auditor{Ledger: ledger})
	settings := workflows.Settings{
		RequiredTools:    []string{protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash},
		ApprovalTimeout:  5 * time.Minute,
		MaxSteps:         5,
		Tools:            tools.Specs(),
		WorkspaceRoots:   []string{workspace},
		ToolTimeout:      30 * time.Second,
		SearchAttributes: true,
		Audit:            true,
	}
	workflows.Register(w, &workflows.Workflows{Settings: settings}, model, tools)
	workflows.RegisterPolicyTester(w, &workflows.PolicyTester{Settings: settings, Ledger: ledger})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	addr := l.serve(t, config.EnvTaskQueue+"="+queue, config.EnvHeartbeatInterval+"=1s")
	return &realStack{api: "http://" + addr, workspace: workspace, metrics: reg}
}

// ledgerAPI is what the tests that serve a ledger through the real API
// share: a dev server, the API's binary and a SQLite ledger, with a
// context for the test's calls.
type ledgerAPI struct {
	ctx    context.Context
	srv    *devserver.Server
	apiBin string
	path   string
	ledger *auditdb.Ledger
}

// newLedgerAPI builds the API and starts a dev server, and opens an empty
// ledger. The API is package main: the test runs it as the process it is.
func newLedgerAPI(t *testing.T) *ledgerAPI {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Temporal dev server and the API")
	}
	// Nothing else runs meanwhile: the build is the slow part when cold.
	apiBin := proctest.Build(t, "github.com/tollgate/tollgate/api")()
	srv := devserver.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	path := filepath.Join(t.TempDir(), "audit.db")
	ledger, err := auditdb.Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { ledger.Close() })
	return &ledgerAPI{ctx: ctx, srv: srv, apiBin: apiBin, path: path, ledger: ledger}
}

// serve starts the API on l's server and ledger, with env added, and
// answers its address once it is healthy.
func (l *ledgerAPI) serve(t *testing.T, env ...string) string {
	t.Helper()
	addr := proctest.FreeAddr(t)
	runAPI(t, l.apiBin, addr, append(append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_", "HTTP_ADDR"),
		config.EnvHTTPAddr+"="+addr,
		config.EnvTemporalAddress+"="+l.srv.HostPort,
		config.EnvTemporalNamespace+"="+l.srv.Namespace,
		config.EnvAuditDB+"="+l.path,
	), env...))
	return addr
}

// runAPI starts the API, listening on addr, and waits until /healthz
// answers 200.
func runAPI(t *testing.T, bin, addr string, env []string) {
	t.Helper()
	api := proctest.Start(t, "api", bin, env)
	healthz := "http://" + addr + "/healthz"
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(healthz)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-api.Exited:
			t.Fatalf("the API exited before it was healthy:\n%s", api.Log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: not 200 within 60s (last error: %v)", healthz, err)
		}
	}
}

func TestTerminalClientOnTheRealStack(t *testing.T) {
	st := startRealStack(t)

	t.Run("chat declines Write with a reason and approves Bash", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out, errOut strings.Builder
		// The demo model asks for Read, Write and Bash at once; Write and
		// Bash are protected and asked in that order.
		code := run(ctx, []string{"chat", "tidy up the workspace", "--api", st.api}, noEnv,
			strings.NewReader("r\nno notes today\ny\n"), &out, &errOut)
		text := out.String()
		require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", text, errOut.String())
		t.Logf("tollgate chat printed:\n%s", text)

		require.Regexp(t, `(?m)^conversation [0-9a-f-]{36}$`, text)
		require.Contains(t, text, scripted.DemoIntro)
		require.Contains(t, text, "→ Read ")
		require.Contains(t, text, "→ Write ")
		require.Contains(t, text, `→ Bash {"command":"ls -la"}`)
		require.Less(t, strings.Index(text, "? Write wants to run:"), strings.Index(text, "? Bash wants to run:"))
		require.Contains(t, text, "sent: decline Write (no notes today)\n")
		require.Contains(t, text, "sent: approve Bash\n")
		require.Contains(t, text, "declined Write: no notes today\n")
		require.Contains(t, text, "approved Bash\n")
		require.Contains(t, text, "← Read ok: ")
		require.Contains(t, text, "← Write declined: Not executed: a person declined this call.")
		require.Contains(t, text, "← Bash ok: ")
		require.Contains(t, text, "finish: stop\n")
		require.Regexp(t, `continue with: tollgate chat --conversation [0-9a-f-]{36} "..."`, text)
		require.NoFileExists(t, filepath.Join(st.workspace, scripted.DemoNotePath))

		// The worker's registry saw one request per protected call and one
		// decision of each kind, from the turn's workflow code.
		turn := map[string]string{"workflow_type": contract.ChatTurnWorkflow}
		require.Equal(t, 2.0, st.metrics.Sum(workflows.ApprovalRequestsMetric, turn))
		require.Equal(t, 1.0, st.metrics.Sum(workflows.ApprovalDecisionsMetric, map[string]string{"workflow_type": contract.ChatTurnWorkflow, workflows.MetricTagDecision: protocol.DecisionApprove}))
		require.Equal(t, 1.0, st.metrics.Sum(workflows.ApprovalDecisionsMetric, map[string]string{"workflow_type": contract.ChatTurnWorkflow, workflows.MetricTagDecision: protocol.DecisionDecline}))
		require.EqualValues(t, 1, st.metrics.Count(workflows.ApprovalDecisionLatencyMetric, map[string]string{workflows.MetricTagDecision: protocol.DecisionApprove}))
		// The SDK's own metrics name each tool's activity.
		require.GreaterOrEqual(t, st.metrics.Count("temporal_activity_execution_latency_seconds", map[string]string{"activity_type": protocol.ToolBash}), uint64(1))
		require.GreaterOrEqual(t, st.metrics.Count("temporal_activity_execution_latency_seconds", map[string]string{"activity_type": activities.ModelActivity}), uint64(2))
		pending, err := testutil.GatherAndFormat(st.metrics, expfmt.TypeTextPlain, workflows.ApprovalsPendingMetric)
		require.NoError(t, err)
		require.Contains(t, string(pending), "\ntollgate_approvals_pending 0\n")

		// The API counted the two decisions it delivered.
		apiMetrics := get(t, st.api+"/metrics")
		require.Contains(t, apiMetrics, `tollgate_api_approval_decisions_total{decision="approve",outcome="accepted"} 1`+"\n")
		require.Contains(t, apiMetrics, `tollgate_api_approval_decisions_total{decision="decline",outcome="accepted"} 1`+"\n")
	})

	t.Run("approvals lists a waiting turn's calls and --decide decides them", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		conv := "cli-" + uuid.NewString()
		api := newAPIClient(st.api)
		resp, err := api.startChat(ctx, protocol.ChatRequest{Query: "tidy up again", ConversationID: conv})
		require.NoError(t, err)
		finished := make(chan string, 1)
		go func() {
			defer resp.Body.Close()
			reason := ""
			_ = protocol.ReadSSE(resp.Body, func(m protocol.SSEMessage) error {
				if e, _, err := decodeEvent(m); err == nil && e.Type == protocol.EventFinish {
					reason = e.Reason
					return errFinished
				}
				return nil
			})
			finished <- reason
		}()
		require.Eventually(t, func() bool {
			list, err := api.pending(ctx, conv, "")
			return err == nil && len(list) == 2
		}, 30*time.Second, 50*time.Millisecond)

		var out, errOut strings.Builder
		require.Equal(t, exitOK, run(ctx, []string{"approvals", "--conversation", conv, "--api", st.api}, noEnv, strings.NewReader(""), &out, &errOut), errOut.String())
		require.Regexp(t, `(?m)^AGE +EXPIRES +TOOL +ARGUMENTS +REQUEST$`, out.String())
		require.Regexp(t, `(?m)^\d+s +in 4m +Bash +\{"command":"ls -la"\} +tollgate-conv-`+conv+`-turn-1/apr-[0-9a-f]{32}$`, out.String())
		require.Regexp(t, `(?m)^\d+s +in 4m +Write +\{"file_path":"notes/tollgate.txt",.*$`, out.String())

		// One tool at a time, so the answers meet the calls they are for.
		out.Reset()
		require.Equal(t, exitOK, run(ctx, []string{"approvals", "--decide", "--conversation", conv, "--tool", "Write", "--api", st.api}, noEnv,
			strings.NewReader("r\nnot again\n"), &out, &errOut), errOut.String())
		require.Contains(t, out.String(), "sent: decline Write (not again)\n")
		require.Equal(t, exitOK, run(ctx, []string{"approvals", "--decide", "--conversation", conv, "--tool", "Bash", "--api", st.api}, noEnv,
			strings.NewReader("y\n"), &out, &errOut), errOut.String())
		require.Contains(t, out.String(), "sent: approve Bash\n")

		select {
		case reason := <-finished:
			require.Equal(t, protocol.FinishStop, reason)
		case <-ctx.Done():
			t.Fatal("the turn did not finish after both decisions")
		}
	})

	// The ledger now holds two declined Writes and two approved Bash
	// calls (the turns above), which a worker reads.
	t.Run("policy test fails on a policy that lets a declined call run, and passes the one the calls ran under", func(t *testing.T) {
		code, out, errOut := testPolicyFile(t, st, "tools:\n  Write:\n    require: never\n", "test", "--since", "1h")
		require.Equal(t, exitFail, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		t.Logf("tollgate policy test printed:\n%s", out)
		require.Contains(t, out, ": no examples\n")
		require.Regexp(t, `(?m)^4 calls that asked \(rows since .*\):$`, out)
		require.Regexp(t, `(?m)^Write +rule Write: never +2 +2 +0 +0 +0 +0$`, out)
		require.Regexp(t, `(?m)^Bash +default: Bash is a protected tool +2 +0 +0 +0 +2 +0$`, out)
		require.Regexp(t, `(?m)^DECLINED by a person, and would now run without one:\n  .* Write \{"file_path":"notes/tollgate.txt",.*\}  \(decline by person; tollgate-conv-`, out)
		require.NotContains(t, out, "Would now run without a person")

		code, out, errOut = testPolicyFile(t, st, "tools:\n  Write:\n    require: always\n  Bash:\n    require: always\n", "test")
		require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		require.NotContains(t, out, "DECLINED by a person")

		code, _, errOut = testPolicyFile(t, st, "tools:\n  Bash:\n    when: args.command.startsWith(\n", "test")
		require.Equal(t, exitFail, code)
		require.Contains(t, errOut, `POST /policy/test: 400 Bad Request: the policy: tool Bash: when "args.command.startsWith("`)
	})

	t.Run("policy check runs the examples alone", func(t *testing.T) {
		policy := "tools:\n  Write:\n    when: '!args.file_path.startsWith(\"docs/\")'\n    examples:\n      ask: [{file_path: src/a.go, content: x}]\n      allow: [{file_path: " + st.workspace + "/docs/a.md, content: x}]\n"
		code, out, errOut := testPolicyFile(t, st, policy, "check")
		require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		require.Contains(t, out, ": 2 examples, all hold\n")

		code, out, _ = testPolicyFile(t, st, policy+"  Bash:\n    require: never\n    examples: {ask: [{command: ls}]}\n", "check")
		require.Equal(t, exitFail, code)
		require.Contains(t, out, ": 1 of 3 examples fail:\n  tool Bash, ask {\"command\":\"ls\"}: the rule lets it run without a person\n")
	})
}

func TestSinceIsDaysADurationOrATime(t *testing.T) {
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"7d": now.AddDate(0, 0, -7), "36h": now.Add(-36 * time.Hour), "2026-12-01T09:00:00Z": time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC),
	} {
		got, err := parseSince(in, now)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := parseSince("a week", now)
	require.EqualError(t, err, `--since "a week" is not a number of days (7d), a duration (36h) or an RFC 3339 time`)
}

// testPolicyFile runs `tollgate policy SUB` on a policy file holding
// policy, and answers its exit code and what it printed.
func testPolicyFile(t *testing.T, st *realStack, policy string, args ...string) (int, string, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(file, []byte(policy), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	code := run(ctx, append(append([]string{"policy"}, args[0], file, "--api", st.api), args[1:]...), noEnv, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", url, body)
	return string(body)
}
