package bulkloadtest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thawdb/thaw/fencing"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/meta"
)

// The orphan cleaner deletes what aborted transactions left under their
// snap-{id} directories, and nothing else: not a file a snapshot registry
// entry references (even inside such a directory), not a live
// transaction's build output, not a committed load's snapshots.
func TestOrphanCleaner(t *testing.T) {
	h := newHarness(t, withBulkConfig(func(c *coordinator.BulkLoadConfig) { c.OrphanCleanInterval = 100 * time.Millisecond }))
	n := h.standard()
	ctx := t.Context()
	rows := makeRows(60, "")
	tpA, tpB, tpC := h.createTable(n, "a", 2, ""), h.createTable(n, "b", 2, ""), h.createTable(n, "c", 2, "")

	infoB := h.mustBegin(n, tpB, "b") // committed
	if _, err := commit(ctx, n, infoB.GetHandle(), h.load(infoB, rows)); err != nil {
		t.Fatal(err)
	}
	infoC := h.mustBegin(n, tpC, "c") // live: built, not committed
	h.load(infoC, rows)
	infoA := h.mustBegin(n, tpA, "a") // aborted below
	h.load(infoA, rows)
	stA := snapTarget(infoA)
	dirA := func(b int) string { return stA.SnapshotDir(b, infoA.GetSnapshotIds()[b]) }

	// A registry entry of bucket 0 that references one of the aborted
	// build's files (an administrator's doing, or a bug elsewhere): that
	// file must stay.
	mdA0, err := snapshot.DecodeMetadata(h.get(stA.MetadataPath(0, infoA.GetSnapshotIds()[0])))
	if err != nil {
		t.Fatal(err)
	}
	kept := mdA0.PrivateFiles[0]
	ldr, err := fencing.CurrentLeader(ctx, h.cli, h.store.ElectionPrefix())
	if err != nil {
		t.Fatal(err)
	}
	g := meta.Guard{LeaderKey: ldr.Key, Epoch: ldr.Epoch}
	tgtA := meta.Target{TableID: infoA.GetHandle().GetTableId()}
	id, err := h.store.NextSnapshotID(ctx, g, tgtA, 0)
	if err != nil {
		t.Fatal(err)
	}
	ref := &snapshot.Metadata{
		TableID: tgtA.TableID, BucketID: 0, SnapshotID: id, SnapshotLocation: stA.SnapshotDir(0, id),
		PrivateFiles: []snapshot.KvFileHandle{kept}, IncrementalSize: kept.Handle.Size, LogOffset: 0,
	}
	raw, err := snapshot.EncodeMetadata(ref)
	if err != nil {
		t.Fatal(err)
	}
	h.put(stA.MetadataPath(0, id), raw)
	if _, err := h.store.AddSnapshot(ctx, g, tgtA, 0, meta.BucketSnapshot{SnapshotID: id, MetadataPath: stA.MetadataPath(0, id)}); err != nil {
		t.Fatal(err)
	}

	before := map[string][]string{}
	for _, info := range []*tierv1.BulkLoadTargetInfo{infoB, infoC} {
		for b, id := range info.GetSnapshotIds() {
			dir := snapTarget(info).SnapshotDir(b, id)
			before[dir] = h.objectsUnder(dir)
			if len(before[dir]) == 0 {
				t.Fatalf("%s is empty", dir)
			}
		}
	}
	if _, err := abort(ctx, n, infoA.GetHandle()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the aborted output cleaned", func() error {
		if got := h.objectsUnder(dirA(0)); !slices.Equal(got, []string{kept.Handle.Path}) {
			return fmt.Errorf("bucket 0 holds %v, want only %s", got, kept.Handle.Path)
		}
		if got := h.objectsUnder(dirA(1)); len(got) > 0 {
			return fmt.Errorf("bucket 1 holds %v", got)
		}
		return nil
	})
	for dir, want := range before {
		if got := h.objectsUnder(dir); !slices.Equal(got, want) {
			t.Errorf("%s changed: %v, was %v", dir, got, want)
		}
	}
	if got := h.objectsUnder(stA.SnapshotDir(0, id)); len(got) != 1 {
		t.Errorf("the registered snapshot's directory holds %v", got)
	}
	// The cleaner counts a round's deletions when the round ends, which can
	// be after the files are gone.
	eventually(t, "the deletions counted", func() error {
		if v := counter(t, n.reg, "thaw_coordinator_bulkload_orphan_files_deleted_total"); v < 2 {
			return fmt.Errorf("orphan files deleted: %v", v)
		}
		return nil
	})
	h.expectAll(tpB, table(t, infoB), rows)
}

// counter returns the value of an unlabelled counter.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
