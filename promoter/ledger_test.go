package promoter_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/tier/meta"
)

func startEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	m, err := meta.StartEmbedded(t.Context(), meta.EmbeddedConfig{Dir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close etcd: %v", err)
		}
	})
	cli, err := m.Client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func sampleRecord(now time.Time) promoter.Record {
	id := promoter.PromotionID("default", "lake.events", "shop.events", "2024-01-05", 42)
	begun := now.Add(time.Second)
	return promoter.Record{
		ID: id, Policy: "events", Catalog: "default", LakeTable: "lake.events", Partition: "2024-01-05",
		LakePartitions: []string{"0/event_day=2024-01-05"}, SourceSnapshotID: 42, ScanSnapshotID: 43,
		Database: "shop", Table: "events", CallerToken: promoter.CallerToken(id, 1), Attempt: 1,
		Phase: promoter.PhaseBegun, TxnID: "0b0d6f7e-52f1-4b8e-9a43-0b2a1e6c1d11", Buckets: 4,
		Rows: 10, Bytes: 2048, CreatedAt: now, UpdatedAt: now, BegunAt: &begun,
	}
}

func TestEtcdLedger(t *testing.T) {
	cli := startEtcd(t)
	ctx := t.Context()
	l := promoter.NewEtcdLedger(cli, "/test/promoter", nil)
	now := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	r := sampleRecord(now)

	created, err := l.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if created.Revision <= 0 {
		t.Fatalf("created revision %d", created.Revision)
	}
	if _, err := l.Create(ctx, r); !errors.Is(err, promoter.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}

	// JSON round trip through etcd: every field but the revision as stored.
	got, err := l.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := r
	want.Revision = created.Revision
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("get:\n got %+v\nwant %+v", got, want)
	}
	resp, err := cli.Get(ctx, "/test/promoter/promotions/"+r.ID)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("raw get: %v %v", resp, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "lake_table", "source_snapshot_id", "caller_token", "txn_id", "created_at", "begun_at", "database", "table", "rows", "bytes"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("stored JSON lacks %q: %s", k, resp.Kvs[0].Value)
		}
	}
	if _, ok := raw["Revision"]; ok {
		t.Errorf("stored JSON carries the revision: %s", resp.Kvs[0].Value)
	}

	// CAS: an update with the current revision wins, a stale one conflicts.
	upd := got
	upd.Phase = promoter.PhaseBuilding
	upd2, err := l.Update(ctx, upd)
	if err != nil {
		t.Fatal(err)
	}
	if upd2.Revision <= got.Revision {
		t.Fatalf("revision did not grow: %d -> %d", got.Revision, upd2.Revision)
	}
	stale := got
	stale.Phase = promoter.PhaseFailed
	if _, err := l.Update(ctx, stale); !errors.Is(err, promoter.ErrConflict) {
		t.Fatalf("stale update: %v, want ErrConflict", err)
	}
	if g, _ := l.Get(ctx, r.ID); g.Phase != promoter.PhaseBuilding {
		t.Fatalf("after stale update: phase %s", g.Phase)
	}
	missing := sampleRecord(now)
	missing.ID = promoter.PromotionID("default", "lake.events", "shop.events", "2024-01-06", 42)
	missing.Revision = upd2.Revision
	if _, err := l.Update(ctx, missing); !errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("update of a missing record: %v, want ErrNotFound", err)
	}
	if _, err := l.Get(ctx, missing.ID); !errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := l.Get(ctx, "../../x"); !errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("get of an invalid id: %v", err)
	}
	bad := r
	bad.ID = "p-../../leader"
	if _, err := l.Create(ctx, bad); err == nil {
		t.Fatal("create with an invalid id succeeded")
	}

	// List: newest first.
	older := sampleRecord(now.Add(-time.Hour))
	older.ID = promoter.PromotionID("default", "lake.events", "shop.events", "2024-01-04", 41)
	if _, err := l.Create(ctx, older); err != nil {
		t.Fatal(err)
	}
	list, err := l.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != r.ID || list[1].ID != older.ID || list[0].Revision != upd2.Revision {
		t.Fatalf("list: %+v", list)
	}

	// Delete: CAS on the revision like Update.
	if err := l.Delete(ctx, r.ID, got.Revision); !errors.Is(err, promoter.ErrConflict) {
		t.Fatalf("delete at a stale revision: %v, want ErrConflict", err)
	}
	if g, err := l.Get(ctx, r.ID); err != nil || g.Revision != upd2.Revision {
		t.Fatalf("after a stale delete: %+v %v", g, err)
	}
	if err := l.Delete(ctx, "../../x", upd2.Revision); err == nil {
		t.Fatal("delete of an invalid id succeeded")
	}
	if err := l.Delete(ctx, r.ID, 0); !errors.Is(err, promoter.ErrConflict) {
		t.Fatalf("delete without a revision: %v, want ErrConflict", err)
	}
	if err := l.Delete(ctx, r.ID, upd2.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, r.ID); !errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := l.Delete(ctx, r.ID, upd2.Revision); !errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if list, err := l.List(ctx); err != nil || len(list) != 1 || list[0].ID != older.ID {
		t.Fatalf("list after delete: %+v %v", list, err)
	}

	// A corrupt value is an error, not a silently empty record.
	if _, err := cli.Put(ctx, "/test/promoter/promotions/"+older.ID, `{"id":"`+older.ID+`","unknown":1}`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, older.ID); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("get of a record with an unknown field: %v", err)
	}
}

