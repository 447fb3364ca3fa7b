package objstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestTransportTimeoutsTransient: timeouts of the transport itself (a dial
// that timed out, an HTTP client's own Timeout) are network errors that
// timed out: transient. Go makes them match context.DeadlineExceeded
// (net's and net/http's timeoutError.Is), and IsTransient took them for a
// caller that gave up, though its context was live: a blip failed a
// bulk load's manifest write at once. A context that did end is still not
// transient.
func TestTransportTimeoutsTransient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{Timeout: time.Nanosecond}
	_, dialErr := d.DialContext(t.Context(), "tcp", ln.Addr().String())

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	hc := &http.Client{Timeout: 50 * time.Millisecond}
	_, httpErr := hc.Get(srv.URL)

	for _, tc := range []struct {
		name string
		err  error
	}{
		{"dial timeout", dialErr},
		{"http client timeout", httpErr},
		{"dial timeout marked ErrTransient (as scoped.go:306 does)", fmt.Errorf("%w: %w", ErrTransient, dialErr)},
		{"http timeout marked ErrTransient", fmt.Errorf("%w: %w", ErrTransient, httpErr)},
	} {
		if tc.err == nil {
			t.Fatalf("%s: no error", tc.name)
		}
		if !IsTransient(tc.err) {
			t.Errorf("%s: IsTransient = false, want true (the caller's context is live; the network timed out)", tc.name)
		}
	}
	for _, err := range []error{context.Canceled, fmt.Errorf("put: %w", context.DeadlineExceeded),
		fmt.Errorf("%w: %w", ErrTransient, context.Canceled), errors.Join(errors.New("x"), context.Canceled)} {
		if IsTransient(err) {
			t.Errorf("a caller that gave up (%v): transient", err)
		}
	}
}
