package config

import (
	"io"
	"log/slog"

	"go.temporal.io/sdk/log"
)

// Logger returns a text logger writing to w at c.LogLevel.
func (c Config) Logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: c.LogLevel}))
}

// TemporalLogger bridges l into the Temporal SDK, for client.Options.Logger,
// so the SDK's own messages and workflow.GetLogger share one output.
func TemporalLogger(l *slog.Logger) log.Logger {
	return log.NewStructuredLogger(l)
}
