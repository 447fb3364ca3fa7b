package meta_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/tier/meta"
)

// bulkRecord returns a BEGUN record of a transaction on the target.
func bulkRecord(t *testing.T, txnID string, tgt meta.Target, name meta.TargetName, buckets int) bulkload.Record {
	t.Helper()
	sc, err := json.Marshal(schema(buckets, name.Partition != ""))
	if err != nil {
		t.Fatal(err)
	}
	return bulkload.Record{
		TxnID: txnID, State: bulkload.Begun, CallerToken: "job-1",
		Target:  bulkload.Target{Database: name.Database, Table: name.Table, Partition: name.Partition},
		TableID: tgt.TableID, PartitionID: tgt.PartitionID,
		Creator:       bulkload.Principal{Type: "User", Name: "alice"},
		RemoteDataDir: "file:///remote", Schema: sc, Buckets: buckets, Bucketing: "fluss",
		CreatedMs: 1000, UpdatedMs: 1000, BuildDeadlineMs: 100000,
	}
}

const (
	txnA = "0e4c7c36-6a4d-4d89-9b11-7d7f3c0f0a01"
	txnB = "0e4c7c36-6a4d-4d89-9b11-7d7f3c0f0a02"
)

func TestBulkLoadRecords(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	tbl := e.createTable("d", "t", 3, false)
	name := meta.TargetName{Database: "d", Table: "t"}
	tgt := tbl.Value.Target()
	rec := bulkRecord(t, txnA, tgt, name, 3)

	// Begin: the record and the fence in one transaction.
	rev, err := e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{
		Record:       rec,
		Registration: &meta.BulkLoadRegistration{Target: name, Rev: tbl.Rev, State: meta.Loading, BulkLoadID: txnA},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.s.GetBulkLoad(ctx, tgt, txnA)
	if err != nil || got.Rev != rev || got.Value.TxnID != txnA || got.Value.State != bulkload.Begun {
		t.Fatalf("record after begin: %+v, %v", got, err)
	}
	tv, err := e.s.GetTable(ctx, "d", "t")
	if err != nil || tv.Rev != rev || tv.Value.DataState != meta.Loading || tv.Value.BulkLoadID != txnA {
		t.Fatalf("registration after begin: %+v, %v", tv, err)
	}

	// Creating it again, or writing at a stale record or registration
	// revision, changes nothing.
	before := e.dump()
	for _, tc := range []struct {
		name string
		w    meta.BulkLoadWrite
	}{
		{"create again", meta.BulkLoadWrite{Record: rec}},
		{"stale record revision", meta.BulkLoadWrite{Record: rec, ExpectRev: rev - 1}},
		{"stale registration revision", meta.BulkLoadWrite{Record: rec, ExpectRev: rev,
			Registration: &meta.BulkLoadRegistration{Target: name, Rev: tbl.Rev, State: meta.Active, BulkLoadID: txnA}}},
		{"moved assignment", meta.BulkLoadWrite{Record: rec, ExpectRev: rev, AssignmentRev: 1}},
		{"moved registration", meta.BulkLoadWrite{Record: rec, ExpectRev: rev, RegistrationRev: tbl.Rev}},
	} {
		if _, err := e.s.PutBulkLoad(ctx, e.g, tc.w); !errors.Is(err, fencing.ErrPreconditionFailed) {
			t.Errorf("%s: %v, want a precondition failure", tc.name, err)
		}
	}
	e.unchanged(before, "refused bulk-load writes")

	// An invalid record or an adoption next to a registration change is
	// refused before anything is written.
	bad := rec
	bad.Buckets = 0
	if _, err := e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{Record: bad, ExpectRev: rev}); !errors.Is(err, meta.ErrInvalid) {
		t.Errorf("invalid record: %v", err)
	}
	if _, err := e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{Record: rec, ExpectRev: rev,
		Registration: &meta.BulkLoadRegistration{Target: name, Rev: rev, State: meta.Loading, BulkLoadID: txnA},
		Adopt:        []meta.BulkLoadAdoption{{Bucket: 0, Snapshot: meta.BucketSnapshot{SnapshotID: 1, MetadataPath: "x"}}},
	}); !errors.Is(err, meta.ErrInvalid) {
		t.Errorf("adoption with a registration change: %v", err)
	}
	e.unchanged(before, "invalid bulk-load writes")

	// Fence ready: snapshot ids allocated and persisted, comparing the
	// assignment too.
	ids, err := e.s.AllocateSnapshotIDs(ctx, e.g, tgt, 3)
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.s.GetAssignment(ctx, tgt)
	if err != nil {
		t.Fatal(err)
	}
	rec.SnapshotIDs = ids
	rev, err = e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{Record: rec, ExpectRev: rev, AssignmentRev: a.Rev, RegistrationRev: rev})
	if err != nil {
		t.Fatal(err)
	}
	// Decide, then adopt two buckets with the cursor in one transaction.
	rec.Manifest = &bulkload.ManifestRef{Path: "file:///remote/m", Length: 10, SHA256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	rec.CommitDecisionDeadlineMs = 50000
	rec.State = bulkload.Committing
	if rev, err = e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{Record: rec, ExpectRev: rev}); err != nil {
		t.Fatal(err)
	}
	adopt := func(from, to int) []meta.BulkLoadAdoption {
		var out []meta.BulkLoadAdoption
		for b := from; b < to; b++ {
			out = append(out, meta.BulkLoadAdoption{Bucket: b, Snapshot: meta.BucketSnapshot{SnapshotID: ids[b], LogOffset: int64(10 * b), MetadataPath: "file:///remote/md" + string(rune('0'+b))}})
		}
		return out
	}
	rec.AdoptedBuckets = 2
	if rev, err = e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{Record: rec, ExpectRev: rev, Adopt: adopt(0, 2)}); err != nil {
		t.Fatal(err)
	}
	for b := range 2 {
		snaps, err := e.s.ListSnapshots(ctx, tgt, b)
		if err != nil || len(snaps) != 1 || snaps[0].Rev != rev || snaps[0].Value.SnapshotID != ids[b] || snaps[0].Value.LogOffset != int64(10*b) {
			t.Fatalf("bucket %d registry: %+v, %v", b, snaps, err)
		}
	}
	if has, key, err := e.s.HasSnapshots(ctx, tgt); err != nil || !has || key == "" {
		t.Fatalf("HasSnapshots after adoption: %v %q %v", has, key, err)
	}
	// A repeated batch (a successor redoing it) keeps identical entries;
	// a different entry under the same id is a conflict.
	if rev, err = e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{Record: rec, ExpectRev: rev, Adopt: adopt(1, 3)}); err != nil {
		t.Fatalf("repeated adoption: %v", err)
	}
	conflict := adopt(2, 3)
	conflict[0].Snapshot.LogOffset = 99
	before = e.dump()
	if _, err := e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{Record: rec, ExpectRev: rev, Adopt: conflict}); !errors.Is(err, meta.ErrConflict) {
		t.Fatalf("conflicting adoption: %v", err)
	}
	e.unchanged(before, "a conflicting adoption")

	// A second record of another target, then listing.
	e.createTable("d", "p", 2, true)
	part := e.createPartition("d", "p", "x", 2)
	pname := meta.TargetName{Database: "d", Table: "p", Partition: "x"}
	prec := bulkRecord(t, txnB, part.Value.Target(), pname, 2)
	if _, err := e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{Record: prec,
		Registration: &meta.BulkLoadRegistration{Target: pname, Rev: part.Rev, State: meta.Loading, BulkLoadID: txnB}}); err != nil {
		t.Fatal(err)
	}
	all, err := e.s.ListBulkLoads(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %d records, %v", len(all), err)
	}
	one, err := e.s.ListTargetBulkLoads(ctx, part.Value.Target())
	if err != nil || len(one) != 1 || one[0].Value.TxnID != txnB {
		t.Fatalf("list of the partition: %+v, %v", one, err)
	}
	if has, _, err := e.s.HasSnapshots(ctx, part.Value.Target()); err != nil || has {
		t.Fatalf("HasSnapshots of an empty partition: %v %v", has, err)
	}

	// Result GC: delete at the current revision only.
	if err := e.s.DeleteBulkLoad(ctx, e.g, tgt, txnA, rev-1); !errors.Is(err, fencing.ErrPreconditionFailed) {
		t.Fatalf("delete at a stale revision: %v", err)
	}
	if err := e.s.DeleteBulkLoad(ctx, e.g, tgt, txnA, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.GetBulkLoad(ctx, tgt, txnA); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("read after delete: %v", err)
	}

	// A deposed coordinator writes nothing.
	if err := e.lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{Record: rec}); !errors.Is(err, fencing.ErrNotLeader) {
		t.Fatalf("write after resigning: %v", err)
	}
}

