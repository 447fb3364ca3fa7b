package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/bulktxn"
)

// built is a bulk load's output in an object store, for the validator.
type built struct {
	faults *objstore.Faults
	store  *objstore.Store
	plan   snapshot.Plan
	req    snapshot.CommitRequest
	rows   []int64 // per bucket
	files  []string
}

func buildForValidation(t *testing.T) *built {
	t.Helper()
	dir := t.TempDir()
	inner, err := objstore.OpenBucket(t.Context(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	faults := objstore.NewFaults(inner)
	store := objstore.New(faults, "file://"+dir)
	t.Cleanup(func() { _ = store.Close() })
	tb, err := kv.NewTable(kv.TableSchema{
		Columns:    []kv.Column{{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}}, {Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true}},
		PrimaryKey: []string{"id"}, Buckets: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	plan := snapshot.Plan{
		Target: snapshot.Target{RemoteDir: store.Base(), Database: "d", Table: "t", TableID: 7},
		TxnID:  "0e4c7c36-6a4d-4d89-9b11-7d7f3c0f0a01", Buckets: 2, SnapshotIDs: []int64{3, 5},
		RequireRowCount: true, Limits: snapshot.DefaultLimits(),
	}
	b, err := snapshotbuild.New(store, snapshotbuild.Target{Table: tb, Snapshot: plan.Target, SnapshotIDs: plan.SnapshotIDs},
		snapshotbuild.Options{Workers: 1, MemoryBudget: 1 << 20, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range 50 {
		r := kv.Row{int64(i), "x"}
		k, _ := tb.EncodeKey(r)
		v, _ := tb.EncodeValue(r)
		bucket, _ := tb.Bucket(r)
		if err := b.AddPair(t.Context(), bucket, k, v); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := &built{faults: faults, store: store, plan: plan, rows: make([]int64, 2)}
	m := &snapshot.Manifest{BulkLoadID: plan.TxnID}
	for _, r := range res {
		m.Buckets = append(m.Buckets, snapshot.ManifestBucket{BucketID: int32(r.Bucket), Metadata: r.MetadataRef()})
		out.rows[r.Bucket] = r.RowCount
		md, err := snapshot.DecodeMetadata(mustGet(t, store, r.MetadataPath))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range md.PrivateFiles {
			out.files = append(out.files, f.Handle.Path)
		}
	}
	raw, err := snapshot.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := store.Key(plan.ManifestPath())
	if _, err := store.PutIfAbsent(t.Context(), key, objstore.BytesSource(raw)); err != nil {
		t.Fatal(err)
	}
	sum := refSHA(raw)
	out.req = snapshot.CommitRequest{ManifestPath: plan.ManifestPath(), ManifestLength: int64(len(raw)), ManifestSHA256: sum}
	return out
}

func mustGet(t *testing.T, s *objstore.Store, uri string) []byte {
	t.Helper()
	key, err := s.Key(uri)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func refSHA(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Validation reads what the validator's stages name and hashes every data
// file: storage errors are errors (the validation is retried), content
// that is not what the documents pin is a violation, and a valid commit
// yields every bucket's log offset.
func TestValidateManifest(t *testing.T) {
	b := buildForValidation(t)
	ctx := t.Context()
	res, err := validateManifest(ctx, b.store, b.plan, b.req, 4)
	if err != nil || len(res.Violations) > 0 {
		t.Fatalf("valid build: %+v, %v", res, err)
	}
	for i, off := range res.LogOffsets {
		if off != b.rows[i] {
			t.Fatalf("log offsets %v, rows %v", res.LogOffsets, b.rows)
		}
	}

	injected := errors.New("disk on fire")
	for _, tc := range []struct {
		name string
		arm  func()
	}{
		{"manifest read", func() {
			b.faults.FailKey(objstore.OpOpen, func(k string) bool { return strings.HasSuffix(k, "/manifest") }, injected)
		}},
		{"_METADATA read", func() {
			b.faults.FailKey(objstore.OpOpen, func(k string) bool { return strings.HasSuffix(k, "/_METADATA") }, injected)
		}},
		{"data file stat", func() { b.faults.FailNth(objstore.OpStat, 1, injected) }},
		{"data file read", func() {
			b.faults.FailKey(objstore.OpOpen, func(k string) bool { return strings.Contains(k, "/private-") }, injected)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.faults.Reset()
			tc.arm()
			res, err := validateManifest(ctx, b.store, b.plan, b.req, 4)
			if !errors.Is(err, injected) || len(res.Violations) > 0 {
				t.Fatalf("%+v, %v; want the storage error", res, err)
			}
		})
	}

	b.faults.Reset()
	b.faults.CorruptRead(func(k string) bool { return strings.Contains(k, "/private-") })
	res, err = validateManifest(ctx, b.store, b.plan, b.req, 4)
	if err != nil || len(res.Violations) == 0 || !errors.Is(res.Violations[0], RuleFileDigest) || !errors.Is(res.Violations[0], objstore.ErrIntegrity) {
		t.Fatalf("corrupt data: %+v, %v", res, err)
	}
	b.faults.Reset()
	// A missing manifest is a violation, not an error.
	key, _ := b.store.Key(b.plan.ManifestPath())
	if err := b.store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	res, err = validateManifest(ctx, b.store, b.plan, b.req, 4)
	if err != nil || len(res.Violations) != 1 || !errors.Is(res.Violations[0], snapshot.RuleObjectMissing) {
		t.Fatalf("missing manifest: %+v, %v", res, err)
	}
}

func TestBulkLoadConfig(t *testing.T) {
	c, err := BulkLoadConfig{}.machineConfig()
	if err != nil || c.ResendInterval != DefaultBulkResendInterval || c.MaxActive != bulktxn.DefaultConfig().MaxActive {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	c, err = BulkLoadConfig{DefaultBuildTimeout: 48 * time.Hour}.machineConfig()
	if err != nil || c.MaxBuildTimeout != 48*time.Hour {
		t.Fatalf("a default build timeout above the default maximum raises it: %+v, %v", c, err)
	}
	for _, bad := range []BulkLoadConfig{
		{AdoptBatch: 65},
		{MaxManifestBytes: snapshot.MaxDocumentSize + 1},
		{DefaultBuildTimeout: 2 * time.Hour, MaxBuildTimeout: time.Hour},
		{ResendInterval: time.Microsecond},
	} {
		if _, err := bad.machineConfig(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
