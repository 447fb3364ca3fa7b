package daemon

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
)

// NewLogger returns the process logger configured by cfg, writing to w
// (the CLI passes stderr). cfg must be valid.
func NewLogger(w io.Writer, cfg LogConfig) *slog.Logger {
	var level slog.Level
	switch cfg.Level {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// quietHandler lowers every record to debug once quiet is set: etcd logs
// its listeners closing as errors, which a graceful shutdown should not
// show.
type quietHandler struct {
	slog.Handler
	quiet *atomic.Bool
}

func (h quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	if h.quiet.Load() {
		l = slog.LevelDebug
	}
	return h.Handler.Enabled(ctx, l)
}

func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.quiet.Load() {
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quietHandler{Handler: h.Handler.WithAttrs(attrs), quiet: h.quiet}
}

func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{Handler: h.Handler.WithGroup(name), quiet: h.quiet}
}
