package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/links"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// Options are what the server needs from main.
type Options struct {
	// Client is the one Temporal client of the process.
	Client client.Client
	// TemporalAddress is where Client connects (host:port), which the
	// answers name when Temporal is unavailable; "" names it "Temporal".
	TemporalAddress string
	// MaxTemporalCalls bounds the Temporal calls requests have in flight;
	// a request past it answers 503 at once. 0 bounds nothing.
	MaxTemporalCalls int
	// TaskQueue is where conversations are started.
	TaskQueue string
	// HeartbeatInterval is how often an idle stream gets a keep-alive.
	HeartbeatInterval time.Duration
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Tokens are the bearer tokens the API accepts, with the principal and
	// the roles each carries. With none, the API asks for no token.
	Tokens []config.APIToken
	// AllowBypass lets callers of an API without tokens send
	// bypassApproval; with tokens, the bypass role does.
	AllowBypass bool
	// AnyHost lets an API without tokens answer requests addressed to any
	// host name (TOLLGATE_ALLOW_UNAUTHENTICATED: served beyond loopback on
	// purpose). Without it, such an API answers only loopback names, so a
	// page whose name was re-pointed at 127.0.0.1 (DNS rebinding) is not
	// its own origin.
	AnyHost bool
	// AllowedOrigins are the browser origins, besides the API's own, that
	// may send state-changing requests.
	AllowedOrigins []string
	// Codec, when set, is served at /codec for the Web UI and the CLI: it
	// resolves the payload store's references (payloads.Codec).
	Codec converter.PayloadCodec
	// CodecOrigins are the browser origins (the Web UI's) that may call
	// the codec endpoint.
	CodecOrigins []string
	// Ledger, when set, is the audit ledger GET /audit reads; nil serves
	// 404 there.
	Ledger *auditdb.Ledger
	// WatchControl, true, has the API read the control workflow every
	// contract.ControlPollInterval (the freeze its streams announce and
	// its messages obey, the stand-ins its decisions carry). False, it
	// knows only the changes it made and what GET /admin/freeze and GET
	// /delegations read: for tests on a mocked client.
	WatchControl bool
	// Links, when set, checks the notices' decision links at /decide; nil
	// answers 404 there.
	Links *links.Key
	// Slack, with its SigningSecret, takes Slack's button callbacks at
	// /slack/interactions; without, that answers 404.
	Slack config.Slack
	// TracerProvider, when set, traces every request but the health and
	// metrics probes as a server span (the parent of the Temporal calls it
	// makes, which carry it into the workflows); nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Timeouts of the server's Temporal calls. Each is derived from the
// request's context, so a client that leaves cancels its call at once.
const (
	// sendTimeout bounds starting a conversation and handing it a message;
	// the message Update completes once a worker has taken it.
	sendTimeout = 30 * time.Second
	// healthTimeout bounds GET /healthz.
	healthTimeout = 3 * time.Second
	// updateTimeout bounds an Update the API offers a workflow (a
	// decision, a client tool's result, a revoke): it completes as soon as
	// a worker runs it; without a worker the caller hears 503 rather than
	// hanging.
	updateTimeout = 30 * time.Second
	// queryTimeout bounds one query of a workflow: a turn's pending
	// requests, a conversation's grants.
	queryTimeout = 5 * time.Second
)

// pendingQueryConcurrency bounds the pending queries GET /approvals runs at
// once; maxListedTurns bounds the turns it looks at.
const (
	pendingQueryConcurrency = 8
	maxListedTurns          = 1000
)

// conversationIDPattern is what a client-chosen conversation id may look
// like: it becomes part of workflow ids and visibility queries.
var conversationIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// checkConversationID says what is wrong with a client's conversation id.
func checkConversationID(conv string) error {
	if !conversationIDPattern.MatchString(conv) {
		return badRequest("conversationId %.80q is not valid: use up to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit", conv)
	}
	return nil
}

// checkNewConversationID says what is wrong with the conversation id of a
// message: checkConversationID's shape, and no TurnIDSeparator, so that no
// id a client picks is the workflow ID of another conversation's turn or
// subagent (contract.MayNameAnotherTurn). A conversation that already
// runs under such an id (one started before the API refused them) still
// takes its messages: its workflow is a Conversation, where another
// conversation's turn would be a ChatTurn.
func (s *Server) checkNewConversationID(ctx context.Context, conv string) error {
	if err := checkConversationID(conv); err != nil {
		return err
	}
	if ok, err := s.isConversation(ctx, conv); ok || err != nil {
		return err
	}
	return badRequest("conversationId %q is not valid: it may not contain %q, which joins a conversation's id to its turns' numbers in their ids (tollgate-conv-<conversationId>%s<n>), so that it cannot name another conversation's turn", conv, contract.TurnIDSeparator, contract.TurnIDSeparator)
}

// isConversation reports whether conv, a valid conversation id, names a
// conversation: always, unless the id holds TurnIDSeparator, when its
// workflow ID may be another conversation's turn's and only a workflow of
// type Conversation under it (one started before the API refused such
// ids) is one.
func (s *Server) isConversation(ctx context.Context, conv string) (bool, error) {
	if !contract.MayNameAnotherTurn(conv) {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	d, err := s.client.DescribeWorkflow(ctx, contract.ConversationWorkflowID(conv), "")
	switch {
	case err == nil:
		return d.WorkflowType.Name == contract.ConversationWorkflow, nil
	case isNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("look up conversation %s: %w", conv, err)
	}
}

// checkConversation says what is wrong with the conversation id of a
// request that reads or changes a conversation: its shape, or that it
// names no conversation (errUnknownConversation), which an id that names
// another conversation's turn never does.
func (s *Server) checkConversation(ctx context.Context, conv string) error {
	if err := checkConversationID(conv); err != nil {
		return err
	}
	ok, err := s.isConversation(ctx, conv)
	if err == nil && !ok {
		err = fmt.Errorf("conversation %s: %w", conv, errUnknownConversation)
	}
	return err
}

// Server is tollgate's HTTP API. It holds no state of its own beyond the
// in-memory buffers of the turns being streamed: any instance can serve any
// request.
type Server struct {
	client client.Client
	// temporal is "Temporal at HOST:PORT", or "Temporal".
	temporal string
	// calls bounds the Temporal calls requests have in flight.
	calls     callLimit
	taskQueue string
	heartbeat time.Duration
	log       *slog.Logger
	metrics   *metrics
	hub       *hub
	engine    *gin.Engine
	// ctx ends when the server closes; it ends open streams and pollers.
	ctx    context.Context
	cancel context.CancelFunc

	// auth checks bearer tokens; nil when the API asks for none.
	auth *authenticator
	// allowBypass and allowedOrigins are Options'.
	allowBypass    bool
	anyHost        bool
	allowedOrigins []string
	codecOrigins   []string
	// ledger is the audit ledger GET /audit reads, or nil.
	ledger *auditdb.Ledger
	// links checks decision links, or is nil.
	links *links.Key
	// slack takes Slack's callbacks, or is nil.
	slack *slackGate
	// pageKey signs GET /approvals' page tokens (pageKey).
	pageKey []byte
	// ledgerMissWarned is when turnsWaitOutsideLedger last warned (Unix
	// nanoseconds).
	ledgerMissWarned atomic.Int64
	// codec resolves the payload store's references; nil without a store.
	codec converter.PayloadCodec
	// control is what the API read last of the control workflow: the
	// freeze and the stand-ins (control.go).
	control *contract.ControlWatcher
}

// NewServer builds the API on Temporal.
func NewServer(o Options) *Server {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return newServer(o, temporalSource{client: o.Client, log: log, codec: o.Codec}, defaultHubSettings)
}

// newServer builds the API on any event source; tests pass a fake.
func newServer(o Options, src eventSource, settings hubSettings) *Server {
	gin.SetMode(gin.ReleaseMode)
	s := &Server{
		client:    o.Client,
		temporal:  "Temporal",
		calls:     newCallLimit(o.MaxTemporalCalls),
		taskQueue: cmp.Or(o.TaskQueue, protocol.DefaultTaskQueue),
		heartbeat: o.HeartbeatInterval,
		log:       o.Logger,
		metrics:   newMetrics(),
		auth:      newAuthenticator(o.Tokens),

		ledger:         o.Ledger,
		links:          o.Links,
		slack:          newSlackGate(o.Slack, o.Tokens),
		pageKey:        pageKey(o.Links, o.Tokens),
		allowBypass:    o.AllowBypass,
		anyHost:        o.AnyHost,
		allowedOrigins: o.AllowedOrigins,
		codecOrigins:   o.CodecOrigins,
		codec:          o.Codec,
		control:        contract.NewControlWatcher(),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if o.TemporalAddress != "" {
		s.temporal = "Temporal at " + o.TemporalAddress
	}
	if s.heartbeat <= 0 {
		s.heartbeat = config.DefaultHeartbeatInterval
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hub = newHub(s.ctx, src, s.log, s.metrics, settings)
	if o.WatchControl && s.client != nil {
		go s.watchControl()
	}

	r := gin.New()
	_ = r.SetTrustedProxies(nil) // ClientIP is the peer; nil never fails
	if o.TracerProvider != nil {
		r.Use(traceRequests(o.TracerProvider))
	}
	r.Use(s.recoverPanics, s.logRequests, s.refuseForeignHost, s.refuseCrossSite, s.authenticate)
	chat, approve := s.requireRole(config.RoleChat), s.requireRole(config.RoleApprove)
	read := s.requireRole(readRoles...) // whoever may read a turn
	limit := s.limitTemporalCalls
	r.POST("/chat/stream", chat, s.chatStream)
	r.GET("/chat/turns/:turnId/events", read, s.turnEvents)
	r.POST("/chat/approval", approve, limit, s.approve)
	r.POST("/chat/approvals", approve, limit, s.approveAll)
	r.POST("/chat/tool-result", chat, limit, s.toolResult)
	r.GET("/conversations/:conversationId/grants", approve, limit, s.grants)
	r.GET("/conversations/:conversationId/messages", read, limit, s.messages)
	r.GET("/conversations/:conversationId/turns", read, limit, s.conversationTurns)
	r.POST("/conversations/:conversationId/compact", chat, limit, s.compact)
	r.DELETE("/conversations/:conversationId/grants/:grantId", approve, limit, s.revokeGrant)
	r.GET("/approvals", approve, limit, s.listApprovals)
	r.GET("/audit", approve, s.listAudit)
	admin := s.requireRole(config.RoleAdmin)
	r.GET("/audit/verify", admin, s.verifyAudit)
	r.POST("/policy/test", admin, limit, s.testPolicy)
	r.POST("/policy/check", admin, limit, s.checkPolicy)
	r.GET("/admin/freeze", read, limit, s.getFreeze)
	r.POST("/admin/freeze", admin, limit, s.freeze)
	r.POST("/admin/thaw", admin, limit, s.thaw)
	r.GET("/delegations", approve, limit, s.listDelegations)
	r.PUT("/delegations", admin, limit, s.delegate)
	r.DELETE("/delegations/:id", admin, limit, s.undelegate)
	// A user message needs chat, an approval response approve: the
	// handler checks which the request is.
	r.POST(aiSDKChatPath, s.requireRole(config.RoleChat, config.RoleApprove), s.aiSDKChat)
	r.GET(aiSDKStreamPath, read, s.aiSDKResume)
	// A link is its own credential: its signature, checked by the handler.
	r.GET(links.Path, s.showLink)
	r.POST(links.Path, s.decideByLink)
	// Slack's callbacks: their signature, checked by the handler.
	r.POST(protocol.SlackInteractionsPath, s.slackInteraction)
	r.GET("/healthz", s.healthz)
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{})))
	if o.Codec != nil {
		s.serveCodec(r, o.Codec)
	}
	registerWeb(r)
	r.NoRoute(func(c *gin.Context) {
		c.JSON(http.StatusNotFound, gin.H{"error": "no such endpoint: " + c.Request.Method + " " + c.Request.URL.Path})
	})
	s.engine = r
	return s
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.engine }

// Close ends every open stream and stops every poller. Clients resume
// elsewhere with Last-Event-ID. Call it before http.Server.Shutdown, which
// otherwise waits for streams that may last minutes.
func (s *Server) Close() { s.cancel() }

// chatStream handles POST /chat/stream: it hands the message to its
// conversation (starting it if new) and streams the turn that runs it.
func (s *Server) chatStream(c *gin.Context) {
	var req protocol.ChatRequest
	if err := decodeBody(c, &req); err != nil {
		writeError(c, s.log, err)
		return
	}
	key, err := idempotencyKey(c.Request)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	ref, after, err := s.sendChat(c, req, key)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	c.Header(protocol.HeaderConversationID, ref.ConversationID)
	c.Header(protocol.HeaderTurnID, ref.TurnID)
	s.stream(c, ref.TurnID, after)
}

// sendChat checks a message as POST /chat/stream takes it, with key its
// Idempotency-Key ("" for none), and hands it to its conversation. It
// returns the turn that runs it and, for a keyed retry, the last of the
// turn's events the client says it has. POST /ai-sdk/chat sends its
// messages through it too.
func (s *Server) sendChat(c *gin.Context, req protocol.ChatRequest, key string) (contract.TurnRef, int, error) {
	if strings.TrimSpace(req.Query) == "" {
		return contract.TurnRef{}, 0, badRequest("query is empty")
	}
	if req.BypassApproval && !s.mayBypass(c) {
		if s.auth == nil {
			return contract.TurnRef{}, 0, forbidden("bypassApproval is off: the operator allows it with %s=true", config.EnvAllowBypass)
		}
		return contract.TurnRef{}, 0, forbidden("bypassApproval needs a token with the role %s", config.RoleBypass)
	}
	if err := s.checkFreeze(req.BypassApproval); err != nil {
		return contract.TurnRef{}, 0, err
	}
	// Checked before the message is sent: a message the conversation
	// would refuse must not start one.
	if err := contract.CheckClientTools(req.ClientTools); err != nil {
		return contract.TurnRef{}, 0, badRequest("clientTools: %s", err)
	}
	msg := contract.UserMessage{
		Query: req.Query, Sender: principal(c), BypassApproval: req.BypassApproval, ClientTools: req.ClientTools,
	}
	after := 0
	if key != "" {
		msg.IdempotencyKey = contract.MessageKey(principal(c), key)
		// A retry may say which of the turn's events it has.
		var err error
		if after, err = resumeCursor(c.Request); err != nil {
			return contract.TurnRef{}, 0, err
		}
	}
	conv := req.ConversationID
	switch {
	case conv == "" && key != "":
		// A retry of a message that started a conversation lands in the
		// same one, though its client never heard the id.
		conv = uuid.NewSHA1(keyedConversations, []byte(msg.IdempotencyKey)).String()
		// Anyone who knows the key and the sender can make the id too:
		// the message must start the conversation (or be a retry of the
		// one that did), never join one another message started.
		msg.FirstMessage = true
	case conv == "":
		conv = uuid.NewString()
	default:
		if err := s.checkNewConversationID(c.Request.Context(), conv); err != nil {
			return contract.TurnRef{}, 0, err
		}
	}
	ref, err := s.send(c.Request.Context(), conv, msg)
	return ref, after, err
}

// keyedConversations is the name space of the conversation ids the API
// makes from an Idempotency-Key (and its sender) for a message that names
// no conversation: a version 5 UUID of the message's key.
var keyedConversations = uuid.MustParse("5b0c1d2e-7a43-4f1e-9d5c-2f0e8a6b3c71")

// maxIdempotencyKey bounds an Idempotency-Key header, in bytes.
const maxIdempotencyKey = 255

// idempotencyKey reads the Idempotency-Key header: "" when there is none,
// the key without the quotes of a structured-field string when it has them.
func idempotencyKey(r *http.Request) (string, error) {
	v := r.Header.Get(protocol.HeaderIdempotencyKey)
	if v == "" {
		return "", nil
	}
	key := v
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		key = key[1 : len(key)-1]
	}
	ok := key != "" && len(key) <= maxIdempotencyKey
	for i := 0; ok && i < len(key); i++ {
		ok = key[i] >= 0x20 && key[i] < 0x7f
	}
	if !ok {
		return "", badRequest("%s header %.40q is not valid: use 1 to %d printable ASCII characters (a UUID, say)", protocol.HeaderIdempotencyKey, v, maxIdempotencyKey)
	}
	return key, nil
}

