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
	"go.temporal.io/sdk/worker"

	"github.com/tollgate/tollgate/activities"
	"github.com/tollgate/tollgate/internal/agents"
	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/telemetry"
	"github.com/tollgate/tollgate/workflows"
)

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

func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	// Before any program of a tool starts (an MCP server, a command): none
	// may read the worker's environment, which holds its secrets.
	if err := activities.HideWorker(); err != nil {
		log.Warn("the programs the worker starts may read its environment", "error", err)
	}
	if activities.BashIsolation() == "none" {
		log.Warn("this system allows no PID namespace for Bash commands (neither CAP_SYS_ADMIN nor user namespaces): " +
			"a command that kills its guard outlives its time limit; see docs/security.md")
	}
	// The policy is checked before anything else: a rule that does not
	// compile stops the worker.
	rules, err := policy.Load(cfg.PolicyFile)
	if err != nil {
		return fmt.Errorf("%s: %w", config.EnvPolicyFile, err)
	}
	// MCP servers start next, before Temporal is dialed: their tools are
	// part of the settings every turn records, and a server that cannot
	// start stops the worker with the reason.
	var mcpCfg activities.MCPConfig
	if cfg.MCPConfig != "" {
		if mcpCfg, err = activities.LoadMCPConfig(cfg.MCPConfig, os.Getenv); err != nil {
			return fmt.Errorf("%s: %w", config.EnvMCPConfig, err)
		}
	}
	mcpCfg.Workspace = cfg.Workspace
	mcpServers, err := activities.StartMCP(ctx, mcpCfg, log)
	if err != nil {
		return fmt.Errorf("%s %s: %w", config.EnvMCPConfig, cfg.MCPConfig, err)
	}
	// Deferred, so it runs after w.Stop below: no running call loses its
	// server.
	defer mcpServers.Close()

	// The SDK's metrics and the workflows' own land in one registry.
	reg, err := metrics.New(workflows.MetricHelp)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	defer func() { _ = reg.Close(context.Background()) }()
	workflows.AddApprovalsPending(reg)
	_, stopMetrics := serveMetrics(cfg.MetricsAddr, reg, log)
	defer stopMetrics()
	storage, stored, err := payloads.Storage(cfg.Payloads)
	if err != nil {
		return err
	}
	if err := checkPayloadStore(ctx, cfg.Payloads, log); err != nil {
		return err
	}
	var ledger *auditdb.Ledger
	if cfg.AuditDB != "" {
		// A ledger that cannot be opened stops the worker: it would
		// otherwise run turns whose decisions go unrecorded.
		if ledger, err = auditdb.Open(ctx, cfg.AuditDB); err != nil {
			return fmt.Errorf("%s: %w", config.EnvAuditDB, err)
		}
		defer ledger.Close()
	}
	tracing, err := telemetry.Setup(ctx, telemetry.WorkerService, log)
	if err != nil {
		return err
	}
	defer flushTraces(tracing, log)
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
	// starts (the search attributes' probe below is one): a waiting turn
	// evicted from it costs nothing until its decision comes, when its
	// history (a few dozen events) is replayed.
	worker.SetStickyWorkflowCacheSize(cfg.WorkflowCacheSize)
	c, err := client.Dial(opts)
	if err != nil {
		return fmt.Errorf("dial Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	defer c.Close()
	lost.Attach(c)

	searchAttributes := true
	if err := workflows.EnsureSearchAttributes(ctx, c, cfg.TemporalNamespace, log); err != nil {
		// Turns still run; only visibility (pending approvals in the Web UI
		// and GET /approvals) goes without the attributes.
		searchAttributes = false
		log.Warn("custom search attributes unavailable; create them with `temporal operator search-attribute create`", "error", err)
	} else if err := awaitSearchAttributes(ctx, c, cfg.TemporalNamespace, log); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.Workspace, 0o755); err != nil {
		return fmt.Errorf("create workspace %s: %w", cfg.Workspace, err)
	}
	realWorkspace, err := filepath.EvalSymlinks(cfg.Workspace)
	if err != nil {
		return fmt.Errorf("workspace %s: %w", cfg.Workspace, err)
	}

	agentDefs, err := agents.Load(cfg.AgentsDir)
	if err != nil {
		return fmt.Errorf("%s: %w", config.EnvAgentsDir, err)
	}
	for _, d := range agentDefs {
		if d.Error != "" {
			log.Warn("subagent definition is invalid; the model will read why if it asks for it", "name", d.Name, "error", d.Error)
		}
	}

	tools := &activities.Tools{Workspace: cfg.Workspace, BashTimeout: cfg.BashTimeout, BashEnv: cfg.BashEnv}
	model := activities.NewModel(cfg.OpenAIBaseURL, cfg.OpenAIAPIKey, cfg.OpenAIModel, workflows.TokenSignaler{Client: c})
	wf := &workflows.Workflows{Settings: workflows.Settings{
		RequiredTools:    cfg.RequiredTools,
		ApprovalTimeout:  cfg.ApprovalTimeout,
		MaxSteps:         cfg.MaxSteps,
		Tools:            append(tools.Specs(), mcpServers.Specs()...),
		WorkspaceRoots:   activities.WorkspaceRoots(cfg.Workspace, realWorkspace),
		ToolTimeout:      cfg.BashTimeout + 30*time.Second,
		SearchAttributes: searchAttributes,
		StatusAttribute:  searchAttributes,
		Agents:           agentDefs,
		Rules:            rules,
		Notify:           cfg.NotifyURL != "",
		ReminderBefore:   cfg.NotifyReminder,
		Budgets:          workflows.Budgets(cfg.Budgets),
		Audit:            ledger != nil,
		ContextBudget:    cfg.ContextBudget,
		ContextWindow:    cfg.ContextWindow,
		ContextRecent:    cfg.ContextRecent,
	}}

	if ledger != nil {
		// The activities a turn runs carry its ledger rows (Tools.Ledger).
		tools.Ledger, model.Ledger = ledger, ledger
		if mcpServers != nil {
			mcpServers.Ledger = ledger
		}
	}
	w := worker.New(c, cfg.TaskQueue, workflows.WorkerOptions())
	workflows.Register(w, wf, model, tools)
	workflows.RegisterMCP(w, mcpServers)
	if cfg.NotifyURL != "" {
		workflows.RegisterNotifier(w, &activities.Notifier{URL: cfg.NotifyURL, Format: cfg.NotifyFormat, Links: cfg.Links, PublicURL: cfg.PublicURL})
	}
	if ledger != nil {
		workflows.RegisterAuditor(w, &activities.Auditor{Ledger: ledger})
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker on task queue %s: %w", cfg.TaskQueue, err)
	}
	log.Info("worker started", "taskQueue", cfg.TaskQueue, "temporal", cfg.TemporalAddress,
		"workspace", cfg.Workspace, "requiredTools", cfg.RequiredTools, "model", cfg.OpenAIModel, "subagents", len(agentDefs), "policyRules", len(rules), "notices", cfg.NotifyURL != "", "links", cfg.NotifyURL != "" && cfg.Links != nil,
		"audit", auditWhere(ledger), "workflowCacheSize", cfg.WorkflowCacheSize, "mcpTools", len(mcpServers.Specs()), "tracing", tracing.On(), "bashIsolation", activities.BashIsolation())
	<-ctx.Done()
	log.Info("worker stopping")
	w.Stop()
	return nil
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
