package main

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// stack is a real Temporal dev server, a worker in this process with the
// scripted demo model (unless withoutWorker), and the API over real HTTP.
type stack struct {
	temporal *devserver.Server
	// client is the worker's and the test's; apiClient the API's.
	client, apiClient client.Client
	// auditDB is the path of the audit ledger's SQLite file; ledger is it,
	// open.
	auditDB string
	ledger  *auditdb.Ledger
	// links checks the API's decision links, or is nil.
	links *links.Key
	// apiNoLedger keeps the ledger from the stack's API.
	apiNoLedger bool
	// worker is nil withoutWorker.
	worker worker.Worker
	api    *httptest.Server
	// model serves the stack's script as an OpenAI-compatible server.
	model *httptest.Server
	// replies is the scripted server behind model: the requests it got and
	// when.
	replies *scripted.Server
	// workspace is the folder the tools work in.
	workspace string
	// queue is the task queue of the stack's conversations.
	queue string
	log   *slog.Logger
	// allowBypass is withBypassAllowed's.
	allowBypass bool
	// payloadDir holds the payloads withPayloadStore keeps out of history.
	payloadDir string
	// tracer is withTracing's.
	tracer trace.TracerProvider
	// heldReads watches the API's client for reads Temporal held.
	heldReads *heldReads
	// admin is what the worker read of the control workflow.
	admin *contract.ControlWatcher
}

// heldReads counts the history reads of the API's client that were no long
// polls and that Temporal answered with no event, or not before their
// deadline: it held them, as it holds a read of the close event of a
// workflow that runs until that workflow closes or the read's deadline is
// near. Nothing the API means to answer at once may wait so.
type heldReads struct{ n atomic.Int32 }

func (r *heldReads) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	in, ok := req.(*workflowservice.GetWorkflowExecutionHistoryRequest)
	if !ok || in.GetWaitNewEvent() {
		return err
	}
	out, _ := reply.(*workflowservice.GetWorkflowExecutionHistoryResponse)
	if (err == nil && len(out.GetHistory().GetEvents()) == 0) || status.Code(err) == codes.DeadlineExceeded {
		r.n.Add(1)
	}
	return err
}

// stackOptions change what newStack builds.
type stackOptions struct {
	script          scripted.Script
	approvalTimeout time.Duration
	noWorker        bool
	settings        []func(*workflows.Settings)
	activities      map[string]any
	allowBypass     bool
	payloads        bool
	devserver       devserver.Options
	tracer          trace.TracerProvider
	auditDB         string
	links           *links.Key
	window          int
	apiNoLedger     bool
}

// stackOption is one change to the stack newStack builds.
type stackOption func(*stackOptions)

// withAPIWithoutLedger has the stack's API read no audit ledger
// (TOLLGATE_AUDIT_DB=off on the API): GET /approvals asks the turns, and
// GET /audit is 404. The worker still writes it.
func withAPIWithoutLedger() stackOption {
	return func(o *stackOptions) { o.apiNoLedger = true }
}

// withLinks has the stack's API check decision links with key.
func withLinks(key *links.Key) stackOption {
	return func(o *stackOptions) { o.links = key }
}

// withAuditDB keeps the stack's audit ledger in dsn (a postgres:// URL)
// instead of a SQLite file of its own.
func withAuditDB(dsn string) stackOption {
	return func(o *stackOptions) { o.auditDB = dsn }
}

// withScript makes the model answer with script instead of scripted.Demo.
func withScript(script scripted.Script) stackOption {
	return func(o *stackOptions) { o.script = script }
}

// withModelWindow gives the stack's model a context window of tokens, past
// which it answers 400 context_length_exceeded as OpenAI does.
func withModelWindow(tokens int) stackOption {
	return func(o *stackOptions) { o.window = tokens }
}

// withApprovalTimeout sets how long a call waits for a decision (default a
// minute).
func withApprovalTimeout(d time.Duration) stackOption {
	return func(o *stackOptions) { o.approvalTimeout = d }
}

