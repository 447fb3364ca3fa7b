// Package snapshotbuild builds ordinary bucket snapshots offline: rows in,
// one snapshot per bucket out, without a tablet server.
//
// # What a build produces
//
// For every owned bucket b, under Target.Snapshot.SnapshotDir(b, id):
//
//   - the files of a Pebble checkpoint (FormatNewest): the bucket's SST
//     files, MANIFEST, OPTIONS, marker files and an empty WAL, each stored as
//     snapshot.PrivateFileName(sha256(content), localPath);
//   - _METADATA (snapshot.EncodeMetadata): every file with size and SHA-256,
//     no shared files, incremental size = Σ private sizes, row_count = the
//     bucket's rows after deduplication, log_offset = row_count unless
//     Target.LogOffsets overrides it.
//
// The SST files are written with Pebble's sstable writer (the newest table
// format FormatNewest ingests, bloom filters, Options.Compression, files of
// about Options.TargetFileSize), ingested unchanged into an empty local
// Pebble database (they land in L6; the digest computed while writing is
// checked against the one computed while uploading) and checkpointed: the
// result is exactly what a tablet server's own snapshot is, so both restore
// through one path (download, verify, open, replay from log_offset). An
// empty bucket gets a valid snapshot too (a checkpoint with no tables).
//
// # Input, routing, duplicates
//
// Add takes Arrow record batches and converts them with the table's encoder
// (see Add for the accepted Arrow types; errors name batch, row and column).
// AddPair takes pre-encoded key/value pairs. Each row goes to the bucket of
// the table's bucketing function. A primary key that occurs more than once
// keeps the row that came last in input order (DuplicatesLastWins, counted
// per bucket in BucketResult.Duplicates) or fails the build with a
// *DuplicateKeyError (DuplicatesError). Input order is the order of
// Add/AddPair calls and of rows within a batch; the calls are serialized.
//
// # Memory budget
//
// Options.MemoryBudget bounds the memory of buffered input and merge
// buffers for the whole build, all buckets together. Input is buffered in
// chunks of at most half the budget (arena and index mapped outside the Go
// heap, so the garbage collector neither scans them nor doubles them). A
// full chunk is sorted in the background while the next one fills. If the
// input fits in the budget nothing is written to disk; otherwise every
// sealed chunk is written to TempDir as a sorted run (Snappy-compressed
// where the records compress), and Finish k-way merges the runs and the
// in-memory chunks of each bucket. Each run the merge reads takes a read
// buffer of at least 4 KiB and one stored (compressed) frame, and a
// decoded frame (up to 64 KiB, or one record): when the runs are too many
// for that within the budget, or more than 512, Finish first merges runs,
// consecutive in input order, into larger ones (Stats.CompactedRuns), so
// the merge's memory and open files
// do not grow with the input. (While Add runs, each run keeps its files
// open: up to two per chunk spilled, half the budget of input each.)
// The budget is
// accounted by one shared accountant (Stats.PeakBudget never exceeds it);
// per-worker Pebble writer buffers (a few MiB) come on top.
//
// # Determinism
//
// The same input (same pairs in the same order) and the same Target and
// Compression/TargetFileSize produce byte-identical objects, whatever the
// memory budget, spilling, worker count or machine: SST files, MANIFEST,
// OPTIONS, markers, WAL, _METADATA and therefore every object name. Pebble
// stamps ingested tables with the wall clock in the MANIFEST; the builder
// rewrites that field to 0 ("unknown", see manifestnorm.go) and verifies
// the result by opening it with Pebble. Pebble defaults that depend on the
// machine (file cache shards) are pinned. So a retried build adopts what an
// earlier attempt uploaded (objstore's PutFile and PutIfAbsent adopt
// byte-identical objects), including an earlier _METADATA.
//
// # Commit marker last; failure and cancellation
//
// Finish uploads every owned bucket's data files first and writes the
// _METADATA files only after all of them are uploaded, so nothing can
// reference partial output: every _METADATA describes a complete bucket. A
// Finish that fails or is cancelled leaves the _METADATA files it wrote:
// another build of the same context (a retried worker started while this
// one was stuck) may have adopted them, byte-identical, and even committed
// them, so deleting them could break a live snapshot; a rebuild of the
// same input adopts them. Data files of a failed build
// stay in the store for the orphan cleaner; they are content-addressed, so
// a retry reuses them. Objects are never overwritten with different bytes.
// On a store the build can read (an *objstore.Store), a bucket whose
// _METADATA another build already wrote with other content (the buckets of
// a committed transaction, rebuilt from other input) fails with
// objstore.ErrConflict before any of its data files goes up, so such a
// rebuild leaves nothing in the live snapshot directory.
// Errors name the bucket (*BucketError). Local temporary files live in one
// directory per build under Options.TempDir and are removed on every path:
// by Finish, or by Close, which callers always defer. A build holds a flock
// on its directory's LOCK while it runs; the directory of a build whose
// process was killed (its lock dropped by the kernel) is removed by the
// next New under the same TempDir, or by RemoveStaleTemp.
//
// # Concurrency
//
// A Builder's methods may be called from several goroutines but are
// serialized. Internally, with Options.Workers > 1, one goroutine sorts and
// spills input chunks while Add encodes (with one worker Add does it
// itself), another makes the chunk being filled resident ahead of Add
// (Linux; only memory the budget already granted, Stats.Prefaulted), and
// Finish builds Options.Workers buckets at once, uploading
// finished buckets while the next ones merge. Options.Progress is called
// from those goroutines. See DESIGN.md.
//
// # Local files and the store
//
// Data files are stored with the store's PutFileStamped: on a file://
// store on the file system of Options.TempDir an SST is hard-linked into
// place instead of copied, and its SHA-256 is computed once, while it is
// written: the store trusts that digest as long as the file still has the
// stamp (inode, size, modification time) taken after its last write, and
// reads and verifies a file that lost it (see objstore.FileStamp). Copies
// to other stores are verified while they stream, and the tier checks
// every file's digest again before a load becomes visible (the
// coordinator's validation at Commit). The builder never modifies a file
// after storing it, and removing its temporary directory leaves linked
// objects intact. Spill runs are read once by the merge, which gives their
// pages back to the kernel as it goes (Linux: hole punching), so the SST
// files written next reuse them.
package snapshotbuild
