package bulkloadclient_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/daemon/daemontest"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierclient"
)

// pollEvery is the pause between two polls of a condition; every poll is
// bounded by the test's context.
const pollEvery = 20 * time.Millisecond

// testTier is a real embedded tier (etcd, one coordinator, three tablet
// servers, the local changelog, a file:// object store) and a tier client.
type testTier struct {
	e  *daemon.Embedded
	tc *tierclient.Client
}

func startTier(ctx context.Context, t *testing.T) *testTier {
	t.Helper()
	e, tc := daemontest.StartWithClient(ctx, t, daemon.EmbeddedConfig{
		DataDir: t.TempDir(), EtcdUnsafeNoFsync: true,
		Tablet: daemon.TabletOptions{CacheSize: 32 << 20, MemTableBudget: 32 << 20},
	})
	return &testTier{e: e, tc: tc}
}

// eventsSchema is a partitioned table: region is the partition key.
func eventsSchema(t *testing.T, buckets int) kv.TableSchema {
	return kv.TableSchema{
		Columns: []kv.Column{
			{Name: "region", Type: mustType(t, "STRING")},
			{Name: "id", Type: mustType(t, "BIGINT")},
			{Name: "name", Type: mustType(t, "STRING")},
			{Name: "qty", Type: mustType(t, "INT"), Nullable: true},
		},
		PrimaryKey: []string{"region", "id"}, PartitionKeys: []string{"region"}, Buckets: buckets,
	}
}

// createPartitioned creates database.table with eventsSchema and the given
// partitions.
func (tr *testTier) createPartitioned(ctx context.Context, t *testing.T, database, table string, buckets, rf int, partitions ...string) *tierclient.TableInfo {
	t.Helper()
	if err := tr.tc.CreateDatabase(ctx, database); err != nil {
		t.Fatal(err)
	}
	info, err := tr.tc.CreateTable(ctx, database, table, eventsSchema(t, buckets), rf)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range partitions {
		if err := tr.tc.CreatePartition(ctx, database, table, p); err != nil {
			t.Fatal(err)
		}
	}
	return info
}

// begin calls Begin until it succeeds or fails with a non-retriable error
// (a new target answers UNAVAILABLE until its replicas are ready).
func begin(ctx context.Context, c *bulkloadclient.Client, target bulkload.Target, token string) (*bulkloadclient.BuildContext, error) {
	for {
		bc, err := c.Begin(ctx, target, token, bulkloadclient.BeginOptions{BuildTimeout: 5 * time.Minute})
		if err == nil || !bulkloadclient.IsRetriable(err) || ctx.Err() != nil {
			return bc, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}

// eventually polls cond until it returns nil; the test fails if ctx ends
// first.
func eventually(ctx context.Context, t *testing.T, what string, cond func() error) {
	t.Helper()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v (last: %v)", what, ctx.Err(), err)
		case <-time.After(pollEvery):
		}
	}
}

// expectActiveEmpty waits until target is ACTIVE again and checks it
// holds no row.
func (tr *testTier) expectActiveEmpty(ctx context.Context, t *testing.T, target bulkload.Target) {
	t.Helper()
	tt := tierclient.Target(target)
	eventually(ctx, t, target.String()+" is ACTIVE", func() error {
		loc, err := tr.tc.Locations(ctx, tt, true)
		if err != nil {
			return err
		}
		if loc.DataState != tierv1.DataState_DATA_STATE_ACTIVE {
			return fmt.Errorf("data state %s", loc.DataState)
		}
		return nil
	})
	n, err := tr.count(ctx, target)
	if err != nil {
		t.Fatalf("scan %s: %v", target, err)
	}
	if n != 0 {
		t.Fatalf("%s holds %d rows, want none", target, n)
	}
}

func (tr *testTier) count(ctx context.Context, target bulkload.Target) (int, error) {
	n := 0
	err := tr.tc.Scan(ctx, tierclient.Target(target), func(kv.Row) error { n++; return nil })
	return n, err
}

// transactions returns the transaction records of target.
func (tr *testTier) transactions(ctx context.Context, t *testing.T, h bulkload.Handle) []bulkload.Record {
	t.Helper()
	vs, err := tr.e.Meta().ListTargetBulkLoads(ctx, meta.Target{TableID: h.TableID, PartitionID: h.PartitionID})
	if err != nil {
		t.Fatal(err)
	}
	var recs []bulkload.Record
	for _, v := range vs {
		recs = append(recs, v.Value)
	}
	return recs
}

