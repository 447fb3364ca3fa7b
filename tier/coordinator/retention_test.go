package coordinator

import (
	"slices"
	"strconv"
	"testing"

	"github.com/thawdb/thaw/snapshot"
)

func TestSplitRetained(t *testing.T) {
	entries := []snapshotEntry{{ID: 3, LogOffset: 30}, {ID: 9, LogOffset: 90}, {ID: 1, LogOffset: 10}, {ID: 5, LogOffset: 50}}
	ids := func(es []snapshotEntry) []int64 {
		var out []int64
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	tests := []struct {
		keep             int
		retained, remove []int64
		oldest           int64
	}{
		{keep: 3, retained: []int64{9, 5, 3}, remove: []int64{1}, oldest: 30},
		{keep: 1, retained: []int64{9}, remove: []int64{5, 3, 1}, oldest: 90},
		{keep: 0, retained: []int64{9}, remove: []int64{5, 3, 1}, oldest: 90},
		{keep: 10, retained: []int64{9, 5, 3, 1}, oldest: 10},
	}
	for _, tt := range tests {
		r, rm := splitRetained(entries, tt.keep)
		if !slices.Equal(ids(r), tt.retained) || !slices.Equal(ids(rm), tt.remove) {
			t.Errorf("keep %d: retained %v removed %v, want %v %v", tt.keep, ids(r), ids(rm), tt.retained, tt.remove)
		}
		if got := oldestLogOffset(r); got != tt.oldest {
			t.Errorf("keep %d: oldest log offset %d, want %d", tt.keep, got, tt.oldest)
		}
	}
	if got := oldestLogOffset(nil); got != -1 {
		t.Errorf("oldest log offset of nothing = %d", got)
	}
}

func TestGarbage(t *testing.T) {
	const dir = "s3://b/kv/db/t-1/0"
	meta := func(id int64) string { return dir + "/snap-" + strconv.FormatInt(id, 10) + "/_METADATA" }
	doc := func(id int64, files ...string) snapshotDoc {
		m := &snapshot.Metadata{SnapshotID: id, SnapshotLocation: dir + "/snap-" + strconv.FormatInt(id, 10)}
		for _, f := range files {
			h := snapshot.KvFileHandle{Handle: snapshot.FileHandle{Path: f}, LocalPath: f}
			if slices.Contains([]string{dir + "/shared/a.sst", dir + "/shared/b.sst"}, f) {
				m.SharedFiles = append(m.SharedFiles, h)
			} else {
				m.PrivateFiles = append(m.PrivateFiles, h)
			}
		}
		return snapshotDoc{entry: snapshotEntry{ID: id, MetadataPath: meta(id)}, doc: m}
	}

	s1 := doc(1, dir+"/shared/a.sst", dir+"/snap-1/p1", "s3://elsewhere/x", dir+"/../t-2/0/y")
	s2 := doc(2, dir+"/shared/a.sst", dir+"/shared/b.sst", dir+"/snap-2/p2")
	s3 := doc(3, dir+"/shared/b.sst", dir+"/snap-3/p3")
	s4 := doc(4, dir+"/snap-4/p4")

	got, skipped := garbage(dir, []snapshotDoc{s4, s3}, []snapshotDoc{s2, s1})
	want := []string{meta(1), meta(2), dir + "/shared/a.sst", dir + "/snap-1/p1", dir + "/snap-2/p2"}
	if !slices.Equal(got, want) || skipped != 0 {
		t.Errorf("garbage = %q skipped %d\nwant %q", got, skipped, want)
	}

	// An unknown retained document: nothing may go.
	unknown := s3
	unknown.doc = nil
	if got, skipped := garbage(dir, []snapshotDoc{s4, unknown}, []snapshotDoc{s2, s1}); len(got) != 0 || skipped != 2 {
		t.Errorf("with an unknown retained doc: %q skipped %d", got, skipped)
	}
	// An unknown removed document: only the others go.
	gone := s1
	gone.doc = nil
	got, skipped = garbage(dir, []snapshotDoc{s4, s3}, []snapshotDoc{s2, gone})
	want = []string{meta(2), dir + "/shared/a.sst", dir + "/snap-2/p2"}
	if !slices.Equal(got, want) || skipped != 1 {
		t.Errorf("with an unknown removed doc: %q skipped %d, want %q", got, skipped, want)
	}
}