// withSettings changes the worker's settings (subagents, policy rules, ...).
func withSettings(change func(*workflows.Settings)) stackOption {
	return func(o *stackOptions) { o.settings = append(o.settings, change) }
}

// withActivity registers fn as an extra activity named name on the stack's
// worker: with a ToolSpec of that name added by withSettings, a tool that
// only tests have.
func withActivity(name string, fn any) stackOption {
	return func(o *stackOptions) {
		if o.activities == nil {
			o.activities = map[string]any{}
		}
		o.activities[name] = fn
	}
}

// withBypassAllowed lets the stack's API, which has no tokens, take
// bypassApproval (TOLLGATE_ALLOW_BYPASS).
func withBypassAllowed() stackOption {
	return func(o *stackOptions) { o.allowBypass = true }
}

// testWebUIOrigin is where the tests' Web UI would be served from.
const testWebUIOrigin = "http://127.0.0.1:8233"

// withPayloadStore gives the stack's worker and API a payload store (a
// local folder, st.payloadDir): payloads past the default threshold leave
// history, as they do for make dev.
func withPayloadStore() stackOption {
	return func(o *stackOptions) { o.payloads = true }
}

// withDevServer starts the stack's dev server with opts (lower limits, say).
func withDevServer(opts devserver.Options) stackOption {
	return func(o *stackOptions) { o.devserver = opts }
}

// withTracing traces the stack's worker, its Temporal client and its API
// with tp, as the binaries do when an OTLP endpoint is set.
func withTracing(tp trace.TracerProvider) stackOption {
	return func(o *stackOptions) { o.tracer = tp }
}

// withoutWorker leaves the worker to the test, which may run it as a
// separate process on st.queue with st.workspace and st.model.
func withoutWorker() stackOption {
	return func(o *stackOptions) { o.noWorker = true }
}

func newStack(t *testing.T, opts ...stackOption) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Temporal dev server")
	}
	o := stackOptions{script: scripted.Demo(), approvalTimeout: time.Minute}
	for _, opt := range opts {
		opt(&o)
	}
	st := &stack{temporal: devserver.ForTestWith(t, o.devserver), queue: "tollgate-api-test", allowBypass: o.allowBypass, tracer: o.tracer, links: o.links, apiNoLedger: o.apiNoLedger}
	clientOpts := st.temporal.ClientOptions()
	if o.tracer != nil {
		clientOpts.Interceptors = append(clientOpts.Interceptors, telemetry.NewTracingInterceptor(o.tracer))
	}
	if o.payloads {
		st.payloadDir = t.TempDir()
		clientOpts.ExternalStorage, _, _ = payloads.Storage(payloads.Config{Dir: st.payloadDir})
	}
	c, err := client.Dial(clientOpts)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	st.client = c
	// The API has a client of its own, as in production, where it is
	// another process: it shares no connection and no payload store limits
	// with the worker.
	if o.payloads {
		clientOpts.ExternalStorage, _, _ = payloads.Storage(payloads.Config{Dir: st.payloadDir})
	}
	st.heldReads = &heldReads{}
	clientOpts.ConnectionOptions.DialOptions = append(clientOpts.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(st.heldReads.intercept))
	st.apiClient, err = client.Dial(clientOpts)
	require.NoError(t, err)
	t.Cleanup(st.apiClient.Close)
	st.log = testLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, workflows.EnsureSearchAttributes(ctx, c, st.temporal.Namespace, st.log))

	st.replies = scripted.New(o.script, scripted.Window(o.window))
	st.model = httptest.NewServer(st.replies)
	t.Cleanup(st.model.Close)
	st.workspace = t.TempDir()
	// Every stack keeps an audit ledger, as a worker and an API do by
	// default: its worker writes it and its API reads it.
	st.auditDB = cmp.Or(o.auditDB, filepath.Join(t.TempDir(), "audit.db"))
	st.ledger, err = auditdb.Open(ctx, st.auditDB)
	require.NoError(t, err)
	t.Cleanup(func() { st.ledger.Close() })
	require.NoError(t, os.WriteFile(filepath.Join(st.workspace, "README.md"), []byte("# demo\n"), 0o644))
	if !o.noWorker {
		tools := stackTools(st.workspace)
		wf := &workflows.Workflows{Settings: stackSettings(tools, o.approvalTimeout)}
		for _, change := range o.settings {
			change(&wf.Settings)
		}
		// The worker watches the control workflow, as a worker does.
		st.admin = contract.NewControlWatcher()
		wf.Admin = st.admin
		watch, stop := context.WithCancel(context.Background())
		t.Cleanup(stop)
		go st.admin.Watch(watch, c, nil)
		st.worker = worker.New(c, st.queue, workflows.WorkerOptions())
		model := activities.NewModel(st.model.URL+"/v1", "test", scripted.ModelName, workflows.TokenSignaler{Client: c})
		tools.Ledger, model.Ledger = st.ledger, st.ledger
		workflows.Register(st.worker, wf, model, tools)
		workflows.RegisterAuditor(st.worker, &activities.Auditor{Ledger: st.ledger})
		workflows.RegisterPolicyTester(st.worker, &workflows.PolicyTester{Settings: wf.Settings, Ledger: st.ledger})
		for name, fn := range o.activities {
			st.worker.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
		}
		require.NoError(t, st.worker.Start())
		t.Cleanup(st.worker.Stop)
	}
	st.api = st.newAPI(t)
	return st
}