func TestServerIncarnations(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	r1, err := e.s.RegisterServer(ctx, meta.ServerRecord{ID: "ts-1", Address: "a"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	set, err := e.s.ListServers(ctx)
	if err != nil || len(set.Servers) != 1 || set.Incarnations["ts-1"] <= 0 {
		t.Fatalf("servers: %+v, %v", set, err)
	}
	first := set.Incarnations["ts-1"]
	watch := e.s.WatchServers(ctx)
	if w := recv(t, watch, 5*time.Second, "first set"); w.Incarnations["ts-1"] != first {
		t.Fatalf("watched incarnation %v, listed %d", w.Incarnations, first)
	}
	if err := r1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r2, err := e.s.RegisterServer(ctx, meta.ServerRecord{ID: "ts-1", Address: "a"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close(ctx)
	set, err = e.s.ListServers(ctx)
	if err != nil || set.Incarnations["ts-1"] <= first {
		t.Fatalf("incarnation after registering again: %v (first %d), %v", set.Incarnations, first, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		w := recv(t, watch, 5*time.Second, "sets")
		if w.Incarnations["ts-1"] == set.Incarnations["ts-1"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch never saw incarnation %d", set.Incarnations["ts-1"])
		}
	}
}

// An adoption registers only a snapshot id its bucket's sequence handed
// out, as AddSnapshot does: an id above the sequence would be allocated
// again to the tablet server's own snapshot (a conflict), and, being the
// highest, would hide every newer snapshot from LatestSnapshot.
func TestAdoptUnallocatedSnapshotID(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	tbl := e.createTable("d", "t", 1, false)
	name := meta.TargetName{Database: "d", Table: "t"}
	tgt := tbl.Value.Target()
	rec := bulkRecord(t, txnA, tgt, name, 1)
	rev, err := e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{
		Record:       rec,
		Registration: &meta.BulkLoadRegistration{Target: name, Rev: tbl.Rev, State: meta.Loading, BulkLoadID: txnA},
	})
	if err != nil {
		t.Fatal(err)
	}
	snap := meta.BucketSnapshot{SnapshotID: 50, LogOffset: 0, MetadataPath: "file:///remote/old"}
	// The same id through AddSnapshot: refused.
	if _, err := e.s.AddSnapshot(ctx, e.g, tgt, 0, snap); !errors.Is(err, meta.ErrInvalid) {
		t.Fatalf("AddSnapshot of an unallocated id: %v, want ErrInvalid", err)
	}
	_, err = e.s.PutBulkLoad(ctx, e.g, meta.BulkLoadWrite{Record: rec, ExpectRev: rev,
		Adopt: []meta.BulkLoadAdoption{{Bucket: 0, Snapshot: snap}}})
	if err == nil {
		// Show the consequence: the tablet's own newer snapshot is hidden.
		id, _ := e.s.NextSnapshotID(ctx, e.g, tgt, 0)
		_, _ = e.s.AddSnapshot(ctx, e.g, tgt, 0, meta.BucketSnapshot{SnapshotID: id, LogOffset: 1000, MetadataPath: "file:///remote/new"})
		latest, _ := e.s.LatestSnapshot(ctx, tgt, 0)
		t.Fatalf("PutBulkLoad adopted snapshot id 50 that was never allocated (AddSnapshot refuses it); "+
			"afterwards the tablet's newer snapshot %d (log offset 1000) is shadowed: LatestSnapshot = id %d, log offset %d, path %s",
			id, latest.Value.SnapshotID, latest.Value.LogOffset, latest.Value.MetadataPath)
	}
	if !errors.Is(err, meta.ErrInvalid) {
		t.Fatalf("adoption of an unallocated id: %v, want ErrInvalid", err)
	}
}