// objectsUnder lists the keys of the object store under the snapshot
// directories of bc (every bucket's snap-{id}/).
func objectsUnder(ctx context.Context, t *testing.T, store *objstore.Store, bc *bulkloadclient.BuildContext) []string {
	t.Helper()
	st := bc.SnapshotTarget()
	var keys []string
	for b, id := range bc.SnapshotIDs() {
		dir, err := store.Key(st.SnapshotDir(b, id))
		if err != nil {
			t.Fatal(err)
		}
		for a, err := range store.List(ctx, strings.TrimSuffix(dir, "/")+"/") {
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, a.Key)
		}
	}
	slices.Sort(keys)
	return keys
}

// referencedObjects returns the keys of every _METADATA of results and of
// every file they name.
func referencedObjects(ctx context.Context, t *testing.T, store *objstore.Store, results []snapshotbuild.BucketResult) []string {
	t.Helper()
	var keys []string
	for _, r := range results {
		mk, err := store.Key(r.MetadataPath)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := store.Get(ctx, mk)
		if err != nil {
			t.Fatal(err)
		}
		md, err := snapshot.DecodeMetadata(raw)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, mk)
		for _, f := range snapshot.Files(md) {
			k, err := store.Key(f.Handle.Path)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// faultyTransport sits in front of the real server. For each RPC method
// (the last element of the URL path, e.g. "Commit") it plays a script of
// faults, one per call, then passes calls through.
type faultyTransport struct {
	next http.RoundTripper

	mu      sync.Mutex
	scripts map[string][]fault
	sent    map[string]int // calls that reached the server, per method
	lost    map[string][][]byte
}

type fault int

const (
	// pass sends the call to the server and returns its answer.
	pass fault = iota
	// unavailable answers UNAVAILABLE without sending the call.
	unavailable
	// lostSuccess sends the call, lets the server finish it, reads the
	// whole answer and, if it is a success (200), returns a transport
	// error instead; other answers are passed through and do not use up
	// the fault.
	lostSuccess
)

func newFaultyTransport() *faultyTransport {
	return &faultyTransport{next: http.DefaultTransport, scripts: map[string][]fault{}, sent: map[string]int{}, lost: map[string][][]byte{}}
}

// script appends faults to method's script.
func (f *faultyTransport) script(method string, faults ...fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts[method] = append(f.scripts[method], faults...)
}

// clear drops what is left of method's script.
func (f *faultyTransport) clear(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts[method] = nil
}

func (f *faultyTransport) left(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.scripts[method])
}

func (f *faultyTransport) reached(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent[method]
}

// lostBodies returns the answers of method the client never saw.
func (f *faultyTransport) lostBodies(method string) [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lost[method])
}

var errConnReset = errors.New("injected: connection reset by peer")

func (f *faultyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	method := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	f.mu.Lock()
	next := pass
	if s := f.scripts[method]; len(s) > 0 {
		next = s[0]
		if next != lostSuccess { // popped once it was used
			f.scripts[method] = s[1:]
		}
	}
	if next != unavailable {
		f.sent[method]++
	}
	f.mu.Unlock()

	switch next {
	case unavailable:
		if r.Body != nil {
			_ = r.Body.Close()
		}
		body := `{"code":"unavailable","message":"injected: coordinator unavailable"}`
		return &http.Response{
			StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": []string{"application/json"}},
			Body:          io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: r,
		}, nil
	case lostSuccess:
		resp, err := f.next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body = io.NopCloser(bytes.NewReader(body))
			return resp, nil
		}
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				return nil, err
			}
			if body, err = io.ReadAll(zr); err != nil {
				return nil, err
			}
		}
		f.mu.Lock()
		if s := f.scripts[method]; len(s) > 0 && s[0] == lostSuccess {
			f.scripts[method] = s[1:]
		}
		f.lost[method] = append(f.lost[method], body)
		f.mu.Unlock()
		return nil, errConnReset
	default:
		return f.next.RoundTrip(r)
	}
}

func mustType(t *testing.T, s string) kv.Type {
	t.Helper()
	ty, err := kv.ParseType(s)
	if err != nil {
		t.Fatal(err)
	}
	return ty
}
