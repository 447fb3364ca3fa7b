package objstore

import (
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestS3UntrustedCertificate: an endpoint whose certificate the client
// does not trust (a wrong CA bundle, a man in the middle) is a permanent
// failure of every operation, not a transient one that retry loops would
// repeat until their budget is spent. (The AWS SDK still makes its three
// attempts: gocloud fixes its retryer.)
func TestS3UntrustedCertificate(t *testing.T) {
	backend, err := url.Parse(newS3(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_NEW_RETRIES_2026", "true")
	srv := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(backend))
	t.Cleanup(srv.Close)
	s := openStore(t, s3URL(t, srv.URL, "bkt", "remote"))
	for _, op := range s3Ops {
		t.Run(op.name, func(t *testing.T) {
			start := time.Now()
			err := op.do(t, s)
			t.Logf("%s: %v (%v)", op.name, err, time.Since(start))
			if err == nil {
				t.Fatalf("%s: succeeded against an untrusted certificate", op.name)
			}
			if IsTransient(err) {
				t.Fatalf("%s: IsTransient(%v) = true", op.name, err)
			}
			if !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("%s: %v does not say what failed", op.name, err)
			}
		})
	}
}
