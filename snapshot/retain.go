package snapshot

import (
	"cmp"
	"slices"
)

// Files returns every file handle of m: the shared files, then the private ones.
func Files(m *Metadata) []KvFileHandle {
	return append(append([]KvFileHandle(nil), m.SharedFiles...), m.PrivateFiles...)
}

// Retain applies the retention policy "keep the last keep snapshots" to
// one bucket's completed snapshots. retained holds the keep snapshots with
// the highest ids (at least one: keep < 1 counts as 1), in ascending id
// order. deletable lists the object URIs that may go, in deletion order:
// first the _METADATA of every dropped snapshot (ascending id), so that a
// partly deleted snapshot is never mistaken for a complete one, then every
// file of a dropped snapshot, shared or private, that no retained snapshot
// references (sorted, each once). It is pure; remove the dropped snapshots
// from the registry before deleting anything.
func Retain(snaps []Metadata, keep int) (retained []Metadata, deletable []string) {
	sorted := slices.Clone(snaps)
	slices.SortStableFunc(sorted, func(a, b Metadata) int { return cmp.Compare(a.SnapshotID, b.SnapshotID) })
	cut := max(len(sorted)-max(keep, 1), 0)
	dropped, retained := sorted[:cut], sorted[cut:]

	live := make(map[string]bool)
	for i := range retained {
		live[retained[i].SnapshotLocation+"/"+MetadataFileName] = true
		for _, f := range Files(&retained[i]) {
			live[f.Handle.Path] = true
		}
	}
	var files []string
	for i := range dropped {
		if p := dropped[i].SnapshotLocation + "/" + MetadataFileName; !live[p] {
			live[p] = true
			deletable = append(deletable, p)
		}
		for _, f := range Files(&dropped[i]) {
			if !live[f.Handle.Path] {
				live[f.Handle.Path] = true
				files = append(files, f.Handle.Path)
			}
		}
	}
	slices.Sort(files)
	return retained, append(deletable, files...)
}
