package coordinator

import "testing"

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
