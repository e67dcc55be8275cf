// Command worker runs tollgate's workflows and activities: it loads the
// configuration, dials Temporal once, registers everything and polls the task
// queue until it is interrupted.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/agents"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows"
	"github.com/tollgate/tollgate/workflows/contract"
)

// The process's gRPC requests to Temporal are gzipped at the fastest level
// (config.FastGzip), which grpc-go allows only at initialization.
func init() { config.FastGzip() }

func main() {
	cfg, err := config.LoadFor(config.Worker, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: bad configuration:\n"+err.Error())
		os.Exit(2)
	}
	log := cfg.Logger(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("worker stopped", "error", err)
		os.Exit(1)
	}
}

// run is the worker's life: each step below, in order, then the task queue
// polled until ctx is done. A step that fails stops the worker with its
// reason; what a step opened is closed when run returns, the worker
// stopped first.
func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	warnOfTools(log, cfg)
	// The policy is checked before anything else: a rule that does not
	// compile stops the worker.
	rules, err := policy.Load(cfg.PolicyFile)
	if err != nil {
		return fmt.Errorf("%s: %w", config.EnvPolicyFile, err)
	}
	realWorkspace, err := makeWorkspace(cfg.Workspace)
	if err != nil {
		return err
	}
	mcpServers, err := startMCP(ctx, cfg, log)
	if err != nil {
		return err
	}
	// Deferred, so it runs after w.Stop below: no running call loses its
	// server.
	defer mcpServers.Close()
	// The rules' examples need the tools' specs, MCP's too.
	if err := checkExamples(cfg, rules, mcpServers, realWorkspace); err != nil {
		return err
	}
	reg, stopMetrics, err := startMetrics(cfg.MetricsAddr, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	storage, stored, err := payloadStore(ctx, cfg.Payloads, log)
	if err != nil {
		return err
	}
	ledger, err := openLedger(ctx, cfg)
	if err != nil {
		return err
	}
	if ledger != nil {
		defer ledger.Close()
	}
	tracing, err := telemetry.Setup(ctx, telemetry.WorkerService, log)
	if err != nil {
		return err
	}
	defer flushTraces(tracing, log)
	c, err := dial(cfg, log, reg, storage, stored, tracing)
	if err != nil {
		return err
	}
	defer c.Close()
	searchAttributes, err := ensureSearchAttributes(ctx, c, cfg.TemporalNamespace, log)
	if err != nil {
		return err
	}
	agentDefs, err := loadAgents(cfg.AgentsDir, log)
	if err != nil {
		return err
	}
	// Until it reads the control workflow, the worker holds the gate
	// frozen: it may be starting in the middle of a freeze.
	admin := contract.NewFrozenControlWatcher()
	w := newWorker(c, cfg, parts{rules: rules, mcp: mcpServers, ledger: ledger, searchAttributes: searchAttributes,
		realWorkspace: realWorkspace, agents: agentDefs, admin: admin})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker on task queue %s: %w", cfg.TaskQueue, err)
	}
	// The freeze reaches this worker's turns within a poll: the control
	// workflow's query is answered by a worker, perhaps this one, so the
	// first read waits until it has started.
	go admin.Watch(ctx, c, func(err error) {
		if admin.State() == nil {
			log.Warn("cannot read the gate's control workflow yet: every protected call asks, as if the gate were frozen, until it can", "error", err)
			return
		}
		log.Debug("cannot read the gate's control workflow: the freeze read last holds", "error", err)
	})
	log.Info("worker started", "taskQueue", cfg.TaskQueue, "temporal", cfg.TemporalAddress,
		"workspace", cfg.Workspace, "requiredTools", cfg.RequiredTools, "model", cfg.OpenAIModel, "subagents", len(agentDefs), "policyRules", len(rules), "notices", cfg.NotifyURL != "", "links", cfg.NotifyURL != "" && cfg.Links != nil,
		"audit", auditWhere(ledger), "workflowCacheSize", cfg.WorkflowCacheSize, "mcpTools", len(mcpServers.Specs()), "tracing", tracing.On(), "bashIsolation", activities.BashIsolation(), "bashSandbox", bashSandbox(cfg))
	<-ctx.Done()
	log.Info("worker stopping")
	w.Stop()
	return nil
}

