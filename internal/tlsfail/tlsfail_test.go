package tlsfail

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestUntrusted: a real handshake with an untrusted certificate is
// Untrusted however it is wrapped; network failures and other errors are
// not.
func TestUntrusted(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	_, handshake := http.Get(srv.URL) // the default client does not trust the test CA
	if handshake == nil {
		t.Fatal("an untrusted certificate was accepted")
	}
	refused := func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		_, err = http.Get("https://" + addr)
		return err
	}()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"handshake", handshake, true},
		{"wrapped handshake", fmt.Errorf("rpc: %w", handshake), true},
		{"wrong host", x509.HostnameError{Host: "s3"}, true},
		{"expired", fmt.Errorf("dial: %w", x509.CertificateInvalidError{Reason: x509.Expired}), true},
		{"connection refused", refused, false},
		{"canceled", context.Canceled, false},
		{"other", errors.New("x509 in a message is not enough"), false},
		{"nil", nil, false},
	} {
		if got := Untrusted(tc.err); got != tc.want {
			t.Errorf("%s: Untrusted(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
