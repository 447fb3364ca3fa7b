package bulkloadclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/uploadcap"
)

// TestUntrustedCoordinator: a coordinator whose certificate the client
// does not trust fails Begin and Abort at once with a terminal error that
// says so, not ErrUnavailable: no request was sent, so the outcome is
// known, and a repeat would fail alike.
func TestUntrustedCoordinator(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	// The standard client trusts the system's CAs, not the test server's.
	c, err := New(t.Context(), srv.URL, WithHTTPClient(&http.Client{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	target := bulkload.Target{Database: "db", Table: "t"}
	_, begin := c.Begin(ctx, target, "token", BeginOptions{})
	_, abort := c.Abort(ctx, bulkload.Handle{Target: target, TableID: 1, TxnID: "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"})
	for op, err := range map[string]error{"begin": begin, "abort": abort} {
		t.Logf("%s: %v", op, err)
		switch {
		case err == nil:
			t.Fatalf("%s through an untrusted certificate succeeded", op)
		case IsRetriable(err), errors.Is(err, bulkload.ErrUnavailable):
			t.Fatalf("%s: %v is retriable", op, err)
		case ctx.Err() != nil:
			t.Fatalf("%s retried until the deadline: %v", op, err)
		case !strings.Contains(err.Error(), "certificate"):
			t.Fatalf("%s: %v does not say what failed", op, err)
		}
	}
}

// signedStore is a ScopedStore of client c whose gateway (a TLS server)
// answers every signing request with a signed upload to store.
func signedStore(t *testing.T, store string, opts ...Opt) *ScopedStore {
	t.Helper()
	gw := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(uploadcap.Signed{URL: uploadcap.SignedURL(store + "/bkt/tier/k?X-Amz-Signature=x"),
			Header: map[string]string{}, ExpiresMs: time.Now().Add(time.Minute).UnixMilli()})
	}))
	t.Cleanup(gw.Close)
	// The tier's client trusts the tier's CA only (as tier.ca_file makes it).
	c, err := New(t.Context(), gw.URL, append([]Opt{WithHTTPClient(gw.Client())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s := &ScopedStore{c: c, base: "s3://bkt/tier", h: bulkload.Handle{TxnID: "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"}}
	s.mu.creds = Credentials{Token: "thawcap1.x.y", Expires: time.Now().Add(time.Hour), UploadURL: gw.URL + uploadcap.Path}
	s.mu.obtained = time.Now()
	return s
}

// TestSignedUploadClient: a signed upload goes to the object store with
// the store's HTTP client (WithStoreHTTPClient; default: the system's
// roots), not with the tier's: a tier with a private CA bundle could never
// upload to an S3 store with a public certificate. An untrusted store
// certificate is a permanent error that says so; it was transient, retried
// until the build's deadline.
func TestSignedUploadClient(t *testing.T) {
	var stored atomic.Int32
	s3 := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stored.Add(1)
	}))
	t.Cleanup(s3.Close)
	const key = "kv/db/t-1/0/snap-1/a.sst"

	_, err := signedStore(t, s3.URL).PutIfAbsent(t.Context(), key, objstore.BytesSource([]byte("abc")))
	if err == nil || objstore.IsTransient(err) || !errors.Is(err, objstore.ErrPermission) || !strings.Contains(err.Error(), "certificate is not trusted") {
		t.Fatalf("upload to a store the system does not trust: %v, want a permanent error naming the certificate", err)
	}
	if _, err := signedStore(t, s3.URL, WithStoreHTTPClient(s3.Client())).PutIfAbsent(t.Context(), key, objstore.BytesSource([]byte("abc"))); err != nil {
		t.Fatalf("upload with the store's client: %v", err)
	}
	if stored.Load() != 1 {
		t.Fatalf("the store received %d uploads, want 1", stored.Load())
	}
}