// warnOfTools hides the worker's environment from the programs its tools
// start, before any starts (an MCP server, a command): it holds the
// worker's secrets. Where that, or a PID namespace for Bash commands, cannot
// be had, the worker says so and runs on.
func warnOfTools(log *slog.Logger, cfg config.Config) {
	if cfg.BashSandbox == protocol.SandboxPreview {
		if err := activities.BashSandbox(); err != nil {
			log.Error("the Bash sandbox cannot start on this machine: Bash calls ask as without it, and never run unconfined in its stead", "error", err)
		}
	}
	if err := activities.HideWorker(); err != nil {
		log.Warn("the programs the worker starts may read its environment", "error", err)
	}
	if activities.BashIsolation() == "none" {
		log.Warn("this system allows no PID namespace for Bash commands (neither CAP_SYS_ADMIN nor user namespaces): " +
			"a command that kills its guard outlives its time limit; see docs/security.md")
	}
}

// checkExamples checks the examples of the policy's rules as the worker's
// turns would check their calls: with its tools (their specs normalize
// the arguments, MCP's annotations are what rules read), its workspace
// and its required tools. One that fails stops the worker, naming the
// tool, the example and what the rule did.
func checkExamples(cfg config.Config, rules []policy.Rule, mcp *activities.MCP, realWorkspace string) error {
	s := workflows.Settings{
		RequiredTools:  cfg.RequiredTools,
		Rules:          rules,
		Tools:          append(workerTools(cfg).Specs(), mcp.Specs()...),
		WorkspaceRoots: activities.WorkspaceRoots(cfg.Workspace, realWorkspace),
	}
	if err := workflows.CheckExamples(s); err != nil {
		return fmt.Errorf("%s %s: an example of its rules fails:\n%w", config.EnvPolicyFile, cfg.PolicyFile, err)
	}
	return nil
}

// workerTools are the worker's own tools.
func workerTools(cfg config.Config) *activities.Tools {
	return &activities.Tools{Workspace: cfg.Workspace, BashTimeout: cfg.BashTimeout, BashEnv: cfg.BashEnv}
}

// startMCP starts the configured MCP servers, before Temporal is dialed:
// their tools are part of the settings every turn records, and a server
// that cannot start stops the worker with the reason.
func startMCP(ctx context.Context, cfg config.Config, log *slog.Logger) (*activities.MCP, error) {
	var mcpCfg activities.MCPConfig
	if cfg.MCPConfig != "" {
		var err error
		if mcpCfg, err = activities.LoadMCPConfig(cfg.MCPConfig, os.Getenv); err != nil {
			return nil, fmt.Errorf("%s: %w", config.EnvMCPConfig, err)
		}
	}
	mcpCfg.Workspace = cfg.Workspace
	mcpServers, err := activities.StartMCP(ctx, mcpCfg, log)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", config.EnvMCPConfig, cfg.MCPConfig, err)
	}
	return mcpServers, nil
}

// startMetrics makes the registry where the SDK's metrics and the
// workflows' own land, and serves it (serveMetrics) until stop is called.
func startMetrics(addr string, log *slog.Logger) (reg *metrics.Registry, stop func(), err error) {
	reg, err = metrics.New(workflows.MetricHelp)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	workflows.AddApprovalsPending(reg)
	_, stopServing := serveMetrics(addr, reg, log)
	return reg, func() {
		stopServing()
		_ = reg.Close(context.Background())
	}, nil
}

// payloadStore answers the External Storage of c, and whether c configures
// one, once the store has passed the start-up check (checkPayloadStore).
func payloadStore(ctx context.Context, c payloads.Config, log *slog.Logger) (converter.ExternalStorage, bool, error) {
	storage, stored, err := payloads.Storage(c)
	if err != nil {
		return converter.ExternalStorage{}, false, err
	}
	if err := checkPayloadStore(ctx, c, log); err != nil {
		return converter.ExternalStorage{}, false, err
	}
	return storage, stored, nil
}

// openLedger opens the audit ledger, or answers nil when there is none. A
// ledger that cannot be opened stops the worker: it would otherwise run
// turns whose decisions go unrecorded.
func openLedger(ctx context.Context, cfg config.Config) (*auditdb.Ledger, error) {
	if cfg.AuditDB == "" {
		return nil, nil
	}
	ledger, err := auditdb.Open(ctx, cfg.AuditDB)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.EnvAuditDB, err)
	}
	return ledger, nil
}