// send hands msg to its conversation, starting the conversation unless it
// runs already, in one request (update-with-start): a new conversation gets
// its first message with its first workflow task. A message with an
// idempotency key has an Update ID made from it, so that the server answers
// a retry of an Update it holds with that Update's outcome; the
// conversation answers one it took earlier.
func (s *Server) send(ctx context.Context, conv string, msg contract.UserMessage) (contract.TurnRef, error) {
	release, err := s.calls.acquire("send a message to conversation " + conv)
	if err != nil {
		return contract.TurnRef{}, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	start := s.client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       contract.ConversationWorkflowID(conv),
		TaskQueue:                s.taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		// A conversation that ended (terminated, failed, cancelled) is
		// never replaced by an empty one under its id: its turn ids and
		// grants would be reused.
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, contract.ConversationWorkflow, contract.ConversationInput{ConversationID: conv})
	updateID := "" // the client makes one
	if msg.IdempotencyKey != "" {
		updateID = contract.MessageUpdateID(conv, msg)
	}
	h, err := s.client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID:     updateID,
			UpdateName:   contract.SendMessageUpdate,
			Args:         []any{msg},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var ref contract.TurnRef
	if err == nil {
		err = h.Get(ctx, &ref)
	}
	var ended *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &ended) {
		return contract.TurnRef{}, fmt.Errorf("conversation %s %w", conv, errConversationEnded)
	}
	if err != nil {
		return contract.TurnRef{}, fmt.Errorf("send message to conversation %s (within %s): %w", conv, sendTimeout, err)
	}
	s.log.Debug("message sent", "conversationId", conv, "turnId", ref.TurnID)
	return ref, nil
}

