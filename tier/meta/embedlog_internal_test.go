package meta

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/thawdb/thaw/internal/testlog"
)

// TestZapLoggerQuiet: etcd's warnings reach slog, except those that say
// nothing an operator can act on: the quietEvents, and a call its caller
// cancelled.
func TestZapLoggerQuiet(t *testing.T) {
	var logs testlog.Buffer
	z := zapLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	const retry = "retrying of unary invoker failed"
	z.Warn(retry, zap.String("method", "/etcdserverpb.KV/Range"), zap.Error(status.Error(codes.Canceled, "context canceled")))
	z.Warn("simple token is not cryptographically signed")
	z.Info("an info line")
	if logs.String() != "" {
		t.Fatalf("logged:\n%s", logs.String())
	}
	for _, err := range []error{
		status.Error(codes.Unavailable, "connection refused"),
		status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
		context.Canceled, // not a gRPC status: not the client's cancelled call
		errors.New("other"),
	} {
		z.Warn(retry, zap.Error(err))
	}
	z.Warn("slow fdatasync")
	got := logs.String()
	if n := strings.Count(got, `event="`+retry+`"`); n != 4 {
		t.Errorf("%d retry warnings logged, want 4:\n%s", n, got)
	}
	if !strings.Contains(got, "level=WARN msg=etcd event=\"slow fdatasync\"") {
		t.Errorf("other warning not logged:\n%s", got)
	}
}
