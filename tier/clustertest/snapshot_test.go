package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

// readMetadata reads the snapshot document at metadataPath.
func (cl *cluster) readMetadata(ctx context.Context, metadataPath string) *snapshot.Metadata {
	cl.t.Helper()
	objs := cl.e.Objects()
	key, err := objs.Key(metadataPath)
	if err != nil {
		cl.t.Fatal(err)
	}
	b, err := objs.Get(ctx, key)
	if err != nil {
		cl.t.Fatal(err)
	}
	md, err := snapshot.DecodeMetadata(b)
	if err != nil {
		cl.t.Fatal(err)
	}
	return md
}

// missingFiles returns the files of md that the tier's object store does
// not hold.
func (cl *cluster) missingFiles(ctx context.Context, md *snapshot.Metadata) []string {
	cl.t.Helper()
	objs := cl.e.Objects()
	var missing []string
	for _, f := range snapshot.Files(md) {
		k, err := objs.Key(f.Handle.Path)
		if err != nil {
			cl.t.Fatal(err)
		}
		if _, err := objs.Stat(ctx, k); errors.Is(err, objstore.ErrNotFound) {
			missing = append(missing, f.LocalPath)
		} else if err != nil {
			cl.t.Fatal(err)
		}
	}
	return missing
}

// TestSnapshotsAfterFailover: a server that restored its replicas from
// the first snapshots follows while the leaders take many more (their
// compactions and retention delete the first snapshots' files), then
// leads alone. Its snapshots reference only files the store holds, and a
// new server restores every bucket from them.
func TestSnapshotsAfterFailover(t *testing.T) {
	cl := startCluster(t, func(c *daemon.EmbeddedConfig) { c.Coordinator.SnapshotRetention = 2 })
	ctx := t.Context()
	cl.createOrders(ctx)
	want := model{}
	next := int64(0)
	round := func() {
		t.Helper()
		// A few batches each: every snapshot flushes them into new L0
		// files, which Pebble soon compacts.
		for range 3 {
			var rows []kv.Row
			for range 40 {
				rows = append(rows, order(dayOne, next%200, fmt.Sprintf("item-%d", next), int32(next)))
				next++
			}
			if err := cl.c.Upsert(ctx, target(dayOne), rows); err != nil {
				t.Fatal(err)
			}
			want.upsert(rows...)
		}
	}
	round()
	var first []*snapshot.Metadata
	for _, s := range cl.snapshotAll(ctx, dayOne) {
		first = append(first, cl.readMetadata(ctx, s.GetMetadataPath()))
	}

	// ts-3 goes; the newcomer restores its replicas from the first
	// snapshots.
	victim, newcomer := daemon.TabletID(3), "ts-4"
	if err := cl.e.KillTablet(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := cl.e.StartTablet(ctx, newcomer); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replicated on "+newcomer, func(ctx context.Context) error {
		return cl.replicatedWhere(ctx, dayOne, 3, func(b int32, replicas []string) error {
			if !slices.Contains(replicas, newcomer) {
				return fmt.Errorf("bucket %d not on %s: %v", b, newcomer, replicas)
			}
			return nil
		})
	})

	// The leaders go on; retention (keep 2) drops the first snapshots and
	// the files no later one shares.
	for range 12 {
		round()
		cl.snapshotAll(ctx, dayOne)
	}
	deleted := 0
	for _, md := range first {
		shared := snapshot.Metadata{SharedFiles: md.SharedFiles}
		deleted += len(cl.missingFiles(ctx, &shared))
	}
	if deleted == 0 {
		t.Fatal("retention deleted no shared file of the first snapshots: the case is not reached")
	}
	eventually(t, "replicated before the failover", func(ctx context.Context) error { return cl.replicated(ctx, dayOne, 3) })

	// The newcomer leads alone and snapshots every bucket.
	for _, s := range []string{daemon.TabletID(1), daemon.TabletID(2)} {
		if err := cl.e.KillTablet(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "led by "+newcomer, func(ctx context.Context) error { return cl.ledOnlyBy(ctx, dayOne, newcomer) })
	for _, s := range cl.snapshotAll(ctx, dayOne) {
		if m := cl.missingFiles(ctx, cl.readMetadata(ctx, s.GetMetadataPath())); len(m) > 0 {
			t.Errorf("bucket %d: snapshot %d references files the store does not hold: %v", s.GetBucket(), s.GetSnapshotId(), m)
		}
	}
	// A new server restores from them, and serves every row.
	if err := cl.e.StartTablet(ctx, "ts-5"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replicated on ts-5", func(ctx context.Context) error { return cl.replicated(ctx, dayOne, 2) })
	if err := cl.e.KillTablet(ctx, newcomer); err != nil {
		t.Fatal(err)
	}
	eventually(t, "led by ts-5", func(ctx context.Context) error { return cl.ledOnlyBy(ctx, dayOne, "ts-5") })
	if err := cl.fresh(t).expectRows(ctx, want); err != nil {
		t.Fatal(err)
	}
}
