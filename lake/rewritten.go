package lake

import (
	"context"
	"fmt"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// RewrittenFiles returns how many of the data files a Scan of table name
// with opts reads were added by a snapshot that was no plain append
// (overwrite, replace, delete: a copy-on-write delete, update or merge, a
// compaction, which rewrite rows). Such a file takes the rewriting snapshot's sequence number,
// so Scan's order, newest last, no longer holds for the rows it carried
// over: an older version of a key it holds may come after a newer one
// appended before the rewrite. Files whose adding snapshot has expired
// from the metadata cannot be told and are not counted. Only the snapshot,
// partitions and their data files of opts matter.
func (l *Lake) RewrittenFiles(ctx context.Context, name string, opts ScanOptions) (int, error) {
	tbl, err := l.loadTable(ctx, name)
	if err != nil {
		return 0, err
	}
	snap, err := resolveSnapshot(name, tbl, opts.SnapshotID)
	if err != nil || snap == nil {
		return 0, err
	}
	tasks, err := tbl.Scan(table.WithSnapshotID(snap.SnapshotID)).PlanFiles(ctx)
	if err != nil {
		return 0, fmt.Errorf("lake: plan scan of %s: %w", name, err)
	}
	if len(opts.Partitions) > 0 {
		if tasks, err = filterTasks(tbl.Metadata(), newPartitionTyper(tbl.Metadata()), tasks, opts.Partitions, opts.RequirePartitions); err != nil {
			return 0, fmt.Errorf("lake: scan %s: %w", name, err)
		}
	}
	read := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		read[t.File.FilePath()] = true
	}
	md := tbl.Metadata()
	fs, err := tbl.FS(ctx)
	if err != nil {
		return 0, fmt.Errorf("lake: %s: %w", name, err)
	}
	manifests, err := snap.Manifests(fs)
	if err != nil {
		return 0, fmt.Errorf("lake: %s: manifests: %w", name, err)
	}
	n := 0
	for _, m := range manifests {
		if m.ManifestContent() != iceberg.ManifestContentData {
			continue
		}
		for e, err := range m.Entries(fs, true) {
			if err != nil {
				return 0, fmt.Errorf("lake: %s: manifest %s: %w", name, m.FilePath(), err)
			}
			if !read[e.DataFile().FilePath()] {
				continue
			}
			// Only an append adds new rows and nothing else; a data
			// file any other operation added (overwrite, replace, or
			// delete as iceberg-go labels its copy-on-write deletes) may
			// carry rows over.
			if s := md.SnapshotByID(e.SnapshotID()); s != nil && s.Summary != nil && s.Summary.Operation != table.OpAppend {
				n++
			}
		}
	}
	return n, nil
}
