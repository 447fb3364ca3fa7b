package coordinator

import (
	"slices"
	"testing"
)

// TestRetentionRetriesFailedDeletes: a file of a pruned snapshot whose
// delete fails is deleted by a later retention pass. The registry entry
// went first, so no later pass knew the object again and it stayed in the
// store for good (docs promised a sweep that did not exist).
func TestRetentionRetriesFailedDeletes(t *testing.T) {
	const n = 10
	rc := newRetentionCase(t, n, nil, 1)
	private1 := rc.w.files(t, 0, rc.ids[1])[1]
	for i := 1; i <= 3; i++ {
		rc.report(i)
	}
	k, _ := rc.e.objects.Key(private1)
	rc.gf.delKey.Store(k)
	rc.gf.delArmed.Store(true)
	rc.report(4) // prunes 1; its private file cannot be deleted this once
	rc.gf.delArmed.Store(false)
	if !rc.w.exists(t, private1) {
		t.Fatal("the injected delete failure did not happen")
	}
	for i := 5; i < n; i++ {
		rc.report(i) // more retention passes, every delete succeeds
	}
	if rc.w.exists(t, private1) {
		t.Fatalf("file %s of pruned snapshot %d is still in the store after %d more retention passes", private1, rc.ids[1], n-5)
	}
}

// TestRetentionStuckFileKeepsOnlyItsSnapshot: a file of one pruned
// snapshot that can never be deleted (an object lock, a permission) keeps
// that snapshot's _METADATA and registry entry, and no other's: one
// failure kept every pruned snapshot registered, and the registry grew
// without bound.
func TestRetentionStuckFileKeepsOnlyItsSnapshot(t *testing.T) {
	const n = 10
	rc := newRetentionCase(t, n, nil, 1)
	private1 := rc.w.files(t, 0, rc.ids[1])[1]
	k, _ := rc.e.objects.Key(private1)
	rc.gf.delKey.Store(k)
	rc.gf.delArmed.Store(true) // for good
	for i := 1; i < n; i++ {
		rc.report(i)
	}
	reg := rc.registered(t)
	slices.Sort(reg)
	if want := []int64{rc.ids[1], rc.ids[n-3], rc.ids[n-2], rc.ids[n-1]}; !slices.Equal(reg, want) {
		t.Fatalf("registered after %d reports (retention 3, a file of snapshot %d undeletable): %v, want %v", n-1, rc.ids[1], reg, want)
	}
	if !rc.w.exists(t, rc.paths[1]) {
		t.Error("the _METADATA of the snapshot whose file is left went")
	}
	for i := 2; i < n-3; i++ {
		if rc.w.exists(t, rc.paths[i]) {
			t.Errorf("the _METADATA of pruned snapshot %d (its files all deleted) is still there", rc.ids[i])
		}
	}
}