// turnEvents handles GET /chat/turns/:turnId/events: the turn's stream,
// resumed after the client's cursor.
func (s *Server) turnEvents(c *gin.Context) {
	turnID := c.Param("turnId")
	if !contract.IsTollgateWorkflowID(turnID) {
		writeError(c, s.log, errUnknownTurn)
		return
	}
	after, err := resumeCursor(c.Request)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	// A mistyped id answers at once, not after the wait a starting turn
	// gets.
	known, err := s.hub.known(c.Request.Context(), turnID)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if !known {
		writeError(c, s.log, fmt.Errorf("%w: no turn %s, and its conversation has given out no such turn (turn_start and the %s header carry a turn's id)",
			errTurnNotFound, turnID, protocol.HeaderTurnID))
		return
	}
	s.stream(c, turnID, after)
}

// resumeCursor reads the last event a client has: the Last-Event-ID header
// (which a browser's EventSource sends when it reconnects) wins over
// ?after=N. Neither means from the start.
func resumeCursor(r *http.Request) (int, error) {
	name, v := "Last-Event-ID header", r.Header.Get(protocol.HeaderLastEventID)
	if v == "" {
		name, v = "after", r.URL.Query().Get("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, badRequest("%s must be a whole number of 0 or more, not %.40q", name, v)
	}
	return n, nil
}

// stream sends the turn's events after after as Server-Sent Events, with a
// keep-alive whenever the stream has been idle for the heartbeat interval,
// until the finish event, a failure, the client leaving, or server close.
func (s *Server) stream(c *gin.Context, turnID string, after int) {
	out, err := startSSE(c.Writer)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	s.streamTo(c, turnID, after, out)
}

// turnWriter writes a turn's stream in one encoding: tollgate's events
// (sseStream), or the AI SDK's UI message chunks (uiStream). A write that
// returns errStreamEnded ends the stream as the encoding wants it ended.
type turnWriter interface {
	// events writes numbered events of the turn's log.
	events(evs []protocol.Event) error
	// unnumbered writes the API's own notice or error.
	unnumbered(e protocol.Event) error
	// keepAlive writes a keep-alive.
	keepAlive() error
}

// errStreamEnded is what a turnWriter answers when it has ended the stream
// by itself (the AI SDK's at a call that waits for its client).
var errStreamEnded = errors.New("the stream's writer ended it")

// streamTo is stream, into out, whose headers are sent.
func (s *Server) streamTo(c *gin.Context, turnID string, after int, out turnWriter) {
	s.metrics.openStreams.Inc()
	defer s.metrics.openStreams.Dec()
	sub := s.hub.subscribe(turnID, after)
	defer s.hub.unsubscribe(sub)

	ctx := c.Request.Context()
	idle := time.NewTimer(s.heartbeat)
	defer idle.Stop()
	// A keep-alive due before the hub knows whether the turn waits in its
	// conversation's queue waits for that (due), so that a queued turn's
	// stream starts with its notice; for at most the time the hub gives
	// the conversation to answer (hold), as the keep-alives are there to
	// keep the connection open.
	settled, hold := sub.settled(), time.NewTimer(s.hub.settings.queryTimeout)
	defer hold.Stop()
	due := false
	gate := s.control.Changed()
	for {
		if e, ok := sub.queuedNotice(); ok {
			if werr := out.unnumbered(e); werr != nil {
				return
			}
			idle.Reset(s.heartbeat)
			due = false
		}
		events, done, err := sub.next()
		if len(events) > 0 {
			if werr := out.events(events); werr != nil {
				if !errors.Is(werr, errStreamEnded) {
					s.log.Debug("stream write failed", "turnId", turnID, "error", werr)
				}
				return
			}
			idle.Reset(s.heartbeat)
			due = false
		}
		if done {
			if err != nil {
				s.log.Warn("stream ended with an error", "turnId", turnID, "error", err)
				_ = out.unnumbered(protocol.Event{Type: protocol.EventError, Message: err.Error()})
			}
			return
		}
		if due && settled == nil {
			if werr := out.keepAlive(); werr != nil {
				return
			}
			idle.Reset(s.heartbeat)
			due = false
		}
		select {
		case <-ctx.Done():
			return
		case <-s.ctx.Done():
			return
		case <-sub.changed():
		case <-gate:
			// The freeze changed: every open stream is told, without an
			// id, as it is no event of the turn's.
			gate = s.control.Changed()
			if st := s.control.State(); st != nil {
				if werr := out.unnumbered(gateEvent(st.Freeze)); werr != nil {
					return
				}
				idle.Reset(s.heartbeat)
			}
		case <-settled:
			settled = nil
		case <-hold.C:
			settled = nil
		case <-idle.C:
			if settled != nil {
				s.metrics.keepAlivesHeld.Inc()
				due = true
				continue
			}
			if werr := out.keepAlive(); werr != nil {
				return
			}
			idle.Reset(s.heartbeat)
		}
	}
}

// approvalsFromTurns answers GET /approvals without the audit ledger: the
// approvals every running turn waits for, asked of each (8 at a time),
// soonest to expire first, optionally only those of one conversation
// (?conversationId=) or one tool (?tool=). Its limit and pageToken page
// visibility's waiting turns.
func (s *Server) approvalsFromTurns(c *gin.Context) {
	ctx := c.Request.Context()
	conv, tool := c.Query("conversationId"), c.Query("tool")
	if conv != "" {
		if err := checkConversationID(conv); err != nil {
			writeError(c, s.log, err)
			return
		}
	}
	page, err := approvalsPage(c)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	turns, next, err := s.waitingTurns(ctx, conv, page)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	all := s.pendingOf(ctx, turns)
	approvals := make([]protocol.PendingApproval, 0, len(all))
	seen := map[string]bool{}
	for _, a := range all {
		if seen[a.RequestID] || (conv != "" && a.ConversationID != conv) || (tool != "" && a.ToolName != tool) {
			continue
		}
		seen[a.RequestID] = true
		approvals = append(approvals, a)
	}
	slices.SortFunc(approvals, func(a, b protocol.PendingApproval) int {
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), cmp.Compare(a.RequestID, b.RequestID))
	})
	out := gin.H{"approvals": approvals}
	if len(next) > 0 {
		out["nextPageToken"] = base64.RawURLEncoding.EncodeToString(next)
	}
	c.JSON(http.StatusOK, out)
}