// dial dials Temporal with the worker's logger, metrics, payload store and
// tracing.
func dial(cfg config.Config, log *slog.Logger, reg *metrics.Registry, storage converter.ExternalStorage, stored bool, tracing telemetry.Tracing) (client.Client, error) {
	opts := cfg.Temporal
	opts.Logger, opts.MetricsHandler, opts.ExternalStorage = config.TemporalLogger(log), reg.Handler(), storage
	opts.Interceptors = append(opts.Interceptors, tracing.Interceptors()...)
	// A turn whose history names a payload the store no longer holds is
	// ended, naming the payload, instead of failing its task for ever.
	lost := workflows.NewLostPayloads(log, payloads.MissingKey)
	if stored {
		opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, lost.DialOption())
	}
	// The cache is the SDK's, one for the process, set before any worker
	// starts (the search attributes' probe is one): a waiting turn evicted
	// from it costs nothing until its decision comes, when its history (a
	// few dozen events) is replayed.
	worker.SetStickyWorkflowCacheSize(cfg.WorkflowCacheSize)
	c, err := client.Dial(opts)
	if err != nil {
		return nil, fmt.Errorf("dial Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	lost.Attach(c)
	return c, nil
}

// ensureSearchAttributes creates tollgate's search attributes where they
// are missing and waits until they are usable; it answers whether turns
// may set them.
func ensureSearchAttributes(ctx context.Context, c client.Client, namespace string, log *slog.Logger) (bool, error) {
	if err := workflows.EnsureSearchAttributes(ctx, c, namespace, log); err != nil {
		// Turns still run; only visibility (pending approvals in the Web UI
		// and GET /approvals) goes without the attributes.
		log.Warn("custom search attributes unavailable; create them with `temporal operator search-attribute create`", "error", err)
		return false, nil
	}
	if err := awaitSearchAttributes(ctx, c, namespace, log); err != nil {
		return false, err
	}
	return true, nil
}

// makeWorkspace creates the workspace where it is missing and answers its
// path with symbolic links resolved.
func makeWorkspace(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create workspace %s: %w", dir, err)
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	return resolved, nil
}

// loadAgents loads the subagents' definitions; an invalid one is logged and
// kept, for the model to read why if it asks for it.
func loadAgents(dir string, log *slog.Logger) ([]agents.Def, error) {
	defs, err := agents.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.EnvAgentsDir, err)
	}
	for _, d := range defs {
		if d.Error != "" {
			log.Warn("subagent definition is invalid; the model will read why if it asks for it", "name", d.Name, "error", d.Error)
		}
	}
	return defs, nil
}

// parts are what run's steps made for the workflows and activities.
type parts struct {
	rules            []policy.Rule
	mcp              *activities.MCP
	ledger           *auditdb.Ledger
	searchAttributes bool
	realWorkspace    string
	agents           []agents.Def
	// admin is what the worker read of the control workflow (the
	// freeze).
	admin *contract.ControlWatcher
}

// newWorker makes the worker of cfg's task queue with tollgate's workflows
// and activities registered.
func newWorker(c client.Client, cfg config.Config, p parts) worker.Worker {
	tools := workerTools(cfg)
	model := activities.NewModel(cfg.OpenAIBaseURL, cfg.OpenAIAPIKey, cfg.OpenAIModel, workflows.TokenSignaler{Client: c})
	wf := &workflows.Workflows{Settings: settings(cfg, p, append(tools.Specs(), p.mcp.Specs()...)), Admin: p.admin}
	if p.ledger != nil {
		// The activities a turn runs carry its ledger rows (Tools.Ledger).
		tools.Ledger, model.Ledger = p.ledger, p.ledger
		if p.mcp != nil {
			p.mcp.Ledger = p.ledger
		}
	}
	w := worker.New(c, cfg.TaskQueue, workflows.WorkerOptions())
	workflows.Register(w, wf, model, tools)
	workflows.RegisterMCP(w, p.mcp)
	if cfg.NotifyURL != "" {
		workflows.RegisterNotifier(w, &activities.Notifier{URL: cfg.NotifyURL, Format: cfg.NotifyFormat, Links: cfg.Links, PublicURL: cfg.PublicURL, Interactive: cfg.Slack.SigningSecret != ""})
	}
	tester := &workflows.PolicyTester{Settings: wf.Settings}
	if p.ledger != nil {
		workflows.RegisterAuditor(w, &activities.Auditor{Ledger: p.ledger})
		tester.Ledger = p.ledger
	}
	workflows.RegisterPolicyTester(w, tester)
	return w
}

