package bulkloadclient_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/internal/testvgw"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/uploadcap"
)

// TestSignedUploads runs scoped uploads against a tier whose snapshots
// live in S3 (versitygw, which checks signatures, checksums and
// conditions): every object goes straight to the store with a PUT the
// gateway signed for it, none through the coordinator, and the builders
// hold no store credentials at all (the environment's AWS keys are gone
// before they start). A signed upload of other bytes than declared is
// refused and leaves nothing; no signed URL appears in the shipped
// context, the results, the logs or the metrics.
func TestSignedUploads(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var logs testlog.Buffer
	_, e, tc := s3Tier(ctx, t, &logs)
	// The tier's store read its keys when it opened; from here on nothing
	// in this process can sign an S3 request but the tier.
	testvgw.StaticCredentials(t, "", "")

	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	admin, err := bulkloadclient.New(ctx, e.Address(), bulkloadclient.WithScopedUploads(), bulkloadclient.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	target := bulkload.Target{Database: "shop", Table: "items"}
	bc, err := begin(ctx, admin, target, "signed-1")
	if err != nil {
		t.Fatal(err)
	}
	blob, err := bc.Marshal()
	if err != nil {
		t.Fatal(err)
	}

	// A file whose bytes are not the ones declared: the gateway signs the
	// declared size and SHA-256, the store refuses the rest.
	store := admin.ScopedStore(bc, 0)
	bad := filepath.Join(t.TempDir(), "bad.sst")
	if err := os.WriteFile(bad, []byte("these are not the declared bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	declared := sha256.Sum256([]byte("these are the declared bytes...."))
	badKey := bucketDirKey(t, bc, store, 0) + "/bad.sst"
	if _, err := store.PutFileStamped(ctx, badKey, bad, 32, hex.EncodeToString(declared[:]), objstore.FileStamp{}); !errors.Is(err, objstore.ErrIntegrity) {
		t.Fatalf("upload of other bytes than declared: %v, want objstore.ErrIntegrity", err)
	}
	if _, err := e.Objects().Stat(ctx, badKey); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the refused upload left an object: %v", err)
	}

	// Bucket 0 built once here, then again by the first builder below,
	// which adopts what is there: the gateway answers "adopted" and signs
	// nothing.
	first := buildThrough(ctx, t, bc, append(itemRows(600, ""), itemRows(100, "-v2")...), []int{0}, admin.ScopedStore(bc, 0))
	results := buildInTwoAndCommit(ctx, t, e, tc, admin, bc, blob, log)
	if first[0].MetadataSHA256 != results[0].MetadataSHA256 {
		t.Fatal("the two builds of bucket 0 differ")
	}

	files := 0
	for _, r := range results[:2] { // bucket 0's files were signed once
		files += r.Files + 1
	}
	for _, r := range results[2:] {
		files += r.Files + 1
	}
	metric := func(op, result string) int {
		v, _, err := metricvalue.Value(e.Gatherer(), "thaw_coordinator_upload_requests_total", map[string]string{"op": op, "result": result})
		if err != nil {
			t.Fatal(err)
		}
		return int(v)
	}
	// Signed: every file, _METADATA and the manifest once, plus the bad
	// file; the rebuild's answers (adopted) count as ok signs too.
	if signs, puts := metric("sign", "ok"), metric("put", "ok"); signs != files+1+1+results[0].Files+1 || puts != 0 {
		t.Fatalf("the gateway signed %d uploads and stored %d objects; the build wrote %d files, _METADATA and a manifest", signs, puts, files)
	}
	bytesThrough, _, err := metricvalue.Value(e.Gatherer(), "thaw_coordinator_upload_bytes_total", nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytesThrough != 0 {
		t.Fatalf("%v bytes went through the coordinator", bytesThrough)
	}

	// The transaction is committed: no more signatures.
	cred, err := admin.UploadCredentials(ctx, bc.Handle())
	if !errors.Is(err, bulkload.ErrInvalidState) {
		t.Fatalf("credentials of a committed transaction: %+v %v", cred, err)
	}
	noCredentials(t, e, blob, results, &logs)
}

// TestSignedUploadRefusals sends the gateway POSTs it must refuse on an S3
// store, and checks that one with signing turned off answers unsupported
// and that a ScopedStore then sends the object through the gateway.
func TestSignedUploadRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var logs testlog.Buffer
	srv, e, _ := s3Tier(ctx, t, &logs)
	c, err := bulkloadclient.New(ctx, e.Address())
	if err != nil {
		t.Fatal(err)
	}
	bc, err := begin(ctx, c, bulkload.Target{Database: "shop", Table: "items"}, "signed-refusals")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := c.UploadCredentials(ctx, bc.Handle(), 1)
	if err != nil {
		t.Fatal(err)
	}
	store := c.ScopedStore(bc, 1)
	dir1 := bc.RemoteDataDir() + "/" + bucketDirKey(t, bc, store, 1)
	dir2 := bc.RemoteDataDir() + "/" + bucketDirKey(t, bc, store, 2)
	sum := sha256.Sum256([]byte("x"))
	sha := hex.EncodeToString(sum[:])
	post := func(uri, length, sha string, body []byte) (int, uploadcap.Refusal) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Address()+uploadcap.Path+"?uri="+url.QueryEscape(uri), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+cred.Token.Reveal())
		if length != "" {
			req.Header.Set(uploadcap.HeaderLength, length)
		}
		req.Header.Set(uploadcap.HeaderSHA256, sha)
		return gatewayDo(t, req)
	}
	for name, tc := range map[string]struct {
		uri, length, sha string
		body             []byte
		status           int
		class            string
	}{
		"another bucket":  {dir2 + "/a.sst", "1", sha, nil, http.StatusForbidden, uploadcap.OutOfScope},
		"the manifest":    {bc.ManifestPath(), "1", sha, nil, http.StatusForbidden, uploadcap.OutOfScope},
		"a subdirectory":  {dir1 + "/sub/a.sst", "1", sha, nil, http.StatusForbidden, uploadcap.OutOfScope},
		"no length":       {dir1 + "/a.sst", "", sha, nil, http.StatusLengthRequired, uploadcap.BadRequest},
		"a bad length":    {dir1 + "/a.sst", "+1", sha, nil, http.StatusBadRequest, uploadcap.BadRequest},
		"a bad digest":    {dir1 + "/a.sst", "1", "XYZ", nil, http.StatusBadRequest, uploadcap.BadRequest},
		"a body":          {dir1 + "/a.sst", "1", sha, []byte("x"), http.StatusBadRequest, uploadcap.BadRequest},
		"over the limit":  {dir1 + "/a.sst", strconv.FormatInt(9<<30, 10), sha, nil, http.StatusRequestEntityTooLarge, uploadcap.TooLarge},
		"outside a store": {"s3://elsewhere/a.sst", "1", sha, nil, http.StatusForbidden, uploadcap.OutOfScope},
	} {
		if status, r := post(tc.uri, tc.length, tc.sha, tc.body); status != tc.status || r.Class != tc.class {
			t.Errorf("%s: %d %+v, want %d %s", name, status, r, tc.status, tc.class)
		}
	}
	if status, r := post(dir1+"/a.sst", "1", sha, nil); status != http.StatusOK {
		t.Fatalf("a POST in scope: %d %+v", status, r)
	}
	if _, err := c.Abort(ctx, bc.Handle()); err != nil {
		t.Fatal(err)
	}
	if status, r := post(dir1+"/a.sst", "1", sha, nil); status != http.StatusForbidden || r.Class != uploadcap.NotBegun {
		t.Fatalf("a POST after Abort: %d %+v", status, r)
	}

	// Signing turned off: POST answers unsupported, and a ScopedStore
	// sends its objects through the gateway instead.
	off, _ := scopedTier(ctx, t, &logs, daemon.EmbeddedConfig{
		ObjectStore: srv.StoreURL("lake", "off"),
		Coordinator: daemon.CoordinatorOptions{BulkLoad: daemon.BulkLoadOptions{SignedUploadTTL: -1}},
	}, "items")
	c2, err := bulkloadclient.New(ctx, off.Address(), bulkloadclient.WithScopedUploads())
	if err != nil {
		t.Fatal(err)
	}
	bc2, err := begin(ctx, c2, bulkload.Target{Database: "shop", Table: "items"}, "signed-off")
	if err != nil {
		t.Fatal(err)
	}
	results := buildThrough(ctx, t, bc2, itemRows(50, ""), nil, c2.ScopedStore(bc2))
	if st, err := c2.Commit(ctx, bc2, results, 30*time.Second); err != nil || st.State != bulkload.Committed {
		t.Fatalf("commit: %+v %v", st, err)
	}
	unsupported, _, err := metricvalue.Value(off.Gatherer(), "thaw_coordinator_upload_requests_total", map[string]string{"op": "sign", "result": uploadcap.Unsupported})
	if err != nil {
		t.Fatal(err)
	}
	puts, _, err := metricvalue.Value(off.Gatherer(), "thaw_coordinator_upload_requests_total", map[string]string{"op": "put", "result": "ok"})
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, r := range results {
		files += r.Files + 1
	}
	// One ScopedStore for the build, one for the manifest: each asks until
	// its first answer (the build's first uploads ask concurrently), then
	// remembers.
	if unsupported < 2 || int(unsupported) >= files || int(puts) != files+1 {
		t.Fatalf("%v unsupported signs, %v puts; want 2..%d and %d", unsupported, puts, files-1, files+1)
	}
}

