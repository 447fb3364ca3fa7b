// Package coordinator is the tier's coordinator: one active, any number on
// standby, elected in etcd. The active one owns all metadata in etcd
// (databases, tables, partitions, bucket assignment, the snapshot
// registry) through package meta, serves the CoordinatorService
// (thaw.tier.v1) and keeps every target's buckets placed on the live tablet
// servers.
//
// # Leadership and fencing
//
// Run campaigns with fencing.Elect under meta's election prefix
// ({p}/coordinator/election), the candidate value being Config.ID, and
// publishes Config.AdvertiseAddress at {p}/coordinators/{id} under a lease
// of its own. A term's epoch (fencing.Epoch) guards every metadata write:
// each is one etcd transaction that compares the leader key's create
// revision with the epoch (meta.Guard), so a deposed coordinator changes
// nothing, however late its write arrives. Every coordinator → tablet
// request (NotifyAssignment, TakeSnapshot) carries the epoch as
// coordinator_epoch; tablet servers admit it through a fencing.Gate and
// reject lower ones. When a term ends (lease lost, leader key gone, client
// closed, a write found fenced) the leader work stops, the term is resigned
// and Run campaigns again; when Run's context ends it resigns, so a standby
// takes over at once. A standby continues from etcd alone: it keeps no
// state that etcd does not hold.
//
// # Requests
//
// Only the active coordinator serves the CoordinatorService. A standby (or
// a coordinator whose term just ended) answers every RPC but GetLeader
// with NOT_LEADER, whose metadata names the active coordinator
// ("leader_id", "leader_address", "leader_epoch") when etcd knows it;
// one that etcd names itself (its term starting after the election, or
// ended before its leader key went) answers UNAVAILABLE instead. GetLeader
// is answered by every coordinator, as the API promises.
// Requests are validated before anything is read (names, schemas through
// kv.NewTable, replication factor 1..MaxReplicationFactor, partition names
// through kv), and errors carry tier/tierpb reasons (see rpcError for the
// mapping from meta's errors). A rejected request writes nothing. Writes
// whose outcome is unknown (etcd failed mid-way) report UNAVAILABLE; creates
// and drops are safe to retry with ignore_if_exists / ignore_if_not_exists.
//
// # Assignment
//
// Placement is the pure rule (see its documentation): new targets spread
// over the least loaded live servers, replicas on dead servers are
// replaced (except, for Config.ServerGrace at the start of a term, those
// of servers the assignments name that have not registered yet: awaited,
// see Server.Awaited, which also keep their leaderships), a bucket whose
// leader died gets a surviving replica as leader with leader_epoch+1, and joins are rebalanced by at most
// Config.MaxMovesPerRound replicas per round. CreateTable and
// CreatePartition place the new target's buckets and write them with the
// table or partition record in one transaction, so a target never exists
// without an assignment. A replication factor above the number of live
// servers is not an error: the buckets get every live server, the shortfall
// is logged and exported as thaw_coordinator_under_replicated_buckets, and
// later rounds repair it when servers join. A target created while no
// server is live has leaderless buckets until one registers.
//
// A bucket's replicas share one changelog: every tablet server registers
// the identity of the changelog its bucket logs live in (a local log root,
// or a Kafka cluster and topic prefix), and Placement keeps each bucket on
// servers of one identity, recorded in the bucket's assignment. A bucket
// whose changelog has no live server waits for one, placement unchanged,
// rather than moving to a server that could not read its log. While a
// tablet server of an older release (no identity) is registered, placement
// treats it as fitting any bucket and records no identity, so a rolling
// upgrade keeps working.
//
// While it leads, the coordinator runs reconcile rounds: on every change of
// the live server set (meta.WatchServers), after DDL, every
// Config.ResyncInterval, and every Config.RebalanceInterval while a round
// still moved replicas toward balance. A round reads every live target and
// its assignment, runs Placement, and writes each changed assignment as a
// compare-and-swap on the revision it read (a lost race costs a retry).
// Each change, creation and drop is then pushed (NotifyAssignment, bounded
// fan-out, best effort) to the servers concerned; tablet servers also
// watch the assignments in etcd, so a lost push only delays them. Targets
// a bulk load holds (LOADING, or carrying a bulk_load_id) are pinned: their
// replicas are repaired but not moved for balance.
//
// # Snapshots
//
// ReportSnapshot (called by a bucket leader once a snapshot's files and
// _METADATA are written) checks the leader epoch against the assignment
// (STALE_EPOCH otherwise), checks that the metadata path is the canonical
// one and that the _METADATA there describes exactly the reported
// snapshot, registers it (meta.AddSnapshot; idempotent), then applies
// retention: the Config.SnapshotRetention newest registry entries stay;
// for the older ones, every file that no retained snapshot references and
// that lies inside the bucket's directory is deleted first (replica.Retain
// decides; files of a bulk-loaded snapshot belong to it alone and go with
// it), then their _METADATA, and last their registry entries. Nothing a
// retained snapshot references is deleted; if a retained snapshot's
// document cannot be read, no file is deleted at all. An object that
// cannot be deleted (counted in
// thaw_coordinator_snapshot_files_leaked_total) leaves its snapshot's
// _METADATA and registry entry, so the bucket's next retention pass, of
// this leader or the next, deletes what is left. The
// response carries the oldest retained log offset, below which the leader
// may truncate the bucket's changelog. Reports of one bucket are
// serialized. TriggerSnapshot asks each addressed bucket's leader to take
// one (TakeSnapshot) and returns the registered snapshots.
//
// A dropped table or partition's snapshot directory is emptied by the
// leader: the drop records it (meta.DroppedData, written with the dropping
// mark), and at the start of each term and every
// Config.DroppedDataCleanInterval the leader deletes every object under
// each recorded directory (_METADATA first), keeps the record while
// anything failed or was deleted, and forgets it once a pass at least
// Config.DroppedDataGrace after the drop found the directory empty (a
// snapshot upload in flight at the drop lands within the grace).
//
// # Bulk load
//
// The coordinator also serves the BulkLoadService (Handler serves both
// services at "/") and drives every bulk-load transaction: one runner
// goroutine per transaction record in etcd owns its bulktxn.Machine (the
// pure state machine) and performs its effects — record writes through
// meta.PutBulkLoad (each one guarded etcd transaction comparing the epoch,
// the record's, the registration's and the assignment's revisions),
// emptiness proofs, snapshot id allocation, manifest validation against
// the object store (the snapshot.Validator stages, then every data file's
// size and SHA-256 streamed through objstore.OpenVerified; violations are
// answers, storage errors are retried), and the fence, restore, publish
// and unfence rounds as SetDataState and RestoreSnapshot calls carrying
// the epoch. Results come back tagged with the machine's generation, so a
// machine replaced after a halt never sees its predecessor's. Replica
// holders are the assignment's replicas on live servers, each with the
// create revision of its registration as incarnation, from the assignment
// and server watches: a change restarts a running round. When a term
// starts, every record is loaded and resumed (bulktxn.Recover); terminal
// ones wait for their result expiry, when the record, the manifest and
// what an aborted transaction left in its snapshot directories are
// deleted (the orphan cleaner also sweeps every
// BulkLoadConfig.OrphanCleanInterval). Begin finds the transaction of its
// caller token (terminal ones included) before admitting a new one;
// Begin, Commit and Abort wait for the machine's answer, and an answer
// that only says the machine is being recovered is repeated for the
// caller. Deps.Clock injects time and Deps.BulkLoadHook named steps (for
// crash tests). docs/bulkload.md describes the protocol for operators.
//
// # Caller authentication
//
// With Config.Callers set, the BulkLoadService handler authenticates every
// call by its bearer token (the SHA-256 of which names a Caller) and each
// RPC checks that the caller may bulk load the transaction's target
// (Caller.Tables); List shows only such transactions. Without Callers
// nothing is authenticated. With Config.AuthorizeDDL the CoordinatorService's
// DDL RPCs (create and drop of databases, tables, partitions) need a
// caller's token whose Caller.DDL patterns cover the target; its reads and
// the tablet servers' calls (ReportSnapshot) stay open. With
// Config.AuthorizeData each leader publishes, at the start of its term and
// before anything else, the data-access policy (meta.DataAccess: the
// callers' names, token hashes and Caller.Read / Caller.Write patterns)
// that the tablet servers enforce on reads and writes, and the
// CoordinatorService's metadata reads need a caller too (authorizeMeta);
// without it, it publishes that nothing is enforced. SetCallers replaces the callers of a
// running coordinator (the daemon's coordinator.callers_file): every check
// uses the new ones at once, and a leader publishes the policy again.
//
// # Upload gateway
//
// Builders that hold no object store credentials write through the
// coordinator instead (ARCHITECTURE.md, "Scoped temporary write
// authorization"): GetUploadCredentials mints an uploadcap capability of a
// BEGUN transaction (lifetime BulkLoadConfig.UploadCredentialTTL, never past
// the build deadline), signed with Deps.UploadKey or a random key of this
// process, and Handler serves the gateway at uploadcap.Path. The gateway
// verifies the capability, asks the current term's runner of its
// transaction whether it is still BEGUN, allows a PUT only directly in the
// snapshot directory of a bucket the capability names or, when it names
// every bucket, at the manifest path (it deletes nothing: a DELETE is
// 405), receives the body into a temporary file whose size
// and SHA-256 it checks, and stores it write-if-absent
// (UploadStore.PutFileStamped, with the received file's stamp so that a
// linking store does not hash it again; at most
// BulkLoadConfig.UploadConcurrency at once). It never logs the capability.
// Before a Commit persists the manifest freeze, the runner closes the
// gateway to the transaction and waits for its stores and signings in
// flight, so that the validation reads a settled directory.
//
// A POST with the same checks asks for a signed upload instead: where the
// store signs uploads (UploadSigner: objstore's s3:// stores) the gateway
// answers a presigned PUT of exactly the declared key, size and SHA-256,
// write-if-absent, living BulkLoadConfig.SignedUploadTTL at most, and the
// builder sends its bytes straight to the store; an existing identical
// object is answered "adopted". Elsewhere, or with a negative
// SignedUploadTTL, it answers uploadcap.Unsupported and builders PUT
// through the gateway.
//
// # Metrics
//
// thaw_coordinator_leader, _epoch, _terms_total, _ddl_total{op,result},
// _reconcile_rounds_total{result}, _replica_moves_total,
// _bucket_leader_changes_total, _under_replicated_buckets,
// _live_tablet_servers, _assignment_notifications_total{result},
// _snapshot_reports_total{result}, _snapshots_pruned_total,
// _snapshot_files_deleted_total, _snapshot_files_leaked_total,
// _bulkload_transactions{state}, _bulkload_phase_seconds{phase},
// _bulkload_requests_total{rpc,result}, _bulkload_restoring_replicas,
// _bulkload_validations_total{result}, _bulkload_recoveries_total,
// _bulkload_orphan_files_deleted_total, _upload_requests_total{op,result},
// _upload_bytes_total; registered on Deps.Registerer.
//
// # Concurrency
//
// A Coordinator is safe for concurrent use: RPC handlers run on the
// server's goroutines; Run owns the term. DESIGN.md describes the
// goroutines and locks.
package coordinator