// turnsPage is one page of waiting turns GET /approvals asks for: limit
// turns from visibility's page token; limit 0 is every waiting turn (up to
// maxListedTurns).
type turnsPage struct {
	limit int
	token []byte
}

// approvalsPage reads GET /approvals's limit and pageToken.
func approvalsPage(c *gin.Context) (turnsPage, error) {
	var p turnsPage
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListedTurns {
			return p, badRequest("limit %q is not a whole number from 1 to %d", v, maxListedTurns)
		}
		p.limit = n
	}
	if v := c.Query("pageToken"); v != "" {
		if p.limit == 0 {
			return p, badRequest("pageToken needs the limit it was made with")
		}
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(b) == 0 {
			return p, badRequest("pageToken %.40q is not one GET /approvals made", v)
		}
		p.token = b
	}
	return p, nil
}

// pendingIn asks the turn or subagent wid for the requests it waits on.
func (s *Server) pendingIn(ctx context.Context, wid string) ([]protocol.PendingApproval, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	s.metrics.pendingQueries.Inc()
	var pending []protocol.PendingApproval
	v, err := s.client.QueryWorkflow(ctx, wid, "", contract.PendingQuery)
	if err == nil {
		err = v.Get(&pending)
	}
	return pending, err
}

// waitingTurns lists the running turns and subagents that may wait for an
// approval. It
// asks visibility for those whose pending-approvals attribute is set, and
// falls back to every running turn where visibility does not know the
// attribute (a worker registers it at start).
func (s *Server) waitingTurns(ctx context.Context, conv string, page turnsPage) ([]string, []byte, error) {
	running := fmt.Sprintf("WorkflowType IN ('%s', '%s') AND ExecutionStatus = 'Running'",
		contract.ChatTurnWorkflow, contract.SubagentWorkflow)
	narrow := fmt.Sprintf("%s AND %s IS NOT NULL", running, contract.PendingApprovalsAttribute)
	if conv != "" {
		// conv matched conversationIDPattern, so it cannot break the quotes.
		narrow += fmt.Sprintf(" AND %s = '%s'", contract.ConversationIDAttribute, conv)
	}
	ids, next, err := s.listTurns(ctx, narrow, page)
	var invalid *serviceerror.InvalidArgument
	if err == nil || !errors.As(err, &invalid) {
		return ids, next, err
	}
	s.log.Debug("visibility cannot filter on tollgate's search attributes; listing every running turn", "error", err)
	ids, next, err = s.listTurns(ctx, running, page)
	if errors.As(err, &invalid) && len(page.token) > 0 {
		return nil, nil, badRequest("pageToken is not one visibility takes for this query: %s", invalid.Message)
	}
	return ids, next, err
}