// s3Tier starts versitygw with a bucket "lake" and a scopedTier whose
// snapshots live in it, under "tier".
func s3Tier(ctx context.Context, t *testing.T, logs *testlog.Buffer) (*testvgw.Server, *daemon.Embedded, *tierclient.Client) {
	t.Helper()
	srv := testvgw.Start(t)
	srv.Bucket(t, "lake")
	e, tc := scopedTier(ctx, t, logs, daemon.EmbeddedConfig{ObjectStore: srv.StoreURL("lake", "tier")}, "items")
	return srv, e, tc
}

// bucketDirKey is the key of bucket b's snapshot directory.
func bucketDirKey(t *testing.T, bc *bulkloadclient.BuildContext, s *bulkloadclient.ScopedStore, b int) string {
	t.Helper()
	key, err := s.Key(bc.SnapshotTarget().SnapshotDir(b, bc.SnapshotIDs()[b]))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// s3Faults is an HTTP transport that interferes with the signed PUTs
// sent to the store (requests whose URL is signed) and passes every other
// request on (the client's store transport, WithStoreHTTPClient, sees
// only signed PUTs). Under an http.Client, its errors reach the caller wrapped in
// a *url.Error, which quotes the URL.
type s3Faults struct {
	mode atomic.Value // string: "", "race", "cut", "unavailable"
	seen atomic.Int32 // signed PUTs seen
}

func (f *s3Faults) RoundTrip(req *http.Request) (*http.Response, error) {
	inner := http.DefaultTransport
	if !strings.Contains(req.URL.RawQuery, "X-Amz-Signature") {
		return inner.RoundTrip(req)
	}
	f.seen.Add(1)
	mode, _ := f.mode.Load().(string)
	switch mode {
	case "cut":
		req.Body.Close()
		return nil, errors.New("connection reset by peer")
	case "unavailable":
		req.Body.Close()
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
			Body: io.NopCloser(strings.NewReader("<Error><Code>SlowDown</Code></Error>")), Request: req}, nil
	case "race":
		// Another builder sends the same object first, with the same
		// signature; this request then finds the key taken.
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		first := req.Clone(req.Context())
		first.Body = io.NopCloser(bytes.NewReader(body))
		resp, err := inner.RoundTrip(first)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("the racing upload got %s", resp.Status)
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	return inner.RoundTrip(req)
}

// TestSignedUploadFaults injects failures into the signed PUT itself: a
// connection cut and an unavailable store leave nothing and give a
// transient error that quotes no signature; an object that another
// builder stored between the signing and the PUT is adopted.
func TestSignedUploadFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var logs testlog.Buffer
	_, e, _ := s3Tier(ctx, t, &logs)
	faults := &s3Faults{}
	c, err := bulkloadclient.New(ctx, e.Address(), bulkloadclient.WithStoreHTTPClient(&http.Client{Transport: faults}))
	if err != nil {
		t.Fatal(err)
	}
	bc, err := begin(ctx, c, bulkload.Target{Database: "shop", Table: "items"}, "signed-faults")
	if err != nil {
		t.Fatal(err)
	}
	store := c.ScopedStore(bc, 0)
	file := filepath.Join(t.TempDir(), "a.sst")
	body := []byte("the bytes of one snapshot file")
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	sha := hex.EncodeToString(sum[:])
	key := bucketDirKey(t, bc, store, 0) + "/a.sst"

	for _, mode := range []string{"cut", "unavailable"} {
		faults.mode.Store(mode)
		_, err := store.PutFileStamped(ctx, key, file, int64(len(body)), sha, objstore.FileStamp{})
		if !objstore.IsTransient(err) || strings.Contains(err.Error(), "X-Amz-") {
			t.Fatalf("%s: %v, want a transient error without the signed URL", mode, err)
		}
		if _, err := e.Objects().Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s: an object was stored: %v", mode, err)
		}
	}
	faults.mode.Store("race")
	before := faults.seen.Load()
	obj, err := store.PutFileStamped(ctx, key, file, int64(len(body)), sha, objstore.FileStamp{})
	if err != nil || !obj.Adopted || faults.seen.Load() != before+1 {
		t.Fatalf("after losing the race: %+v %v (%d signed PUTs)", obj, err, faults.seen.Load()-before)
	}
	if got, err := e.Objects().Get(ctx, key); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("stored: %q %v", got, err)
	}
	// Other bytes under the taken key: a conflict, found before anything is
	// signed.
	faults.mode.Store("")
	other := filepath.Join(t.TempDir(), "b.sst")
	if err := os.WriteFile(other, bytes.ToUpper(body), 0o644); err != nil {
		t.Fatal(err)
	}
	osum := sha256.Sum256(bytes.ToUpper(body))
	before = faults.seen.Load()
	if _, err := store.PutFileStamped(ctx, key, other, int64(len(body)), hex.EncodeToString(osum[:]), objstore.FileStamp{}); !errors.Is(err, objstore.ErrConflict) || faults.seen.Load() != before {
		t.Fatalf("other bytes under a taken key: %v (%d signed PUTs)", err, faults.seen.Load()-before)
	}
	if strings.Contains(logs.String(), "X-Amz-Signature") {
		t.Fatal("a log line holds a signed URL")
	}
}
