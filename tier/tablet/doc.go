// Package tablet is the tier's tablet server: it registers under an etcd
// lease, follows its assignment, hosts bucket replicas (package
// tier/tablet/replica: one Pebble database each, sharing one block cache
// and a bounded memtable budget), restores them from the bucket's latest
// snapshot plus the changelog, serves the TabletService (writes, lookups,
// prefix lookups, scans and the coordinator's control RPCs), takes
// ordinary snapshots, and refuses requests from a stale coordinator epoch
// or for a target that is not ACTIVE.
//
// # Lifecycle
//
// New builds a Server from a Config and its Deps (metadata store, etcd
// client, changelog provider, object store, coordinator client, logger,
// Prometheus registerer); Run is a Runnable: it blocks until its context
// is done, then closes and removes every replica, revokes the
// registration and returns nil. Handler returns the TabletService's path
// and handler; the daemon mounts it at "/t/{id}/" (http.StripPrefix), and
// Config.AdvertiseAddress is that base URL ("http://host:port/t/{id}"),
// which the server registers for the coordinator and for leader hints.
//
// # Registration and assignment
//
// The server registers {p}/servers/{id} under a lease (meta.RegisterServer)
// and keeps it alive. When the lease is lost (expired, revoked, not kept
// alive) the coordinator will move its replicas, so the server stops
// serving them at once (closes and removes them) and registers again; if
// the assignment still names it, it restores them afresh.
//
// It follows the assignments (meta.WatchAssignments), the table and
// partition records ({p}/tables/ and {p}/partitions/, watched directly),
// the live servers (for leader hints) and the coordinator election (see
// Fencing). NotifyAssignment pushes are applied too: watch and push carry
// the etcd mod revision of the assignment, and the newer one wins, so a
// late push never undoes a newer assignment. A bucket replica is opened for
// every bucket whose replicas include this server, once the target's names
// and schema are known; a replica no longer assigned is closed and its
// local directory removed. When the assignment itself is deleted (its
// target was dropped; target ids are never reused), the bucket's changelog
// is deleted too once the replica has closed (Provider.Delete, retried
// while another replica on the host still holds it, until the server
// stops). What that misses (a target dropped while the server was down, a
// topic re-created by a replica on another host still restoring) the
// changelog sweep deletes: at start and every
// Config.ChangelogSweepInterval the server lists its Provider's logs and
// deletes those whose targets meta.Store.DroppedTargets reports (created
// by this metadata, assignment gone). At most Config.RestoreConcurrency
// replicas restore at once.
//
// # Restore
//
// A replica restores from the bucket's latest registered snapshot
// (meta.LatestSnapshot; none: an empty replica): replica.Host.Open downloads
// every file, verifying its size and SHA-256, opens Pebble and replays the
// changelog from the snapshot's log_offset to its end. Local state is a
// cache: a replica is always rebuilt from snapshot plus changelog, never
// reopened from its directory, and Run removes replica directories an
// earlier process left. A failed restore, or a changelog tail that fails
// (for example a follower that fell behind a truncation), is retried with
// backoff (RetryMin..RetryMax) from the latest snapshot; meanwhile
// ReplicaStatus reports FAILED with the error. RestoreSnapshot restores from
// an explicit snapshot instead (a bulk load's): for a bulk load, an empty
// changelog is first reset to the snapshot's log_offset; a failed explicit
// restore stays FAILED until the coordinator asks again.
//
// # Write path
//
// Write goes to the bucket leader. It is checked in this order, and nothing
// is written unless every check passes:
//
//  1. the target is known here (else NOT_FOUND) and the bucket is in
//     [0, buckets) (else INVALID_ARGUMENT);
//  2. this server leads the bucket at exactly the request's leader_epoch:
//     NOT_LEADER (metadata leader_id, leader_address, leader_epoch) when
//     another server leads it or it is not hosted here; STALE_EPOCH
//     (metadata epoch and the leader) for an older epoch; UNAVAILABLE for a
//     newer one this server has not seen yet;
//  3. the target is not LOADING, else TARGET_LOADING (metadata data_state,
//     bulk_load_id), whether or not the replica is ready;
//  4. the replica is ready (else UNAVAILABLE while it restores or after its
//     restore failed) and the target is ACTIVE (checked again under the
//     fence a bulk load's Begin waits on: TARGET_LOADING, or UNAVAILABLE
//     while this server has not read the target's data state yet);
//  5. the batch is not empty (INVALID_ARGUMENT) and within
//     MaxBatchMutations and MaxBatchBytes of changelog record bytes, else
//     BATCH_TOO_LARGE (metadata limit);
//  6. every mutation decodes with the table's current schema: an upsert's
//     value has the table's schema id (else SCHEMA_MISMATCH, metadata
//     schema_id) and decodes (kv.Table.DecodeValue), its key is exactly
//     EncodeKey of the decoded row, the row's bucket is the request's and,
//     for a partition, its partition is the target's; a delete has no value
//     and its key decodes and re-encodes to itself in the request's bucket.
//     A bad mutation is INVALID_ARGUMENT (or SCHEMA_MISMATCH) with metadata
//     index naming it.
//
// The batch is then appended to the bucket's changelog as one batch, one
// record per mutation, durable before the answer, applied to Pebble, and
// acknowledged with its first offset (mutation i has first_offset + i).
// A changelog with conditional appends (kafkalog) refuses the append of a
// leader another writer got ahead of (two leaders for a moment, one
// deposed): UNAVAILABLE, nothing of the batch written; a retry appends
// after the other writer's records, or meets NOT_LEADER. Every replica, leader or follower, tails the changelog (replica.Follow);
// records are applied once, in offset order, whoever reads them first.
//
// # Reads
//
// Lookup, PrefixLookup and Scan are served by any ready replica here when
// the request carries no leader_epoch (a follower may lag the leader), and
// only by the leader at that epoch when it carries one (checked as for
// Write), which then sees every write acknowledged before; a replica that
// has just become the leader, or leads at a new epoch (another server may
// have led in between, unseen here), first catches up with the changelog. Reads of
// a target a bulk load holds fail with TARGET_LOADING, on a replica that is
// not ready too (in the order of Write's checks 1–4). A Lookup reads its
// keys, and a PrefixLookup all its prefixes, from one consistent view; a
// PrefixLookup's rows together are bounded by MaxBatchMutations rows and
// MaxBatchBytes bytes (else BATCH_TOO_LARGE), a Lookup's values by
// MaxBatchBytes unless it finds one value only (a key asked for twice
// counts twice; tierclient splits such a Lookup). Scan pages are consistent and
// report the changelog offset they reflect; paging never repeats or skips a
// row that exists for the whole scan. A consistent scan pins one view for
// all its pages; the view is released when the scan completes, after
// ScanIdleTimeout without a page, or when the replica closes, and its token
// then fails with SCAN_EXPIRED.
//
// # Data access
//
// Before a Write, Lookup, PrefixLookup or Scan touches anything, the
// server checks it against the data-access policy the leading coordinator
// publishes in etcd (meta.DataAccess, which the server watches): when
// enforced, the request's bearer token must be a caller's (else
// UNAUTHENTICATED) whose Write or Read patterns cover the target's table
// (else PERMISSION_DENIED). Until the server has read a policy, while none
// is stored (no coordinator has led yet) and while the stored one does not
// parse, reads and writes are UNAVAILABLE: it never serves them openly by
// mistake. A policy not enforced lets every request through. The internal RPCs are guarded by
// the internal token instead (internal/daemon).
//
// # Data state
//
// Each target's data state (ACTIVE, or LOADING with a bulk-load id) comes
// from its table or partition record and from SetDataState pushes; both
// carry the record's etcd mod revision and the newer one wins. Until the
// records were listed once after a start, a push may fence a target
// (LOADING) but not open it (ACTIVE): a push built before a fence and
// delivered late would otherwise open a target its record says is LOADING. Every client
// request holds the target's fence (a read lock) from its state check to
// the end of its work on the replica. SetDataState stores the state, then
// takes the fence once for writing, which waits for every request admitted
// under the previous state, and for LOADING makes every replica here apply
// the whole changelog; only then does it answer, with each replica's
// log_end_offset and empty (no row and no record in the changelog), which
// stay final until the fence is lifted. Emptiness is read right after the
// catch-up: if the changelog's offsets cannot be read the answer fails
// (the coordinator resends), and a replica with none open is reported
// RESTORING, not confirmed, since a confirmed replica that is not empty
// aborts the load (TARGET_NOT_EMPTY).
//
// # Fencing
//
// Coordinator requests (NotifyAssignment, SetDataState, RestoreSnapshot,
// TakeSnapshot) carry the coordinator epoch and pass a fencing.Gate, which
// refuses an epoch lower than the highest admitted with STALE_EPOCH
// (metadata epoch). The server also admits the epoch of every coordinator
// it sees elected (fencing.Observe), so a deposed coordinator is refused
// even if its successor has not called yet. Control requests are admitted
// on the loop goroutine, in the order they are applied.
//
// # Snapshots
//
// A leader replica snapshots itself every SnapshotInterval if it applied
// records since its last snapshot (taken or restored) and its target is
// ACTIVE; TakeSnapshot snapshots on demand. A snapshot gets its id from the
// bucket's sequence (meta.NextSnapshotID, under the guard of the current
// coordinator's term), is checkpointed and uploaded incrementally over a
// base (replica.Snapshot): the previous one, taken or restored, while the
// bucket's registry still holds it, else the latest registered one, since
// retention deletes the shared files of the snapshots it drops (after a
// report the coordinator refused, none: every file goes up). It is
// reported with
// CoordinatorService.ReportSnapshot (with the leader epoch and server id);
// the coordinator registers it, applies retention and answers the oldest
// retained log_offset, below which the replica lets the changelog drop
// records (never records it has not applied). Snapshots of a replica run
// one at a time.
//
// # Metrics and logs
//
// Metrics go to Deps.Registerer labelled server="{id}": replicas by role
// and state, writes and reads by result, write batch sizes, restore and
// snapshot durations, snapshot bytes uploaded, registration and lease
// losses. Logs use slog with the keys server, table, partition, bucket and
// epoch.
//
// # Concurrency
//
// A Server is safe for concurrent use. One loop goroutine owns the
// assignments, records, data states and the replica map, and publishes
// what the handlers read under a read-write lock; each replica has one
// worker goroutine. DESIGN.md lists the goroutines, locks and files.
package tablet
