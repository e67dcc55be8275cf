// Command api is tollgate's HTTP API: it starts conversations and turns on
// Temporal, streams each turn's events as Server-Sent Events, and delivers
// approval decisions. It keeps no state of its own, so any number of
// instances can serve the same turns.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tollgate/tollgate/internal/auditdb"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/payloads"
	"github.com/tollgate/tollgate/internal/telemetry"
)

// shutdownTimeout bounds how long the API waits for requests in flight when
// it stops. Streams do not count: they end at once and their clients resume
// elsewhere with Last-Event-ID.
const shutdownTimeout = 10 * time.Second

// The process's gRPC requests to Temporal are gzipped at the fastest level
// (config.FastGzip), which grpc-go allows only at initialization.
func init() { config.FastGzip() }

func main() {
	cfg, err := config.LoadFor(config.API, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "api: bad configuration:\n"+err.Error())
		os.Exit(2)
	}
	log := cfg.Logger(os.Stderr)
	if err := run(cfg, log); err != nil {
		log.Error("api stopped", "error", err)
		os.Exit(1)
	}
}

func run(cfg config.Config, log *slog.Logger) error {

	// A lazy client connects on first use, so the API starts (and /healthz
	// answers 503) while Temporal is still coming up.
	// The API reads what the worker stored: query and update results.
	storage, stored, err := payloads.Storage(cfg.Payloads)
	if err != nil {
		return err
	}
	tracing, err := telemetry.Setup(context.Background(), telemetry.APIService, log)
	if err != nil {
		return err
	}
	defer flushTraces(tracing, log)
	clientOpts := cfg.Temporal
	clientOpts.Logger, clientOpts.ExternalStorage = config.TemporalLogger(log), storage
	// The client's spans (starting a turn, deciding) are children of the
	// request's, and carry the trace into the workflows.
	clientOpts.Interceptors = append(clientOpts.Interceptors, tracing.Interceptors()...)
	c, err := client.NewLazyClient(clientOpts)
	if err != nil {
		return fmt.Errorf("temporal client for %s: %w", cfg.TemporalAddress, err)
	}
	defer c.Close()

	opts := Options{
		Client:            c,
		WatchControl:      true,
		TemporalAddress:   cfg.TemporalAddress,
		MaxTemporalCalls:  cfg.MaxTemporalCalls,
		TaskQueue:         cfg.TaskQueue,
		HeartbeatInterval: cfg.HeartbeatInterval,
		Logger:            log,
		Tokens:            cfg.APITokens,
		AllowBypass:       cfg.AllowBypass,
		AnyHost:           cfg.AllowUnauthenticated,
		AllowedOrigins:    cfg.AllowedOrigins,
		CodecOrigins:      cfg.CodecOrigins,
		TracerProvider:    tracing.Provider,
		Links:             cfg.Links,
		Slack:             cfg.Slack,
	}
	if cfg.PublicURL != "" {
		// The link page posts from the API's public address.
		if u, err := url.Parse(cfg.PublicURL); err == nil {
			opts.AllowedOrigins = append(opts.AllowedOrigins, u.Scheme+"://"+u.Host)
		}
	}
	if stored {
		opts.Codec = payloads.Codec(storage, codecDecodeBytes)
	}
	if cfg.AuditDB != "" {
		ledger, err := auditdb.Open(context.Background(), cfg.AuditDB)
		if err != nil {
			return fmt.Errorf("%s: %w", config.EnvAuditDB, err)
		}
		defer ledger.Close()
		opts.Ledger = ledger
	}
	srv := NewServer(opts)
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: streams stay open for as long as a turn runs.
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (%s): %w", cfg.HTTPAddr, config.EnvHTTPAddr, err)
	}
	if err := checkExposure(cfg, ln.Addr()); err != nil {
		ln.Close()
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- httpSrv.Serve(ln) }()
	var principals []string
	for _, t := range cfg.APITokens {
		principals = append(principals, t.Principal)
	}
	log.Info("api listening", "addr", ln.Addr().String(), "temporal", cfg.TemporalAddress,
		"namespace", cfg.TemporalNamespace, "taskQueue", cfg.TaskQueue,
		"auth", len(cfg.APITokens) > 0, "principals", slices.Compact(slices.Sorted(slices.Values(principals))),
		"bypass", cfg.AllowBypass && len(cfg.APITokens) == 0, "allowedOrigins", cfg.AllowedOrigins, "tracing", tracing.On())
	if opts.Ledger != nil {
		log.Info("GET /approvals lists from the audit ledger: every worker must write this same ledger ("+config.EnvAuditDB+")", "ledger", opts.Ledger.Where())
	} else {
		log.Warn("GET /approvals asks every waiting turn, without the audit ledger (" + config.EnvAuditDB + " is off): slow past a few hundred waiting turns")
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve http on %s: %w", cfg.HTTPAddr, err)
	case <-ctx.Done():
	}
	log.Info("api stopping")
	srv.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shut down http: %w", err)
	}
	return nil
}

// flushTraces exports the spans tracing still holds, for at most
// shutdownTimeout.
func flushTraces(tracing telemetry.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := tracing.Shutdown(ctx); err != nil {
		log.Warn("flush traces", "error", err)
	}
}

// checkExposure refuses to serve an API without tokens beyond loopback,
// where anyone who reaches it could decide approvals, unless the operator
// said so (TOLLGATE_ALLOW_UNAUTHENTICATED).
func checkExposure(cfg config.Config, addr net.Addr) error {
	tcp, ok := addr.(*net.TCPAddr)
	if len(cfg.APITokens) > 0 || cfg.AllowUnauthenticated || (ok && tcp.IP.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("%s=%s listens beyond loopback (%s) and %s is empty: anyone who reaches the API could send messages and decide approvals; "+
		"set %s, listen on 127.0.0.1, or set %s=true to serve it without tokens anyway",
		config.EnvHTTPAddr, cfg.HTTPAddr, addr, config.EnvAPITokens, config.EnvAPITokens, config.EnvAllowUnauthenticated)
}
