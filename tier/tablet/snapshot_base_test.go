package tablet_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

// missingFiles lists the files of the snapshot at metadataPath that the
// store does not hold.
func missingFiles(t *testing.T, c *cluster, metadataPath string) []string {
	t.Helper()
	md, err := c.readMetadata(t.Context(), metadataPath)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, f := range snapshot.Files(md) {
		k, err := c.objects.Key(f.Handle.Path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.objects.Stat(t.Context(), k); errors.Is(err, objstore.ErrNotFound) {
			missing = append(missing, f.LocalPath+" at "+f.Handle.Path)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	return missing
}

// A follower that restored from snapshot S1 and leads after the old
// leader's snapshots, compactions and retention went on (S1 and its files
// long gone) builds its first snapshot on the bucket's latest registered
// snapshot, not on S1: the snapshot it registers references only files
// the store holds, and a new replica restores from it.
func TestSnapshotAfterLeaderChangeBuildsOnRegistered(t *testing.T) {
	c := newCluster(t)
	ts1 := c.startServer("ts-1")
	c.startServer("ts-2")
	tb := c.createTable("t", []string{"ts-1", "ts-2"})
	waitReady(t, ts1, tb, 0, leader, 1)

	want := model{}
	round := func(r int) {
		for i := range 4 {
			var muts []*tierv1.Mutation
			for k := range 8 {
				muts = append(muts, tb.upsert(t, row{"a", int64(k*4 + i), fmt.Sprintf("r%d-%0100d", r, i)})...)
			}
			mustWrite(t, ts1, tb, 0, 1, muts...)
			want.apply(muts)
		}
	}
	take := func(s *server) *tierv1.BucketSnapshot {
		t.Helper()
		resp, err := s.client.TakeSnapshot(t.Context(), connect.NewRequest(&tierv1.TakeSnapshotRequest{CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.Snapshot
	}
	round(0)
	s1 := take(ts1)

	// A new follower restores from S1.
	c.assign(tb, 0, []string{"ts-1", "ts-3"}, "ts-1", 1)
	ts3 := c.startServer("ts-3")
	if st := waitReady(t, ts3, tb, 0, follower, 1); st.GetLatestSnapshotId() != s1.SnapshotId {
		t.Fatalf("ts-3 restored %v, want snapshot %d", st, s1.SnapshotId)
	}
	// The leader goes on: snapshots, compactions, retention (keep 2)
	// deleting S1 and the files no later snapshot shares.
	for r := 1; r <= 14; r++ {
		round(r)
		if m := missingFiles(t, c, take(ts1).MetadataPath); len(m) > 0 {
			t.Fatalf("the leader's own snapshot misses %v", m)
		}
	}
	if _, err := c.readMetadata(t.Context(), s1.MetadataPath); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("S1's _METADATA: %v, want it deleted by retention", err)
	}
	// ts-3 catches up, then leads.
	_, end := c.logOffsets(tb, 0)
	eventually(t, "ts-3 caught up", func() error {
		if st := waitReady(t, ts3, tb, 0, follower, 1); st.LogEndOffset != end {
			return fmt.Errorf("ts-3 at %d, log end %d", st.LogEndOffset, end)
		}
		return nil
	})
	c.assign(tb, 0, []string{"ts-1", "ts-3"}, "ts-3", 2)
	waitReady(t, ts3, tb, 0, leader, 2)
	snap := take(ts3)
	if m := missingFiles(t, c, snap.MetadataPath); len(m) > 0 {
		t.Fatalf("ts-3's snapshot %d references files retention deleted: %v", snap.SnapshotId, m)
	}
	// A new replica restores from it and serves every row.
	c.assign(tb, 0, []string{"ts-3", "ts-4"}, "ts-3", 2)
	ts4 := c.startServer("ts-4")
	if st := waitReady(t, ts4, tb, 0, follower, 2); st.GetLatestSnapshotId() != snap.SnapshotId {
		t.Fatalf("ts-4 restored %v, want snapshot %d", st, snap.SnapshotId)
	}
	got, err := scanAll(t, ts4, tb, 0, nil, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameRows(got, want); err != nil {
		t.Fatal(err)
	}
}

// After the coordinator refuses a snapshot as built, the leader's next
// snapshot uploads every file instead of building on the previous one
// (whose shared files may be what the store no longer holds); the one
// after builds incrementally again.
func TestSnapshotAfterRefusedReportUploadsEverything(t *testing.T) {
	c := newCluster(t)
	ts1 := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"})
	waitReady(t, ts1, tb, 0, leader, 1)
	n := 0
	write := func() {
		for range 4 {
			n++
			mustWrite(t, ts1, tb, 0, 1, tb.upsert(t, row{"a", int64(n), fmt.Sprintf("v%0200d", n)})...)
		}
	}
	take := func() (*tierv1.BucketSnapshot, error) {
		resp, err := ts1.client.TakeSnapshot(t.Context(), connect.NewRequest(&tierv1.TakeSnapshotRequest{CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.Snapshot, nil
	}
	// uploaded reports whether the snapshot uploaded every file, and how
	// many shared files it has.
	uploaded := func(s *tierv1.BucketSnapshot) (all bool, shared int) {
		t.Helper()
		md, err := c.readMetadata(t.Context(), s.MetadataPath)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, f := range snapshot.Files(md) {
			total += f.Handle.Size
		}
		return md.IncrementalSize == total, len(md.SharedFiles)
	}
	write()
	if _, err := take(); err != nil {
		t.Fatal(err)
	}
	write()
	s2, err := take()
	if err != nil {
		t.Fatal(err)
	}
	if all, shared := uploaded(s2); all || shared == 0 {
		t.Fatalf("snapshot 2: uploaded everything %v, %d shared files: want an incremental one", all, shared)
	}
	write()
	c.coord.refuseNext.Store(true)
	if _, err := take(); err == nil {
		t.Fatal("the refused report: no error")
	}
	// What the refused snapshot uploaded is deleted: no retention pass
	// would ever find it (it is not registered).
	reports := c.coord.reportList()
	refused := reports[len(reports)-1]
	dir, _, _ := strings.Cut(refused.GetMetadataPath(), "/snap-")
	prefix, err := c.objects.Key(dir)
	if err != nil {
		t.Fatal(err)
	}
	own := fmt.Sprintf("-s%d.sst", refused.GetSnapshotId())
	ownDir := fmt.Sprintf("/snap-%d/", refused.GetSnapshotId())
	for a, err := range c.objects.List(t.Context(), prefix+"/") {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(a.Key, own) || strings.Contains(a.Key, ownDir) {
			t.Errorf("%s of the refused snapshot %d is still in the store", a.Key, refused.GetSnapshotId())
		}
	}
	// No writes from here on: no flush or compaction changes the SSTs, so
	// snapshot 2's shared files are still the replica's (three L0 files,
	// below Pebble's compaction threshold), and those of 4 are 5's.
	s4, err := take()
	if err != nil {
		t.Fatal(err)
	}
	if all, _ := uploaded(s4); !all {
		t.Fatal("the snapshot after a refused report built on the previous one")
	}
	s5, err := take()
	if err != nil {
		t.Fatal(err)
	}
	if all, _ := uploaded(s5); all {
		t.Fatal("the snapshot after that one uploaded every file again")
	}
}
