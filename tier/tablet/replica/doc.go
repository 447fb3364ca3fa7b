// Package replica is the storage half of a tablet server: bucket replicas,
// each a Pebble (v2, FormatNewest) database fed by the bucket's changelog,
// restored from and snapshotted to object storage in the format of package
// snapshot. The RPC, assignment and coordinator wiring live elsewhere.
//
// # Host and memory
//
// A Host holds what every replica of a tablet server shares: one block
// cache (WithCacheSize, default 256 MiB), one file cache bounding the SST
// files open across all replicas (WithMaxOpenFiles, default 1000), a
// memtable budget (WithMemTableBudget, default 256 MiB), the local root
// directory, the object store and the changelog provider. Pebble keeps up
// to MemTableStopWritesThreshold = 2 memtables per database queued (one
// filling, one flushing) and one more, flushed, kept for reuse by the next
// rotation, so a replica opened while n replicas are open (or
// WithExpectedReplicas, if larger) gets
//
//	MemTableSize = clamp(budget / (3·n), MinMemTableSize = 256 KiB, MaxMemTableSize = 64 MiB)
//
// and n replicas use at most 3·n·MemTableSize ≤ budget for memtables as
// long as the floor does not bind (n ≤ budget / 768 KiB: 341 replicas for
// the default budget; beyond it each replica still takes 768 KiB at
// most). Pebble fixes the size when a database opens, so replicas opened
// early keep a larger share: pass WithExpectedReplicas to size them all
// for the server's assignment. Idle replicas hold much less: Pebble starts
// a database with a 256 KiB memtable, allocated lazily.
//
// Pebble reserves every memtable it allocates in the block cache
// (Cache.Reserve), so the cache it is given holds blocks only in what the
// memtables leave. The host therefore creates the Pebble cache with a
// capacity of cache size + memtable budget: blocks get at least the cache
// size while the memtables stay within the budget, and blocks and
// memtables together never exceed cache size + budget (the floor above
// binding only takes room from blocks). A cache of just the cache size,
// as the host had before, held no blocks at all once the replicas'
// memtables filled it (the default budget equals the default cache), and
// every read of a filter, index or data block went to the file system.
// Compactions do not fill the cache: Pebble reads their input into a
// buffer pool and only uses blocks already cached.
//
// Measured cost of an idle replica (TestHostManyReplicas, 200 replicas,
// Linux amd64): about 160 KiB of resident memory (about 1.2 MiB under the
// race detector; the test bounds it at 1 MiB, 4 MiB with -race), 6
// goroutines and 9 file descriptors (Pebble's LOCK, MANIFEST, WAL file and
// directories, the changelog's segment). Hundreds of replicas with the
// defaults therefore cost at most 512 MiB for the block cache and the
// memtables together once filled (256 MiB each), plus about 32 MiB,
// 1,200 goroutines and 1,800 descriptors per 200 replicas.
//
// # Durability: what is persisted where
//
//   - The changelog is the write-ahead log. A Write returns only after its
//     records are durable in the bucket's changelog (one record per
//     mutation, TIER.md's format [op][uvarint len(key)][key][value]).
//   - Pebble's own WAL is disabled and batches commit without sync: a
//     replica's database is a cache of "snapshot + changelog", never the
//     only copy of anything.
//   - Every applied batch writes, in the same Pebble batch, the replica's
//     state record under the reserved key "\xff\xffthaw-applied-offset":
//     the next offset to apply and the row count. Data and applied offset
//     therefore move atomically, and every checkpoint says which changelog
//     prefix it holds. The key lies inside the key space (any non-empty
//     byte string can be some schema's kv key), so Write rejects it and
//     Lookup, PrefixLookup and Scan never return it.
//   - Snapshots in object storage are the durable copies of the database.
//
// After a crash or a Close the local directory is not reused: Open always
// discards it and restores from the bucket's latest snapshot (or from
// nothing) plus the changelog, as Fluss does. Every acknowledged write is
// in the changelog, so none is lost.
//
// # Write path and followers
//
// Write (the bucket leader) validates a batch (at most WithRequestLimits
// rows and encoded bytes, non-empty keys, known ops, no value on a
// delete; default 10,000 rows, 4 MiB), appends it to the changelog as one
// batch, then applies it and returns the first offset; mutation i has
// offset first+i. A rejected batch writes nothing. Follow (a follower)
// waits on the changelog and applies what appears. Applying is "replay
// the log up to offset X" under one lock: records are applied exactly
// once, in offset order, whoever reads them first, so a Write that finds
// older unapplied records applies them first, and a Write racing a Follow
// is harmless.
//
// The row count in the state record is exact, so applying must know
// whether each mutated key exists. It does not Get each key: a batch's
// mutations are applied in key order (each key's own mutations in offset
// order, so the result is that of offset order), each distinct key is
// looked up once by SeekPrefixGE on one iterator, bloom filters on every
// level including the last (IterOptions.UseL6Filters; Pebble skips the
// last level's filters by default, and a Get cannot ask for them), and
// the batch enters the memtable in key order. BenchmarkApply: 9.6 µs per
// row with a Get per mutation, 2.2 µs with this, at 1 M rows per replica.
// Every new key consults one bloom filter per level it falls into (about
// 135 KB per 4 MB L6 file at 10 bits per key), so the filters of all
// replicas must stay in the block cache: see "Host and memory". A
// replica compacts L0 at 8 sublevels rather than Pebble's 4 (writes stall
// at 24 rather than 12): with keys in random order every compaction out
// of L0 rewrites nearly all of the last level, so half as many halve that
// work, for a few more cached filter checks per lookup.
//
// The apply's iterator is closed on a goroutine of its own (Close waits
// for those): closing the last iterator that holds a version a compaction
// replaced makes Pebble delete the compaction's input files right there,
// after evicting their blocks from the block cache with a yield every 5
// blocks, which on two busy cores kept single writes waiting 10–30 s.
//
// # Reads
//
// Lookup reads a batch of keys from one consistent view (nil: not
// found), the way an apply does: in key order, each distinct key sought
// once on one iterator, filters on every level, the iterator closed in
// the background (BenchmarkLookup: 2.5–2.6 µs per key with a Get per key,
// 1.3–1.4 µs so, at 1 M rows); scans close theirs in the background too.
// PrefixLookup returns the rows under a key prefix (a bucket-key
// prefix), Scan pages through all rows by key: each page is consistent,
// and paging by key neither repeats nor skips a row that exists for the
// whole scan. Reads see every acknowledged Write of this replica.
// ScanPage adds a key prefix and returns the changelog offset its page
// reflects. NewView pins the replica's state (a Pebble snapshot taken
// under the apply lock, so it holds exactly the records below its
// LogOffset) for scans and lookups that must all read one state; close it
// promptly, since it holds back compaction's garbage. Closing the replica
// closes its views.
//
// # Changelog helpers
//
// CatchUp applies the changelog up to its current end (a follower that
// becomes leader, a fence that must see every admitted write).
// LogOffsets reports the changelog's retained range. TruncateLog lets the
// changelog drop records below a registered snapshot's log_offset, but
// never a record this replica has not applied.
//
// # Restore
//
// Host.Open(ctx, id, from) is the one restore path, for snapshots a
// replica made and for snapshots built offline by snapshotbuild alike:
// check that from belongs to the bucket, has safe unique local paths and a
// SHA-256 on every file; fetch every file, shared and private, into
// {root}/t{table}[-p{partition}]-b{bucket}/db/{local_path}, verifying size
// and SHA-256: SSTs and blob files, which Pebble never writes after
// creating them, through objstore.GetFile (the object is hashed, then, on
// a file:// store on the same file system, hard-linked rather than
// copied), the others (MANIFEST, which Pebble appends to, OPTIONS,
// markers, the WAL) as copies streamed through objstore.OpenVerified; open
// Pebble (FormatNewest, failing if the files hold no database); take the
// state from the database's state record, checked against log_offset and
// row_count, or else (an offline-built snapshot) from log_offset and
// row_count; replay the changelog from log_offset to its end. A fresh,
// empty changelog that ends below log_offset (a bulk-loaded bucket) is
// moved up with ResetTo; otherwise the changelog must hold [log_offset,
// end) or Open fails with ErrLogGap. Any failure, integrity errors
// (objstore.ErrIntegrity) included, removes the local directory and
// leaves no replica registered. Removing a linked file leaves its object
// intact.
//
// # Snapshots
//
// Snapshot flushes the memtable, checkpoints the database into a
// temporary directory (hard links; removed afterwards) and uploads it:
// *.sst files to {tablet}/shared/shared-{sha256}-s{id}.sst through
// objstore.PutFile (checked against the size and SHA-256 the snapshot
// records before anything is stored; on a file:// store on the same file
// system the object is a hard link to the database's immutable file, not a
// copy), other files (MANIFEST, OPTIONS, markers, the empty WAL file) as
// PutIfAbsent copies to snap-{id}/ as snapshot.PrivateFileName, _METADATA
// last. It is incremental: an SST that
// the previous snapshot lists as shared with the same local_path, size and
// SHA-256 is referenced, not uploaded. Files a restore downloaded, and SSTs
// hashed by an earlier Snapshot, are not hashed again (Pebble never reuses
// a file number). log_offset is the applied offset + 1 (Fluss: the log end
// offset when the snapshot is triggered), row_count the rows the
// checkpoint holds, snapshot_incremental_size the bytes of the files not
// taken over from the previous snapshot. All writes are write-if-absent
// (PutFile, PutIfAbsent), so a retry adopts what a failed attempt wrote. SSTs of an offline-built
// snapshot are private to it, so a replica's first snapshot after a bulk
// restore uploads them once to shared/.
//
// Retain keeps the last K snapshots of a bucket and lists the files that
// no retained snapshot references, _METADATA files first; DeleteFiles
// deletes them in that order. Registering snapshots and keeping them
// reference-counted in the coordinator's registry is the caller's job.
//
// # Concurrency
//
// A Host and a Replica are safe for concurrent use. Any number of reads,
// Writes and one Follow run together; applying is serialized, and
// Snapshot pauses applying only for a final flush and the checkpoint.
// Close waits for running calls and ends a running Follow with ErrClosed.
// Every blocking call takes ctx first; a Write whose changelog append
// succeeded applies it even if ctx is cancelled. DESIGN.md lists the
// goroutines and locks.
package replica