// listTurns returns the workflow ids that a visibility query finds.
func (s *Server) listTurns(ctx context.Context, query string, page turnsPage) ([]string, []byte, error) {
	var ids []string
	token := page.token
	size := int32(200)
	if page.limit > 0 {
		size = int32(page.limit)
	}
	for {
		resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, PageSize: size, NextPageToken: token,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("list turns where %s: %w", query, err)
		}
		for _, e := range resp.GetExecutions() {
			ids = append(ids, e.GetExecution().GetWorkflowId())
		}
		token = resp.GetNextPageToken()
		if page.limit > 0 {
			// One page, as asked; its token, when there is more.
			return ids, token, nil
		}
		if len(token) == 0 || len(ids) >= maxListedTurns {
			return ids, nil, nil
		}
	}
}

// pendingOf asks each turn which approvals it waits for. A turn that does
// not answer (it just ended, or no worker runs) is left out and logged.
func (s *Server) pendingOf(ctx context.Context, turnIDs []string) []protocol.PendingApproval {
	var (
		mu  sync.Mutex
		all []protocol.PendingApproval
		wg  sync.WaitGroup
	)
	slots := make(chan struct{}, pendingQueryConcurrency)
	for _, id := range turnIDs {
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-ctx.Done():
				return
			}
			pending, err := s.pendingIn(ctx, id)
			if err != nil {
				level := slog.LevelWarn
				if isNotFound(err) {
					level = slog.LevelDebug
				}
				s.log.Log(ctx, level, "query pending approvals", "turnId", id, "error", err)
				return
			}
			mu.Lock()
			all = append(all, pending...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all
}

// healthz handles GET /healthz: 200 when Temporal answers its health check.
func (s *Server) healthz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), healthTimeout)
	defer cancel()
	if _, err := s.client.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		s.log.Warn("health check failed", "error", err)
		c.JSON(http.StatusServiceUnavailable, gin.H{"ok": false, "error": "Temporal is not reachable: " + err.Error()})
		return
	}
	c.JSON(http.StatusOK, gin.H{"ok": true})
}

// logRequests counts every request and logs one line for it, at debug
// level.
func (s *Server) logRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	s.metrics.request(c.FullPath(), c.Request.Method, c.Writer.Status())
	s.log.Debug("request",
		"method", c.Request.Method, "path", c.Request.URL.Path, "status", c.Writer.Status(),
		"duration", time.Since(start), "remote", c.ClientIP(), "principal", principal(c))
}

// recoverPanics turns a handler's panic into a logged 500 instead of a
// dropped connection.
func (s *Server) recoverPanics(c *gin.Context) {
	c.Set(temporalKey, s.temporal) // for writeError's 503s
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if r == http.ErrAbortHandler { //nolint:errorlint // the sentinel is compared by identity
			panic(r)
		}
		s.log.Error("handler panicked", "method", c.Request.Method, "path", c.Request.URL.Path,
			"panic", r, "stack", string(debug.Stack()))
		if c.Writer.Written() {
			c.Abort()
			return
		}
		c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "internal error"})
	}()
	c.Next()
}