// settings are the workflows' settings, which every turn records.
func settings(cfg config.Config, p parts, tools []protocol.ToolSpec) workflows.Settings {
	return workflows.Settings{
		RequiredTools:    cfg.RequiredTools,
		ApprovalTimeout:  cfg.ApprovalTimeout,
		MaxSteps:         cfg.MaxSteps,
		Tools:            tools,
		WorkspaceRoots:   activities.WorkspaceRoots(cfg.Workspace, p.realWorkspace),
		ToolTimeout:      cfg.BashTimeout + 30*time.Second,
		SearchAttributes: p.searchAttributes,
		StatusAttribute:  p.searchAttributes,
		Agents:           p.agents,
		Rules:            p.rules,
		Notify:           cfg.NotifyURL != "",
		ReminderBefore:   cfg.NotifyReminder,
		Budgets:          contract.Budgets(cfg.Budgets),
		Audit:            p.ledger != nil,
		ContextBudget:    cfg.ContextBudget,
		ContextWindow:    cfg.ContextWindow,
		ContextRecent:    cfg.ContextRecent,
		BashSandbox:      bashSandbox(cfg),
	}
}

// bashSandbox is the sandbox mode the worker's turns record: the one
// configured, or none on a machine where the sandbox cannot start (which
// warnOfTools reports at start), so that Bash calls ask as without one,
// never run unconfined in its stead.
func bashSandbox(cfg config.Config) string {
	if cfg.BashSandbox != protocol.SandboxPreview || activities.BashSandbox() != nil {
		return ""
	}
	return protocol.SandboxPreview
}

// surveyLimit bounds how long the start-up check of the payload store
// reads it.
const surveyLimit = 10 * time.Second

// checkPayloadStore is the start-up check of the payload store: one that
// cannot be reached, or cannot store and read back a payload, stops the
// worker; otherwise the worker logs how much of the store it can read, as a warning when some
// of it cannot be read (the turns whose histories name those payloads
// will end when they next run, naming the payload).
func checkPayloadStore(ctx context.Context, c payloads.Config, log *slog.Logger) error {
	report, stored, err := payloads.Survey(ctx, c, surveyLimit)
	switch {
	case err != nil:
		return err
	case !stored:
		return nil
	case report.Checked > report.Readable:
		log.Warn("payload store: some payloads cannot be read", "check", report.String())
	default:
		log.Info("payload store", "check", report.String())
	}
	return nil
}

// searchAttributesWait bounds how long a starting worker waits for the
// search attributes it set to be usable before it gives up.
const searchAttributesWait = 2 * time.Minute

// awaitSearchAttributes waits until a workflow can set tollgate's search
// attributes (workflows.AwaitSearchAttributes): a worker that polled
// before then would fail the workflow tasks of the first messages.
func awaitSearchAttributes(ctx context.Context, c client.Client, namespace string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, searchAttributesWait)
	defer cancel()
	if err := workflows.AwaitSearchAttributes(ctx, c, namespace, log); err != nil {
		return fmt.Errorf("the worker takes no work until its search attributes are usable, and they were not within %s "+
			"(is every Temporal service up, and does the namespace's cache refresh?): %w", searchAttributesWait, err)
	}
	return nil
}

// auditWhere names the ledger's database for the start line, or "off".
func auditWhere(l *auditdb.Ledger) string {
	if l == nil {
		return config.AuditOff
	}
	return l.Where()
}

// flushTimeout bounds how long a stopping process waits to export the spans
// it still holds.
const flushTimeout = 5 * time.Second

// flushTraces exports the spans tracing still holds; a collector that does
// not answer in flushTimeout costs those spans, not the shutdown.
func flushTraces(tracing telemetry.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if err := tracing.Shutdown(ctx); err != nil {
		log.Warn("flush traces", "error", err)
	}
}

// serveMetrics serves reg at GET /metrics on addr until stop is called and
// returns the address it listens on; an empty addr serves nothing. A port
// that cannot be had is logged and the worker runs on without metrics:
// turns matter more than a scrape.
func serveMetrics(addr string, reg http.Handler, log *slog.Logger) (bound string, stop func()) {
	if addr == "" {
		return "", func() {}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("metrics endpoint unavailable; the worker runs without it", "variable", config.EnvMetricsAddr, "addr", addr, "error", err)
		return "", func() {}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", reg)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", "addr", addr, "error", err)
		}
	}()
	log.Info("metrics listening", "addr", ln.Addr().String(), "path", "/metrics")
	return ln.Addr().String(), func() { _ = srv.Close() }
}
