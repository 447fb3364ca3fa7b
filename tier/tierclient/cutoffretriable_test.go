package tierclient

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"connectrpc.com/connect"
)

// TestCutOffRetriable: a response the connection cut short is retried by
// the client's own loop (classify: backoff); once the retry policy ran
// out, IsRetriable called it not worth retrying.
func TestCutOffRetriable(t *testing.T) {
	for _, err := range []error{
		connect.NewError(connect.CodeUnknown, errors.New("read message: unexpected EOF")),
		fmt.Errorf("tierclient: scan: %w", io.ErrUnexpectedEOF),
	} {
		if classify(err) != backoff || !IsRetriable(err) {
			t.Errorf("%v: the retry loop backs off and retries it, IsRetriable = false", err)
		}
	}
}
