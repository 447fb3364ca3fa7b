package promoter

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
)

// TestLimitedStoreReads: a rebuild whose _METADATA another build already
// wrote with other content is refused before any data file goes up
// (snapshotbuild.checkMetadata), also through the upload limiter
// (limits.uploadMBps), which hid the store's Get: the data files were
// uploaded and left behind, listed by no _METADATA.
func TestLimitedStoreReads(t *testing.T) {
	for _, limited := range []bool{false, true} {
		ctx := context.Background()
		dir := t.TempDir()
		url := "file://" + filepath.ToSlash(dir)
		st, err := objstore.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		tgt := snapshot.Target{RemoteDir: url, Database: "db", Table: "t", TableID: 7}
		build := func(val string) error {
			var store snapshotbuild.Store = st
			if limited {
				store = limitedStore{Store: st, lim: newLimiter(1 << 40)}
			}
			b, err := snapshotbuild.New(store, snapshotbuild.Target{NumBuckets: 1, Snapshot: tgt, SnapshotIDs: []int64{5}},
				snapshotbuild.Options{TempDir: t.TempDir(), MemoryBudget: 16 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := b.AddPair(ctx, 0, []byte("k"), []byte(val)); err != nil {
				t.Fatal(err)
			}
			_, err = b.Finish(ctx)
			return err
		}
		if err := build("first"); err != nil {
			t.Fatal(err)
		}
		count := func() int {
			n := 0
			for a, err := range st.List(ctx, "") {
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasSuffix(a.Key, "_METADATA") {
					n++
				}
			}
			return n
		}
		before := count()
		err = build("second")
		if err == nil {
			t.Fatalf("limited=%v: rebuild with other content succeeded", limited)
		}
		after := count()
		if !strings.Contains(err.Error(), "before any data file") {
			t.Errorf("limited=%v: %v", limited, err)
		}
		if after != before {
			t.Errorf("limited=%v: the refused rebuild left %d orphan data files (before %d, after %d)", limited, after-before, before, after)
		}
	}
}
