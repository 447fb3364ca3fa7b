package benchutil

import "testing"

// TestSyncDirty: the dirty and writeback bytes are read from /proc/meminfo
// (a parse failure reads -1).
func TestSyncDirty(t *testing.T) {
	if took, dirty := SyncDirty(); dirty < 0 || took < 0 {
		t.Fatalf("SyncDirty = %v, %d", took, dirty)
	}
}
