// Command scripted-model serves tollgate's demo model: an OpenAI-compatible
// chat completions server that answers from a script (scripted.Demo) instead
// of a language model, so that `make dev` works without an API key.
//
//	scripted-model -addr 127.0.0.1:8090 [-window TOKENS] [-notices FILE]
//
// Point OPENAI_BASE_URL at http://<addr>/v1. Like a real model it has a
// context window (-window, 128,000 tokens by default, counted as a token
// per four bytes of request): a longer request is answered 400 with
// OpenAI's context_length_exceeded body; 0 takes any length. With -notices it is also
// `make dev`'s chat hook: each notice POSTed to /notices (TOLLGATE_NOTIFY_URL)
// is appended to FILE as a line of JSON, links and all, for a person to read
// and open.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/internal/scripted"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "address to listen on")
	delay := flag.Duration("chunk-delay", 30*time.Millisecond, "pause between the chunks of a streamed answer")
	window := flag.Int("window", 128000, "context window in tokens (a token per four bytes of request); 0 takes any length")
	notices := flag.String("notices", "", "append each notice POSTed to /notices to this file, a JSON line each")
	flag.Parse()

	if err := run(*addr, *delay, *window, *notices); err != nil {
		slog.Error("Scripted model stopped", "error", err)
		os.Exit(1)
	}
}

func run(addr string, delay time.Duration, window int, notices string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	mux := http.NewServeMux()
	mux.Handle("/", scripted.New(scripted.Demo(), scripted.ChunkDelay(delay), scripted.Window(window)))
	if notices != "" {
		mux.Handle("POST /notices", noticeFile(notices))
	}
	srv := &http.Server{
		Addr:              addr,
		Handler:           logRequests(mux),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.Info("Scripted model listening", "addr", addr, "baseUrl", "http://"+addr+"/v1", "chunkDelay", delay, "window", window)

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

// noticeFile appends each posted notice to the file at path, a line each.
func noticeFile(path string) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var v json.RawMessage
		if err == nil {
			err = json.Unmarshal(body, &v)
		}
		if err != nil {
			http.Error(w, "not a JSON notice: "+err.Error(), http.StatusBadRequest)
			return
		}
		var line bytes.Buffer
		if err := json.Compact(&line, body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		line.WriteByte('\n')
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err == nil {
			_, err = f.Write(line.Bytes())
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
