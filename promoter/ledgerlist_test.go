package promoter_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/thawdb/thaw/promoter"
)

// TestEtcdLedgerListSeesEveryChange: List decodes a record again only when
// its key's mod revision moved; every kind of change between two Lists —
// an update through the ledger, a value written around it (corrupt, then
// repaired), a deleted key, a new record — shows in the next List.
func TestEtcdLedgerListSeesEveryChange(t *testing.T) {
	cli := startEtcd(t)
	ctx := t.Context()
	l := promoter.NewEtcdLedger(cli, "/test/promoter", nil)
	now := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	a := sampleRecord(now)
	b := sampleRecord(now.Add(-time.Hour))
	b.ID = promoter.PromotionID("default", "lake.events", "shop.events", "2024-01-04", 41)
	var err error
	if a, err = l.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	if b, err = l.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	list := func() ([]promoter.Record, error) {
		t.Helper()
		rs, err := l.List(ctx)
		if err != nil && !errors.Is(err, promoter.ErrUnreadable) {
			t.Fatal(err)
		}
		return rs, err
	}
	ids := func(rs []promoter.Record) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID+"@"+string(r.Phase))
		}
		return out
	}
	if rs, _ := list(); !slices.Equal(ids(rs), []string{a.ID + "@" + string(promoter.PhaseBegun), b.ID + "@" + string(promoter.PhaseBegun)}) {
		t.Fatalf("first list: %v", ids(rs))
	}

	// An update through the ledger.
	a.Phase = promoter.PhaseBuilding
	if a, err = l.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	rs, _ := list()
	if !slices.Equal(ids(rs), []string{a.ID + "@" + string(promoter.PhaseBuilding), b.ID + "@" + string(promoter.PhaseBegun)}) || rs[0].Revision != a.Revision {
		t.Fatalf("after an update: %v (revision %d, want %d)", ids(rs), rs[0].Revision, a.Revision)
	}

	// A corrupt value written around the ledger, then repaired.
	key := "/test/promoter/promotions/" + b.ID
	if _, err := cli.Put(ctx, key, `{"id":"`+b.ID+`","unknown":1}`); err != nil {
		t.Fatal(err)
	}
	rs, err = list()
	if bad := promoter.UnreadableRecords(err); len(bad) != 1 || bad[0].Key != key || !slices.Equal(ids(rs), []string{a.ID + "@" + string(promoter.PhaseBuilding)}) {
		t.Fatalf("after corrupting %s: %v, %v", key, ids(rs), err)
	}
	if _, err := cli.Put(ctx, key, mustEncode(t, b)); err != nil {
		t.Fatal(err)
	}
	if rs, err = list(); err != nil || !slices.Equal(ids(rs), []string{a.ID + "@" + string(promoter.PhaseBuilding), b.ID + "@" + string(promoter.PhaseBegun)}) {
		t.Fatalf("after repairing %s: %v, %v", key, ids(rs), err)
	}

	// A deleted key and a new record.
	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	c := sampleRecord(now.Add(time.Hour))
	c.ID = promoter.PromotionID("default", "lake.events", "shop.events", "2024-01-09", 43)
	if _, err := l.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	if rs, _ = list(); !slices.Equal(ids(rs), []string{c.ID + "@" + string(promoter.PhaseBegun), a.ID + "@" + string(promoter.PhaseBuilding)}) {
		t.Fatalf("after a delete and a create: %v", ids(rs))
	}

	// More new records than a List fetches one by one.
	for i := range 40 {
		r := sampleRecord(now.Add(-time.Duration(i+2) * time.Hour))
		r.ID = promoter.PromotionID("default", "lake.events", "shop.events", fmt.Sprintf("2023-12-%02d", i%28+1), int64(100+i))
		if _, err := l.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if rs, _ = list(); len(rs) != 42 || rs[0].ID != c.ID || rs[1].ID != a.ID {
		t.Fatalf("after 40 creates: %d records, first %v", len(rs), ids(rs[:2]))
	}
}

