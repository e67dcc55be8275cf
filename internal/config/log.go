package config

import (
	"io"
	"log/slog"
	"os"

	"go.temporal.io/sdk/log"
)

// NewLogger returns a text logger writing to w at the level of
// TOLLGATE_LOG_LEVEL (info when unset or not a level). It reads the
// environment itself so that main can log a configuration error before a
// Config exists; after Load, use Config.Logger.
func NewLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv(EnvLogLevel))); err != nil {
		level = slog.LevelInfo
	}
	return newLogger(w, level)
}

// Logger returns a text logger writing to w at c.LogLevel.
func (c Config) Logger(w io.Writer) *slog.Logger {
	return newLogger(w, c.LogLevel)
}

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// TemporalLogger bridges l into the Temporal SDK, for client.Options.Logger,
// so the SDK's own messages and workflow.GetLogger share one output.
func TemporalLogger(l *slog.Logger) log.Logger {
	return log.NewStructuredLogger(l)
}
