// Package meta is the tier's metadata store in etcd: databases, tables,
// partitions, id sequences, bucket assignment, tablet server registrations,
// the snapshot registry and the data state of every target (ACTIVE, or
// LOADING for a bulk load). The coordinator writes it; tablet servers
// register themselves and watch their assignment.
//
// # etcd
//
// StartEmbedded runs a single-member etcd in the process on a data
// directory (fsync on; a restart on the same directory keeps everything),
// over TLS if given a key pair (its own clients then trust exactly that
// certificate, and present it where etcd requires client certificates:
// CheckServingFiles); Connect reaches an external cluster,
// waiting (and warning) while it does not answer, but failing at once
// when a TLS handshake shows the certificates will never do (ErrTLS).
// Both log etcd's warnings and errors through slog and nothing else.
//
// # Key space
//
// Under a prefix p (default "/thaw"):
//
//	{p}/coordinator/election/...                          fencing.Elect prefix (ElectionPrefix)
//	{p}/seq/table, {p}/seq/partition                      next table / partition id
//	{p}/seq/snapshot/{tableId}[/p{partitionId}]/{bucket}  next snapshot id of a bucket
//	{p}/databases/{db}                                    DatabaseRecord
//	{p}/tables/{db}/{table}                               TableRecord (data state of a non-partitioned table)
//	{p}/partitions/{tableId}/{partitionName}              PartitionRecord (data state of the partition)
//	{p}/assignment/{tableId}[/p{partitionId}]             Assignment
//	{p}/servers/{serverId}                                ServerRecord, under the server's lease
//	{p}/snapshots/{tableId}[/p{partitionId}]/{bucket}/{snapshotId:020d}  BucketSnapshot
//	{p}/bulkload/txn/{tableId}[/p{partitionId}]/{txnId}   bulkload.Record (bulk-load transaction)
//	{p}/dropped/{tableId}[/p{partitionId}]                DroppedData (object-store data still to delete)
//	{p}/access/data                                       DataAccess (the tablet servers' data-access policy)
//
// Sequence values are the next id as 20 decimal digits, so that etcd can
// compare them as strings; every id starts at 1 and 0 means "none" (a
// Target with PartitionID 0 is a non-partitioned table). A target's
// assignment key exists from its creation until its drop begins: writes to
// the snapshot registry require it.
//
// # Records
//
// Values are JSON objects with a "version" (RecordVersion, 1) and
// snake_case fields in declaration order, e.g.
//
//	{"version":1,"name":"sales","created_ms":1700000000000}
//	{"version":1,"table_id":7,"database":"sales","name":"orders","schema":{...kv.TableSchema...},
//	 "replication_factor":3,"remote_data_dir":"s3://b/thaw","data_state":"LOADING","bulk_load_id":"txn-1",
//	 "created_ms":1700000000000,"modified_ms":1700000000500}
//	{"version":1,"partition_id":3,"table_id":7,"name":"2024-01-01","data_state":"ACTIVE","created_ms":1,"modified_ms":2}
//	{"version":1,"table_id":7,"partition_id":3,"buckets":[{"replicas":["ts-1","ts-2"],"leader":"ts-1","leader_epoch":4}]}
//	{"version":1,"id":"ts-1","address":"10.0.0.5:7400","started_ms":1700000000000}
//	{"version":1,"snapshot_id":1,"log_offset":1002,"metadata_path":"oss://test/a2"}
//
// The last is Fluss's ZooKeeper BucketSnapshot, byte for byte. Decoding is
// strict (Unmarshal): unknown or misspelt fields, duplicate keys, trailing
// data, any other version and invalid records are ErrCorrupt; writes
// validate first (Marshal) and fail with ErrInvalid or ErrTooLarge
// (MaxRecordBytes). LOADING requires a bulk_load_id; ACTIVE may carry one
// while a bulk load publishes; a bulk-load id is never replaced by another.
// A record being dropped carries "dropping":true.
//
// # Guarded writes
//
// Every coordinator write takes a Guard (the leader key and epoch of its
// term) and runs each of its etcd transactions through fencing.GuardedTxn:
// a transaction applies only while the leader key still has the epoch as
// its create revision.
// Reads return Versioned values with the key's mod revision; writes that
// replace a record (PutAssignment, SetDataState) take the revision they
// replace and fail with fencing.ErrPreconditionFailed if it moved. Creates
// compare-and-swap their id sequence in the same transaction as the records
// they write (retrying internally when another create moved it), and
// compare the keys they depend on: a table needs its database, a partition
// its table's record at the revision read. So a deposed coordinator changes
// nothing (fencing.ErrNotLeader), and a concurrent write makes a create or
// replace fail or retry, never be lost. After any other error the outcome
// is unknown: re-read.
//
// Bulk-load transaction records (PutBulkLoad) are written the same way:
// each write compares the record's mod revision (absence, to create it)
// and optionally the target's assignment revision, and either changes the
// target's registration (SetDataState, the record write as its If/Then)
// or registers up to MaxBulkLoadAdoptions bucket snapshots, each created
// or kept byte-identical, so that an adoption batch and the record's
// cursor land together. Records are bulkload.Record's own strict JSON.
//
// Tablet servers write only their own registration (RegisterServer), under
// their lease and without a guard.
//
// # Transaction size
//
// etcd accepts 128 operations per transaction level (127 inside the guard)
// and 1.5 MiB per request by default. No transaction here has more than 100
// comparisons or operations, callers' additions included, and no record
// exceeds MaxRecordBytes (1 MiB: an assignment of 4096 buckets with three
// replicas fits with server ids of up to 40 characters; a placement that
// does not fit is cut back by the coordinator to removing the replicas of
// servers that are gone, and the buckets stay under-replicated). Work over many keys is batched: AllocateSnapshotIDs moves
// 64 sequences per transaction; drops delete at most 500 keys per
// transaction. A drop first marks its record dropping, deletes the
// assignment (so nothing can be added any more) and writes the target's
// DroppedData (its snapshot directory, which the coordinator empties and
// then forgets: ListDroppedData, DeleteDroppedData), then sweeps the keys
// under the id, then deletes the record, each step conditional on the
// marked record; calling the drop again finishes an interrupted one.
// Targets that are loading cannot be dropped (ErrLoading).
//
// # Watches
//
// WatchAssignments delivers a Reset with every assignment and its revision,
// then every change, coalesced per watch response, each with the revision
// the receiver is current at; a receiver that applies them in order holds
// etcd's assignments at that revision. It resumes a broken watch after the
// last revision delivered, and lists again (a new Reset) when that revision
// was compacted. Deliveries block until received. WatchServers delivers the
// whole live set after every change, keeping only the latest unread set.
// Both retry etcd errors with backoff until their context is done, then
// close the channel; undecodable values are logged and skipped.
//
// # Concurrency
//
// A Store is safe for concurrent use. Each watch and each Registration runs
// one goroutine, which ends with its context or Close.
package meta