// TestEtcdLedgerListCompacted: when the revision of a List's key read is
// compacted before it fetches the changed values, it reads everything
// again, at the newest revision.
func TestEtcdLedgerListCompacted(t *testing.T) {
	cli := startEtcd(t)
	ctx := t.Context()
	l := promoter.NewEtcdLedger(cli, "/test/promoter", nil)
	now := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	a, err := l.Create(ctx, sampleRecord(now))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.List(ctx); err != nil {
		t.Fatal(err)
	}
	a.Phase = promoter.PhaseBuilding
	if a, err = l.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := sampleRecord(now.Add(time.Hour))
	b.ID = promoter.PromotionID("default", "lake.events", "shop.events", "2024-01-09", 43)
	compacted := false
	promoter.SetAfterKeys(l, func() {
		if compacted {
			return
		}
		compacted = true
		// A write after the key read, then a compaction past it.
		created, err := l.Create(ctx, b)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := cli.Compact(ctx, created.Revision); err != nil {
			t.Error(err)
		}
	})
	rs, err := l.List(ctx)
	if err != nil || !compacted {
		t.Fatalf("list: %v (compacted %v)", err, compacted)
	}
	if len(rs) != 2 || rs[0].ID != b.ID || rs[1].ID != a.ID || rs[1].Phase != promoter.PhaseBuilding || rs[1].Revision != a.Revision {
		t.Fatalf("list after a compaction: %+v", rs)
	}
}

// mustEncode is r's stored form as the ledger writes it, read back from a
// scratch ledger's etcd value.
func mustEncode(t *testing.T, r promoter.Record) string {
	t.Helper()
	cli := startEtcd(t)
	scratch := promoter.NewEtcdLedger(cli, "/scratch", nil)
	r.Revision = 0
	if _, err := scratch.Create(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(t.Context(), "/scratch/promotions/"+r.ID)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal(resp, err)
	}
	return string(resp.Kvs[0].Value)
}

// TestEtcdLedgerListCopies: a caller may change what List returned,
// through its reference members too, without changing what the next List
// returns. It also fails when Record gains a reference member, so that the
// ledger's copy (cloneRecord) is extended with it.
func TestEtcdLedgerListCopies(t *testing.T) {
	known := []string{"LakePartitions", "BegunAt", "CommittedAt"}
	rt := reflect.TypeFor[promoter.Record]()
	for f := range rt.Fields() {
		switch f.Type.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func, reflect.Array:
			if !slices.Contains(known, f.Name) {
				t.Errorf("Record.%s (%s) is a reference member the ledger's List does not copy: extend cloneRecord and this test", f.Name, f.Type)
			}
		}
	}

	cli := startEtcd(t)
	ctx := t.Context()
	l := promoter.NewEtcdLedger(cli, "/test/promoter", nil)
	r := sampleRecord(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	committed := r.BegunAt.Add(time.Minute)
	r.CommittedAt = &committed
	if _, err := l.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	first, err := l.List(ctx)
	if err != nil || len(first) != 1 {
		t.Fatal(first, err)
	}
	want := first[0]
	want.LakePartitions = slices.Clone(want.LakePartitions)
	begun, comm := *want.BegunAt, *want.CommittedAt
	first[0].LakePartitions[0] = "changed"
	*first[0].BegunAt = begun.Add(time.Hour)
	*first[0].CommittedAt = comm.Add(time.Hour)
	second, err := l.List(ctx)
	if err != nil || len(second) != 1 {
		t.Fatal(second, err)
	}
	got := second[0]
	if !slices.Equal(got.LakePartitions, want.LakePartitions) || !got.BegunAt.Equal(begun) || !got.CommittedAt.Equal(comm) {
		t.Fatalf("second list: %v %v %v, want %v %v %v", got.LakePartitions, got.BegunAt, got.CommittedAt, want.LakePartitions, begun, comm)
	}
}
