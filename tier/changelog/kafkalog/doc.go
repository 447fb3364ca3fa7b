// Package kafkalog keeps the tier's bucket changelogs in Kafka: one
// single-partition topic per bucket log,
// {prefix}.t{table}[.p{partition}].b{bucket}, created on first Open. It
// implements changelog.Provider and changelog.Log, so tablet servers on
// different hosts share their buckets' logs (the local segment log is
// limited to the tablet servers of one process). It is one of the Kafka
// adapters and the only tier package that imports franz-go.
//
// # Records
//
// Each Append is one Kafka record, so that a batch is atomic: its key is
// the batch's first logical offset (8 bytes, big-endian), its value a
// version, a kind and the records, length-prefixed (frame.go). A marker
// record (kind 1, key = the next logical offset) keeps the log's end when
// it is emptied; a reset marker (kind 2, the same key, its value also the
// end it moves up from) moves a fresh or emptied log up (ResetTo). Decoding is
// strict: anything else in the topic is changelog.ErrCorrupt (so a thaw
// older than the reset marker cannot read a log reset since).
//
// # Logical offsets and the chain rule
//
// The tier's offsets are logical and dense; Kafka's are not (markers take
// a Kafka offset and no logical one, and the first logical offset of a
// bulk-loaded bucket is its row count). Readers therefore walk the topic
// from its first retained record, which is valid by construction, and
// apply one rule: a batch belongs to the log when its first offset is
// exactly the end so far, a marker when its offset is not below it, a
// reset marker when the end it moves up from is exactly the end so far
// (so a batch a deposed leader appended after the reset saw the log empty
// wins, and ResetTo fails with ErrConflict, instead of being skipped and
// deleted). A
// record that breaks the rule was written by a writer that had not seen
// the latest records (a deposed leader still appending) and is skipped by
// every reader alike. The writer learns it from the Kafka offset its
// produce got: if that is not the Kafka offset right after the end it
// knew, it reads what came in between and, when its record lost,
// Append returns ErrConflict and nothing of it is ever read (and when it
// is that offset, the writer still applies the rule: another call on the
// same handle may have read past other writers' records meanwhile). A
// marker that moves the end of an empty log up moves its start along, so
// a reset whose deletion of the older records failed leaves an empty log
// at the new offset, and a retried ResetTo succeeds. So appends
// are conditional, as the local log's cannot be, without Kafka
// transactions. The handle judges its record while it walks the chain, not
// from its index afterwards; if another handle's truncation deleted the
// record before this handle read it back, Append returns an error saying
// its outcome is unknown, never ErrConflict (which promises that nothing
// was written). A handle walks the retained topic once, when it first
// needs the log's offsets, and then follows its end. It indexes the valid
// records' positions in at most 4096 entries (the older half thinned to
// every other entry when full); a read or truncation between two indexed
// entries walks on from the one below. A truncation therefore cuts at the
// last indexed record at or below its offset: more may stay, never less.
//
// # Durability and visibility
//
// Produces wait for all in-sync replicas (acks=all) and the producer is
// idempotent; a record is readable once it is below the partition's high
// watermark, that is replicated. The topics' durability is Kafka's: give
// them a replication factor and min.insync.replicas that survive the
// failures you plan for. Topics are created with retention.ms and
// retention.bytes -1 (a topic that exists already, created by someone
// else, must have them, cleanup.policy delete, one partition and a
// max.message.bytes that takes a batch, else Open fails with
// ErrTopicSettings naming what is wrong): the tier, not Kafka, decides what to drop
// (TruncateBefore deletes records with DeleteRecords, below the batch that
// holds the offset; emptying the log first appends a marker so its end
// survives). ResetTo never moves a log's end down (changelog.ErrOutOfRange):
// Kafka cannot reuse offsets, and the tablet server only resets fresh logs
// upward. An Append that fails may still have reached Kafka (a produce
// whose answer was lost); its records then appear in the log, and the
// handle reads the log again before its next Append.
//
// # Waiting
//
// Wait polls with fetches that return at once, 5 ms apart at first and
// backing off to Config.PollInterval while nothing arrives. A fetch that
// waits at the broker would hold up every later request on the client's
// connection to that broker (Kafka answers a connection's requests in
// order), and every replica of a tablet server shares that connection.
package kafkalog
