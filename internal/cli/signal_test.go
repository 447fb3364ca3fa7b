package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestMainSaysWhyCanceled: a command cut short by a signal says so (the
// cause signal.NotifyContext gives its context), not only "context
// canceled".
func TestMainSaysWhyCanceled(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errors.New("interrupt signal received"))
	var out, errOut bytes.Buffer
	code := Main(ctx, []string{"database", "list", "--server", "127.0.0.1:1"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "thaw: interrupt signal received: list databases: ") {
		t.Fatalf("code %d, stderr %q", code, errOut.String())
	}
}