// TestEtcdLedgerFenced: writes run only while the leadership is current;
// after it is lost they fail with a fencing error and change nothing.
// fencedLedger returns an etcd client and a ledger under /test/promoter
// fenced by promoter-1's leadership.
func fencedLedger(t *testing.T) (*clientv3.Client, *fencing.Leadership, *promoter.EtcdLedger) {
	t.Helper()
	cli := startEtcd(t)
	lead, err := fencing.Elect(t.Context(), cli, "/test/promoter/leader", "promoter-1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return cli, lead, promoter.NewEtcdLedger(cli, "/test/promoter", lead)
}

func TestEtcdLedgerFenced(t *testing.T) {
	cli, lead, l := fencedLedger(t)
	ctx := t.Context()
	r := sampleRecord(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	created, err := l.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Create(ctx, r); !errors.Is(err, promoter.ErrExists) {
		t.Fatalf("second fenced create: %v, want ErrExists", err)
	}
	stale := created
	stale.Revision--
	if _, err := l.Update(ctx, stale); !errors.Is(err, promoter.ErrConflict) {
		t.Fatalf("fenced stale update: %v, want ErrConflict", err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// A successor leads now.
	next, err := fencing.Elect(ctx, cli, "/test/promoter/leader", "promoter-2", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = next.Resign(ctx) }()
	upd := created
	upd.Phase = promoter.PhaseFailed
	if _, err := l.Update(ctx, upd); !fencing.IsFenced(err) {
		t.Fatalf("update after leadership loss: %v, want a fencing error", err)
	}
	other := sampleRecord(time.Now())
	other.ID = promoter.PromotionID("default", "lake.events", "shop.events", "x", 1)
	if _, err := l.Create(ctx, other); !fencing.IsFenced(err) {
		t.Fatalf("create after leadership loss: %v, want a fencing error", err)
	}
	if err := l.Delete(ctx, created.ID, created.Revision); !fencing.IsFenced(err) {
		t.Fatalf("delete after leadership loss: %v, want a fencing error", err)
	}
	// Nothing changed.
	plain := promoter.NewEtcdLedger(cli, "/test/promoter", nil)
	got, err := plain.Get(ctx, r.ID)
	if err != nil || got.Phase != created.Phase || got.Revision != created.Revision {
		t.Fatalf("after fenced writes: %+v %v", got, err)
	}
	if _, err := plain.Get(ctx, other.ID); !errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("fenced create left a record: %v", err)
	}
	// The successor's ledger writes.
	l2 := promoter.NewEtcdLedger(cli, "/test/promoter", next)
	if _, err := l2.Update(ctx, upd); err != nil {
		t.Fatalf("successor update: %v", err)
	}
}
