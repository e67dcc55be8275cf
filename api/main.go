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
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tollgate/tollgate/internal/config"
)

// shutdownTimeout bounds how long the API waits for requests in flight when
// it stops. Streams do not count: they end at once and their clients resume
// elsewhere with Last-Event-ID.
const shutdownTimeout = 10 * time.Second

func main() {
	cfg, err := config.Load(os.Getenv)
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
	c, err := client.NewLazyClient(client.Options{
		HostPort:  cfg.TemporalAddress,
		Namespace: cfg.TemporalNamespace,
		Logger:    config.TemporalLogger(log),
	})
	if err != nil {
		return fmt.Errorf("temporal client for %s: %w", cfg.TemporalAddress, err)
	}
	defer c.Close()

	tokens := map[string]string{}
	var principals []string
	for _, t := range cfg.APITokens {
		tokens[t.Token] = t.Principal
		principals = append(principals, t.Principal)
	}
	srv := NewServer(Options{
		Client:            c,
		TaskQueue:         cfg.TaskQueue,
		HeartbeatInterval: cfg.HeartbeatInterval,
		Logger:            log,
		Tokens:            tokens,
	})
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: streams stay open for as long as a turn runs.
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (%s): %w", cfg.HTTPAddr, config.EnvHTTPAddr, err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- httpSrv.Serve(ln) }()
	log.Info("api listening", "addr", ln.Addr().String(), "temporal", cfg.TemporalAddress,
		"namespace", cfg.TemporalNamespace, "taskQueue", cfg.TaskQueue,
		"auth", len(tokens) > 0, "principals", slices.Compact(slices.Sorted(slices.Values(principals))))

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
