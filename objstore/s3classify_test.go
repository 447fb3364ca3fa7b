package objstore

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// s3Front stands in front of an in-process S3 (gofakes3) and answers
// the requests of the next calls with a canned error response instead of
// passing them on, as a throttling, failing or refusing S3 would. A call
// is an SDK operation with all its attempts: the SDK numbers them in the
// amz-sdk-request header, and attempt 1 starts a call.
type s3Front struct {
	next http.Handler
	mu   struct {
		sync.Mutex
		fail     int // calls left to answer with resp; < 0: all
		failing  bool
		resp     cannedResponse
		calls    int // calls seen
		requests int // requests seen
		answered int // requests answered with resp
	}
}

type cannedResponse struct {
	status int
	code   string // S3 error code of the XML body; "" for no body
}

// newS3Front starts gofakes3 (bucket "bkt", see newS3) behind an
// s3Front and returns the front and its endpoint. The AWS SDK repeats a
// failed request itself (3 attempts: gocloud fixes the retryer, so the
// count cannot be changed through the URL or AWS_MAX_ATTEMPTS), waiting up
// to 2 s and 4 s before the repeats; AWS_NEW_RETRIES_2026 makes the SDK
// wait up to 100 ms and 200 ms instead (but still seconds after
// throttling), which keeps the test short.
func newS3Front(t *testing.T) (*s3Front, string) {
	t.Helper()
	backend, err := url.Parse(newS3(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_NEW_RETRIES_2026", "true")
	f := &s3Front{next: httputil.NewSingleHostReverseProxy(backend)}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

// failNext answers the next n calls (n < 0: every call) with resp.
func (f *s3Front) failNext(n int, resp cannedResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.fail, f.mu.resp, f.mu.failing = n, resp, false
}

// counts returns the calls and requests seen and the requests answered
// with the canned response since the last call of counts.
func (f *s3Front) counts() (calls, requests, answered int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	calls, requests, answered = f.mu.calls, f.mu.requests, f.mu.answered
	f.mu.calls, f.mu.requests, f.mu.answered = 0, 0, 0
	return calls, requests, answered
}

func (f *s3Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.mu.requests++
	if h := r.Header.Get("amz-sdk-request"); h == "" || strings.HasPrefix(h, "attempt=1;") {
		f.mu.calls++
		f.mu.failing = f.mu.fail != 0
		if f.mu.fail > 0 {
			f.mu.fail--
		}
	}
	fail, resp := f.mu.failing, f.mu.resp
	if fail {
		f.mu.answered++
	}
	f.mu.Unlock()
	if !fail {
		f.next.ServeHTTP(w, r)
		return
	}
	if resp.code == "" || r.Method == http.MethodHead {
		w.WriteHeader(resp.status)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(resp.status)
	_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` +
		`<Error><Code>` + resp.code + `</Code><Message>canned by the test</Message>` +
		`<RequestId>test</RequestId></Error>`))
}

// s3Ops are the store's operations, each one call.
var s3Ops = []struct {
	name string
	do   func(t *testing.T, s *Store) error
}{
	{"put", func(t *testing.T, s *Store) error {
		return s.Bucket().Put(t.Context(), "k/put", bytes.NewReader([]byte("put")), false)
	}},
	{"put-if-absent", func(t *testing.T, s *Store) error {
		_, err := s.PutIfAbsent(t.Context(), "k/absent", BytesSource([]byte("absent")))
		return err
	}},
	{"get", func(t *testing.T, s *Store) error {
		_, err := s.Get(t.Context(), "k/there")
		return err
	}},
	{"stat", func(t *testing.T, s *Store) error {
		_, err := s.Stat(t.Context(), "k/there")
		return err
	}},
	{"list", func(t *testing.T, s *Store) error {
		for _, err := range s.List(t.Context(), "k/") {
			if err != nil {
				return err
			}
		}
		return nil
	}},
	{"delete", func(t *testing.T, s *Store) error {
		return s.Delete(t.Context(), "k/there")
	}},
}

// TestS3Transient: server errors and throttling are ErrTransient once
// the SDK's own attempts are spent, wrap the SDK's error, and a caller
// that repeats the call while IsTransient holds gets through once the
// server recovers.
func TestS3Transient(t *testing.T) {
	front, endpoint := newS3Front(t)
	s := openStore(t, s3URL(t, endpoint, "bkt", "remote"))
	all := []string{"put", "put-if-absent", "get", "stat", "list", "delete"}
	for _, tc := range []struct {
		resp     cannedResponse
		failures int // calls that fail before the server recovers
		ops      []string
	}{
		{cannedResponse{http.StatusServiceUnavailable, "ServiceUnavailable"}, 2, all},
		{cannedResponse{http.StatusInternalServerError, "InternalError"}, 2, []string{"put", "get"}},
		{cannedResponse{http.StatusBadGateway, ""}, 2, []string{"put", "stat"}}, // a proxy's answer: no S3 body
		{cannedResponse{http.StatusTooManyRequests, ""}, 1, []string{"list"}},
		// Throttling: the SDK waits seconds between its attempts.
		// A HEAD (stat) has no body: its code would be the status's.
		{cannedResponse{http.StatusServiceUnavailable, "SlowDown"}, 1, []string{"get"}},
	} {
		for _, op := range s3Ops {
			if !slices.Contains(tc.ops, op.name) {
				continue
			}
			t.Run(strconv.Itoa(tc.resp.status)+tc.resp.code+"/"+op.name, func(t *testing.T) {
				mustPut(t, s, "k/there", []byte("there"))
				front.counts()
				front.failNext(tc.failures, tc.resp)
				attempts := 0
				var err error
				for attempts <= tc.failures+1 {
					attempts++
					if err = op.do(t, s); err == nil || !IsTransient(err) {
						break
					}
					wantClass(t, op.name, err, ErrTransient)
					if tc.resp.code != "" && !strings.Contains(err.Error(), tc.resp.code) {
						t.Fatalf("%s: %v does not quote the server's error %s", op.name, err, tc.resp.code)
					}
				}
				if err != nil || attempts != tc.failures+1 {
					t.Fatalf("%s: %d calls, last error %v; want %d transient failures and then success", op.name, attempts, err, tc.failures)
				}
				if _, requests, answered := front.counts(); answered < tc.failures {
					t.Fatalf("%s: %d of %d requests refused, want at least %d", op.name, answered, requests, tc.failures)
				} else {
					t.Logf("%s: %d of %d requests refused", op.name, answered, requests)
				}
			})
		}
	}
}

// TestS3Permission: a 403 (wrong credentials, a denying policy) is
// ErrPermission for every operation, not transient, and the SDK's error
// with its code stays reachable with errors.As.
func TestS3Permission(t *testing.T) {
	front, endpoint := newS3Front(t)
	s := openStore(t, s3URL(t, endpoint, "bkt", "remote"))
	for _, code := range []string{"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"} {
		for _, op := range s3Ops {
			t.Run(code+"/"+op.name, func(t *testing.T) {
				mustPut(t, s, "k/there", []byte("there"))
				front.counts()
				front.failNext(-1, cannedResponse{http.StatusForbidden, code})
				defer front.failNext(0, cannedResponse{})
				err := op.do(t, s)
				wantClass(t, op.name, err, ErrPermission)
				var api interface{ ErrorCode() string }
				if !errors.As(err, &api) {
					t.Fatalf("%s: %v wraps no API error", op.name, err)
				}
				// HEAD (stat, and the checks before put-if-absent and
				// delete) has no body, so the code is the status's.
				if got := api.ErrorCode(); got != code && got != "Forbidden" {
					t.Fatalf("%s: API error code %q, want %q or Forbidden", op.name, got, code)
				}
				if calls, requests, _ := front.counts(); requests != calls {
					t.Fatalf("%s: %d requests in %d calls: the SDK repeated a 403", op.name, requests, calls)
				}
			})
		}
	}
}

// TestS3MissingBucket: against gofakes3, a bucket that does not exist is
// ErrBucketNotFound, not ErrNotFound, and not transient, for every
// operation: those that begin with a HEAD (Stat, Delete), whose answer
// has no body to say NoSuchBucket, ask the bucket (see notFound).
func TestS3MissingBucket(t *testing.T) {
	s := openStore(t, s3URL(t, newS3(t), "nobkt", "remote"))
	ctx := t.Context()
	for _, op := range s3Ops {
		t.Run(op.name, func(t *testing.T) {
			err := op.do(t, s)
			wantClass(t, op.name, err, ErrBucketNotFound)
			if errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: %v, want no ErrNotFound", op.name, err)
			}
		})
	}
	if _, err := s.OpenVerified(ctx, "k", 1, sha([]byte("k"))); !errors.Is(err, ErrBucketNotFound) {
		t.Fatalf("open verified: %v, want ErrBucketNotFound", err)
	}
}

// TestS3MissingKeyAsksBucketOnce: in a bucket that exists, Stat and Delete
// of a missing key are ErrNotFound; the first of them costs one more
// request (the bucket check), later ones none.
func TestS3MissingKeyAsksBucketOnce(t *testing.T) {
	front, endpoint := newS3Front(t)
	s := openStore(t, s3URL(t, endpoint, "bkt", "remote"))
	front.counts()
	for i := range 3 {
		_, err := s.Bucket().Stat(t.Context(), "k/none")
		wantClass(t, "stat", err, ErrNotFound)
		want := 1
		if i == 0 {
			want = 2 // the HEAD and the check
		}
		if calls, _, _ := front.counts(); calls != want {
			t.Fatalf("stat %d: %d calls, want %d", i, calls, want)
		}
	}
	err := s.Bucket().Delete(t.Context(), "k/none")
	wantClass(t, "delete", err, ErrNotFound)
	if calls, _, _ := front.counts(); calls != 1 {
		t.Fatalf("delete: %d calls, want 1 (the bucket is known)", calls)
	}
}
