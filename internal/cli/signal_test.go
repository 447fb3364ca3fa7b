package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
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

// closedStdout fails every write as a closed stdout pipe does once SIGPIPE
// is ignored.
type closedStdout struct{}

func (closedStdout) Write([]byte) (int, error) {
	return 0, &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.EPIPE}
}

// TestMainQuietOnClosedStdout: a command whose output pipe closed (thaw
// scan | head) ends quietly with a SIGPIPE death's status, 141; a broken
// pipe elsewhere (a connection) is an error like any other.
func TestMainQuietOnClosedStdout(t *testing.T) {
	var errOut bytes.Buffer
	if code := Main(t.Context(), []string{"version"}, closedStdout{}, &errOut); code != 141 || errOut.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if stdoutClosed(fmt.Errorf("scan: %w", &net.OpError{Op: "write", Err: syscall.EPIPE})) {
		t.Fatal("a connection's broken pipe taken for a closed stdout")
	}
}