// stackTools are the tool activities of a stack's worker.
func stackTools(workspace string) *activities.Tools {
	return &activities.Tools{Workspace: workspace, BashTimeout: 10 * time.Second}
}

// stackSettings are the settings of a stack's worker before withSettings
// changes them.
func stackSettings(tools *activities.Tools, approvalTimeout time.Duration) workflows.Settings {
	return workflows.Settings{
		RequiredTools:    []string{protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash},
		ApprovalTimeout:  approvalTimeout,
		Tools:            tools.Specs(),
		WorkspaceRoots:   []string{tools.Workspace},
		SearchAttributes: true,
		StatusAttribute:  true,
		Audit:            true,
	}
}

// newAPI starts another API instance on the stack's Temporal: it shares
// nothing with the others but Temporal.
func (st *stack) newAPI(t *testing.T) *httptest.Server {
	t.Helper()
	return serveAPI(t, NewServer(st.apiOptions()))
}

// apiOptions are the options of the stack's API instances.
func (st *stack) apiOptions() Options {
	o := Options{Client: st.apiClient, WatchControl: true, TaskQueue: st.queue, HeartbeatInterval: 200 * time.Millisecond, Logger: st.log, AllowBypass: st.allowBypass, TracerProvider: st.tracer, Ledger: st.ledger, Links: st.links}
	if st.apiNoLedger {
		o.Ledger = nil
	}
	if st.payloadDir != "" {
		storage, _, _ := payloads.Storage(payloads.Config{Dir: st.payloadDir})
		o.Codec, o.CodecOrigins = payloads.Codec(storage, codecDecodeBytes), []string{testWebUIOrigin}
	}
	return o
}

// chat posts a message and returns the stream's response and messages.
func (st *stack) chat(t *testing.T, body string) (*http.Response, <-chan sseMessage) {
	t.Helper()
	return chatAt(t, st.api.URL, body)
}

// chatAt posts a message to the API at baseURL and returns the stream's
// response and messages.
func chatAt(t *testing.T, baseURL, body string) (*http.Response, <-chan sseMessage) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, baseURL+"/chat/stream", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return resp, readSSE(resp.Body)
}

// requireNotice checks a message without an id: a keep-alive, or the
// API's notice that the turn is queued behind another one of its
// conversation, which a stream may get while the turn before still ends.
func requireNotice(t require.TestingT, m sseMessage) {
	if m.Data == `{"type":"heartbeat"}` {
		return
	}
	var notice protocol.Event
	require.NoError(t, json.Unmarshal([]byte(m.Data), &notice), m.Data)
	switch notice.Type {
	case protocol.EventGateFrozen, protocol.EventGateThawed:
		return
	}
	require.Equal(t, protocol.EventQueued, notice.Type, "only keep-alives, the queued notice and the gate's go without an id: %s", m.Data)
	require.NotEmpty(t, notice.TurnID, m.Data)
}

