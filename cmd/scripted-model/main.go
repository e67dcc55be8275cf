// Command scripted-model serves tollgate's demo model: an OpenAI-compatible
// chat completions server that answers from a script (scripted.Demo) instead
// of a language model, so that `make dev` works without an API key.
//
//	scripted-model -addr 127.0.0.1:8090
//
// Point OPENAI_BASE_URL at http://<addr>/v1.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/internal/scripted"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "address to listen on")
	delay := flag.Duration("chunk-delay", 30*time.Millisecond, "pause between the chunks of a streamed answer")
	flag.Parse()

	if err := run(*addr, *delay); err != nil {
		slog.Error("Scripted model stopped", "error", err)
		os.Exit(1)
	}
}

func run(addr string, delay time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv := &http.Server{
		Addr:              addr,
		Handler:           logRequests(scripted.New(scripted.Demo(), scripted.ChunkDelay(delay))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.Info("Scripted model listening", "addr", addr, "baseUrl", "http://"+addr+"/v1", "chunkDelay", delay)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	slog.Info("Scripted model shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// logRequests logs each request once it is answered.
func logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		slog.Info("Request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration", time.Since(start))
	})
}

// statusRecorder remembers the status a handler answered with. It passes
// Flush through (Unwrap) so that streamed answers still stream.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
