package replica

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

// Retain applies the retention policy "keep the last keep snapshots" to
// one bucket's completed snapshots. retained holds the keep snapshots with
// the highest ids (at least one: keep < 1 counts as 1), in ascending id
// order. deletable lists the object URIs that may go, in deletion order:
// first the _METADATA of every dropped snapshot (ascending id), so that a
// partly deleted snapshot is never mistaken for a complete one, then every
// file of a dropped snapshot, shared or private, that no retained snapshot
// references (sorted, each once). It is pure; remove the dropped snapshots
// from the registry before deleting anything.
func Retain(snaps []snapshot.Metadata, keep int) (retained []snapshot.Metadata, deletable []string) {
	sorted := slices.Clone(snaps)
	slices.SortStableFunc(sorted, func(a, b snapshot.Metadata) int { return cmp.Compare(a.SnapshotID, b.SnapshotID) })
	cut := max(len(sorted)-max(keep, 1), 0)
	dropped, retained := sorted[:cut], sorted[cut:]

	live := make(map[string]bool)
	for i := range retained {
		live[retained[i].SnapshotLocation+"/"+snapshot.MetadataFileName] = true
		for _, f := range snapshotFiles(&retained[i]) {
			live[f.Handle.Path] = true
		}
	}
	var files []string
	for i := range dropped {
		if p := dropped[i].SnapshotLocation + "/" + snapshot.MetadataFileName; !live[p] {
			live[p] = true
			deletable = append(deletable, p)
		}
		for _, f := range snapshotFiles(&dropped[i]) {
			if !live[f.Handle.Path] {
				live[f.Handle.Path] = true
				files = append(files, f.Handle.Path)
			}
		}
	}
	slices.Sort(files)
	return retained, append(deletable, files...)
}

// DeleteFiles deletes the objects at the given URIs in order, as Retain
// lists them. An object that is already gone counts as deleted, so a
// repeated call finishes an interrupted one. It stops at the first other
// error, leaving the rest (so no file goes before its _METADATA).
func DeleteFiles(ctx context.Context, store *objstore.Store, uris []string) error {
	for _, uri := range uris {
		key, err := store.Key(uri)
		if err != nil {
			return fmt.Errorf("replica: delete snapshot files: %w", err)
		}
		if err := store.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("replica: delete snapshot files: %w", err)
		}
	}
	return nil
}