// requireQueued checks that m is the notice, outside the turn's log, that
// turnID waits in conversation conv's queue.
func requireQueued(t require.TestingT, m sseMessage, conv, turnID string) {
	require.False(t, m.HasID, "the notice is not part of the turn's log: %s", m.Data)
	require.JSONEq(t, `{"seq":0,"type":"queued","conversationId":"`+conv+`","turnId":"`+turnID+`"}`, m.Data)
}

// untilEvent reads numbered events until one of type typ (n of them when n
// > 1), checking that ids go up by one from want, and returns them all.
func untilEvent(t *testing.T, msgs <-chan sseMessage, want *int, typ string, n int) []protocol.Event {
	t.Helper()
	var got []protocol.Event
	for n > 0 {
		m, ok := nextMessage(t, msgs)
		require.True(t, ok, "stream ended before %s", typ)
		if !m.HasID {
			requireNotice(t, m)
			continue
		}
		e := decodeEvent(t, m)
		*want++
		require.Equal(t, strconv.Itoa(*want), m.ID)
		require.Equal(t, *want, e.Seq)
		got = append(got, e)
		if e.Type == typ {
			n--
		}
	}
	return got
}

func (st *stack) postJSON(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(st.api.URL+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func (st *stack) approvals(t *testing.T, query string) []protocol.PendingApproval {
	t.Helper()
	return approvalsAt(t, st.api.URL, query)
}

// approvalsAt lists the pending approvals of the API at baseURL. t may be
// an Eventually's *assert.CollectT.
func approvalsAt(t require.TestingT, baseURL, query string) []protocol.PendingApproval {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	resp, err := http.Get(baseURL + "/approvals" + query)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct {
		Approvals []protocol.PendingApproval `json:"approvals"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Approvals
}

func TestTurnStreamsThroughApprovalsToFinishOnRealTemporal(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	resp, msgs := st.chat(t, `{"query": "hello", "conversationId": "it-1"}`)
	turnID := resp.Header.Get(protocol.HeaderTurnID)
	require.Equal(t, contract.TurnWorkflowID("it-1", 1), turnID)

	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2)
	require.Equal(t, protocol.EventTurnStart, events[0].Type)
	require.Equal(t, turnID, events[0].TurnID)
	requests := requestsByTool(events)
	require.Len(t, requests, 2)

	// A second client on the same turn shares the poller.
	_, second, _ := openStream(t, eventsURL(st.api, turnID), http.Header{"Last-Event-ID": {"1"}})
	m, ok := nextMessage(t, second)
	require.True(t, ok)
	require.Equal(t, "2", m.ID)
	require.EqualValues(t, 1, metric(t, st.api, "tollgate_api_pollers_started_total"))

	require.EventuallyWithT(t, func(c *assert.CollectT) { require.Len(c, approvalsAt(c, st.api.URL, ""), 2) }, waitFor, 20*time.Millisecond)
	require.Len(t, st.approvals(t, "?tool="+protocol.ToolBash), 1)
	require.Len(t, st.approvals(t, "?conversationId=it-1"), 2)
	require.Empty(t, st.approvals(t, "?conversationId=other"))

	write, bash := requests[protocol.ToolWrite].RequestID, requests[protocol.ToolBash].RequestID
	postDecision(t, st.api, write, protocol.DecisionApprove, "", true)
	// A retry of the same decision (its answer lost, say) is told the
	// first attempt's outcome; another decision is told why not.
	postDecision(t, st.api, write, protocol.DecisionApprove, "", true)
	require.Equal(t, protocol.RejectDecided, postDecision(t, st.api, write, protocol.DecisionDecline, "", false))
	require.Equal(t, protocol.RejectUnknown, postDecision(t, st.api, write+"x", protocol.DecisionApprove, "", false)) // forged
	forged := contract.NewRequestID(contract.ConversationWorkflowID("it-1"), "x")
	postDecision(t, st.api, forged, protocol.DecisionApprove, "", false) // a workflow with no approval update
	// Both refusals came at once: the API looked whether the turn, and the
	// conversation, had been ended for a lost payload without waiting on
	// the close event of a workflow that runs.
	require.Zero(t, st.heldReads.n.Load(), "history reads of the API that Temporal held")
	postDecision(t, st.api, bash, protocol.DecisionDecline, "not now", true)

	rest := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	finish := rest[len(rest)-1]
	require.Equal(t, protocol.FinishStop, finish.Reason)
	_, ok = nextMessage(t, msgs)
	require.False(t, ok, "the stream ends after finish")
	require.Empty(t, st.approvals(t, ""))

	// The turn has ended: a stream from its start comes from its result,
	// even with no worker to answer a query.
	st.worker.Stop()
	_, replay, _ := openStream(t, eventsURL(st.api, turnID)+"?after=0", nil)
	var ids []string
	for _, m := range drain(t, replay) {
		if !m.HasID {
			// A keep-alive, while the hub learns the turn has ended (a
			// loaded machine takes longer than the 200 ms interval).
			require.JSONEq(t, `{"type":"heartbeat"}`, m.Data)
			continue
		}
		ids = append(ids, m.ID)
	}
	require.Len(t, ids, seq)
	require.Equal(t, strconv.Itoa(seq), ids[len(ids)-1])
}

func TestApprovalOfAnEndedTurnIsNotAccepted(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	_, msgs := st.chat(t, `{"query": "hi", "conversationId": "it-2"}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 2)
	requests := ofType(events, protocol.EventApprovalRequest)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, st.client.TerminateWorkflow(ctx, contract.TurnWorkflowID("it-2", 1), "", "test"))

	postDecision(t, st.api, requests[0].RequestID, protocol.DecisionApprove, "", false)
}

func TestStreamOfAConversationsWorkflowEndsWithAnError(t *testing.T) {
	t.Parallel()
	// A conversation's workflow id passes as a tollgate id, but it has no
	// events: the stream ends with an error instead of asking again forever.
	st := newStack(t)
	_, msgs := st.chat(t, `{"query": "hi", "conversationId": "it-4"}`)
	seq := 0
	untilEvent(t, msgs, &seq, protocol.EventApprovalRequest, 1)

	_, conv, _ := openStream(t, eventsURL(st.api, contract.ConversationWorkflowID("it-4")), nil)
	got := drain(t, conv)
	require.NotEmpty(t, got)
	last := got[len(got)-1]
	require.False(t, last.HasID)
	e := decodeEvent(t, last)
	require.Equal(t, protocol.EventError, e.Type)
	require.Contains(t, e.Message, "cannot be streamed as a turn")
}

func TestHealthzAnswersOKWithTemporalUp(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	resp, err := http.Get(st.api.URL + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"ok":true}`, string(body))
}

func TestNewMessageInTheSameConversationStreamsTheNextTurn(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	_, first := st.chat(t, `{"query": "one", "conversationId": "it-3"}`)
	seq1 := 0
	untilEvent(t, first, &seq1, protocol.EventApprovalRequest, 2)

	resp, second := st.chat(t, `{"query": "two", "conversationId": "it-3"}`)
	require.Equal(t, contract.TurnWorkflowID("it-3", 2), resp.Header.Get(protocol.HeaderTurnID))

	// The new message declines what the first turn waits for, and it ends.
	rest := untilEvent(t, first, &seq1, protocol.EventFinish, 1)
	var decisions []string
	for _, e := range ofType(rest, protocol.EventApprovalDecision) {
		decisions = append(decisions, e.Decision)
	}
	require.Equal(t, []string{protocol.DecisionDecline, protocol.DecisionDecline}, decisions)

	seq2 := 0
	events := untilEvent(t, second, &seq2, protocol.EventApprovalRequest, 2)
	require.Equal(t, contract.TurnWorkflowID("it-3", 2), events[0].TurnID)
}
