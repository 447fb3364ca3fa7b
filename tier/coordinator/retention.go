package coordinator

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

// ObjectStore is what snapshot registration and retention need of the
// object store: read a _METADATA document, check that an object exists,
// delete an object, and map a URI to its key. *objstore.Store satisfies
// it. Stat and Delete of a missing object return an error wrapping
// objstore.ErrNotFound; retention treats that as done.
type ObjectStore interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Stat(ctx context.Context, key string) (objstore.Attrs, error)
	Delete(ctx context.Context, key string) error
	Key(uri string) (string, error)
}

var _ ObjectStore = (*objstore.Store)(nil)

// snapshotEntry is one snapshot registry entry of a bucket.
type snapshotEntry struct {
	ID           int64
	LogOffset    int64
	MetadataPath string
}

// splitRetained orders entries newest first (by snapshot id) and splits them
// into the keep newest and the rest. keep below 1 counts as 1: the newest
// snapshot is never removed.
func splitRetained(entries []snapshotEntry, keep int) (retained, removed []snapshotEntry) {
	s := slices.Clone(entries)
	slices.SortFunc(s, func(a, b snapshotEntry) int { return cmp.Compare(b.ID, a.ID) })
	keep = min(max(keep, 1), len(s))
	return s[:keep], s[keep:]
}

// oldestLogOffset is the smallest log offset of entries; -1 if there are
// none.
func oldestLogOffset(entries []snapshotEntry) int64 {
	oldest := int64(-1)
	for _, e := range entries {
		if oldest < 0 || e.LogOffset < oldest {
			oldest = e.LogOffset
		}
	}
	return oldest
}

// snapshotDoc is a registry entry and its decoded _METADATA; doc is nil when
// the document could not be read or does not describe the entry.
type snapshotDoc struct {
	entry snapshotEntry
	doc   *snapshot.Metadata
	// unread: reading the document failed for now (the store did not
	// answer), not because it is gone, is no document or names another
	// snapshot.
	unread bool
}

// garbage returns the objects of the removed snapshots that may be deleted,
// in deletion order, as replica.Retain (the tablet's rule, shared) lists
// them: the removed snapshots' _METADATA first, then each of their files
// that no retained snapshot references. On top of Retain, an object is
// garbage only if it lies strictly inside bucketDir, so a document naming a
// foreign path never makes the coordinator delete it. If the document of
// any retained snapshot is unknown nothing is garbage: what it references
// cannot be known. A removed snapshot whose document is unknown contributes
// nothing. skipped counts the removed snapshots left alone for either
// reason.
func garbage(bucketDir string, retained, removed []snapshotDoc) (objects []string, skipped int) {
	docs := make([]snapshot.Metadata, 0, len(retained)+len(removed))
	for _, r := range retained {
		if r.doc == nil {
			return nil, len(removed)
		}
		docs = append(docs, *r.doc)
	}
	for _, r := range removed {
		if r.doc == nil {
			skipped++
			continue
		}
		docs = append(docs, *r.doc)
	}
	// The retained entries have the highest ids, so Retain keeps exactly
	// them.
	_, deletable := snapshot.Retain(docs, len(retained))
	for _, uri := range deletable {
		rest, ok := strings.CutPrefix(uri, bucketDir+"/")
		if ok && rest != "" && !slices.Contains(strings.Split(rest, "/"), "..") && !slices.Contains(strings.Split(rest, "/"), ".") {
			objects = append(objects, uri)
		}
	}
	return objects, skipped
}
