// Package changelog is the tier's per-bucket changelog: an ordered,
// durable, offset-addressed log of write batches. A bucket replica's state
// is its latest snapshot at log_offset plus this log from log_offset on.
// The bucket leader appends a write batch, then applies it; followers tail
// the log and apply what they read.
//
// # Interfaces
//
// Consumers take the narrowest view they need: the leader an Appender, a
// follower or a restoring replica a Reader, the replica that owns the
// bucket's log lifecycle a Log. A host's logs come from a Provider.
// The shapes follow a Kafka partition so that a Kafka-backed provider (one
// partition per bucket log) can implement them: offsets are per record,
// dense and assigned by the log; Append returns the first assigned offset;
// readers fetch from an offset and may block for more. Package
// tier/changelog/kafkalog is that provider.
//
// # Offsets
//
// Every record has an int64 offset. A log holds the records in
// [start, end): start is the first retained offset and end the offset the
// next record gets. A new log has start = end = 0. ResetTo moves both of an
// empty log, so that a bulk-loaded bucket's log starts at its snapshot's
// log_offset. TruncateBefore raises start; records at or above the
// requested offset always stay, records below it may stay until their
// whole segment can go. Offsets are never reused, except that ResetTo on an
// emptied log may move end down (see ResetTo).
//
// # Durability and ordering
//
// Append writes its records as one batch and returns only after the batch
// is on stable storage (one fsync per Append, covering the whole batch). A
// batch is atomic: after a crash it is there completely or not at all. Its
// records get consecutive offsets in the order given; concurrent Appends are
// serialized, each batch contiguous. A record is visible to Read and Wait
// only once its Append's fsync has returned, so a follower never applies a
// record that a crash could take back. A Read returns records in offset
// order with no gaps.
//
// # Recovery
//
// Opening a log checks every segment header, and scans and CRC-checks the
// last segment completely. A bad frame at the end of the last segment is a
// torn tail, the unsynced write of an Append that never returned: it is cut
// off (WithTailRepairHook reports it). It counts as a torn tail only if it
// spans no more bytes than one batch can and no valid later batch follows
// it (a valid frame inside the bad frame's declared extent is its payload,
// client bytes, unless the bad frame checks out when cut there, its length
// damaged); otherwise, like any bad frame elsewhere, it is corruption, reported
// as a *CorruptError (wrapping ErrCorrupt) that names the segment file, the
// byte position and the offset. Nothing is dropped silently. Earlier
// segments are CRC-checked as they are read, so corruption there surfaces
// from Read. One limit is inherent: damage to the last acknowledged batch
// of the last segment, with nothing after it, looks exactly like a torn
// write and is cut off.
//
// # Concurrency
//
// A Log is safe for concurrent use. Appends, truncations, resets and Close
// run one at a time; any number of Reads and Waits run alongside them and
// each other. Wait wakes on append without polling. A Read that is inside a
// segment when TruncateBefore removes it finishes its read. Close waits for
// a running append, makes Waits return ErrClosed and lets running Reads
// finish. Every blocking call takes ctx first; an Append gives up on ctx
// only until its write starts.
//
// # The local segment log
//
// SegmentLog keeps one directory of segment files per bucket log;
// LocalProvider keeps one such directory per bucket under a host root,
// shared by every tablet server of the host, which run in one process.
// Opening an id that is open already returns another handle on the same
// SegmentLog (reference-counted; the log closes with its last handle), so
// the replicas of one bucket on one host share one log: the leader's
// appends are what its local followers tail. This is how the embedded
// single-machine mode replicates without Kafka. DESIGN.md describes the
// file format, locks and goroutines.
package changelog
