package lake

import (
	"testing"
	"time"
)

// TestSampleAppendDay appends a new day to a fresh sample and checks that
// it is one new partition written by one new snapshot, and that the other
// partitions keep their last-updated snapshot.
func TestSampleAppendDay(t *testing.T) {
	ctx := t.Context()
	l, info := openSample(t, SampleOptions{Rows: 200, Days: 2, Seed: 1, AppendOnly: true})
	before, err := l.Partitions(ctx, info.Table, nil)
	if err != nil {
		t.Fatal(err)
	}
	day := SampleStart.AddDate(0, 0, 5)
	snap, err := SampleAppendDay(ctx, info, SampleAppend{Day: day, FirstID: 1000, Rows: 30, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	after, err := l.Partitions(ctx, info.Table, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before)+1 {
		t.Fatalf("partitions: %d before, %d after, want one more", len(before), len(after))
	}
	var found bool
	for _, p := range after {
		if p.Path == "event_day="+day.Format(time.DateOnly) {
			found = true
			if p.RecordCount != 30 || p.LastUpdatedSnapshotID != snap.ID {
				t.Errorf("new partition: %d rows, last updated by %d; want 30 rows by %d", p.RecordCount, p.LastUpdatedSnapshotID, snap.ID)
			}
			continue
		}
		for _, b := range before {
			if b.Path == p.Path && b.LastUpdatedSnapshotID != p.LastUpdatedSnapshotID {
				t.Errorf("partition %s: last updated by %d, was %d", p.Path, p.LastUpdatedSnapshotID, b.LastUpdatedSnapshotID)
			}
		}
	}
	if !found {
		t.Fatalf("no partition of %s in %+v", day, after)
	}
	if _, err := SampleAppendDay(ctx, info, SampleAppend{Day: day}); err == nil {
		t.Error("append of 0 rows: no error")
	}
}
