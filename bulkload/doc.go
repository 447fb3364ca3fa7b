// Package bulkload holds the protocol vocabulary of thaw's bulk-load
// transaction, shared by the tier (server side) and the SDK (client side):
// transaction states, abort reasons, handles, frozen target facts and the
// errors callers branch on.
//
// Semantics (ARCHITECTURE.md "The bulk-load transaction"):
//
//   - States: BEGUN → COMMITTING → COMMITTED, or BEGUN → ABORTED. The step to
//     COMMITTING is the one irreversible decision; it is persisted before any
//     publication.
//   - Begin fences the target (LOADING), proves it empty and freezes schema,
//     bucket count, remote directory and one snapshot id per bucket. Begin with
//     the same caller token and principal resumes the same transaction.
//   - Commit returns only when the whole target is readable; a retried Commit
//     joins the in-flight commit or returns its outcome. An outcome can be
//     unknown to the caller (lost response): it is resolved through Status,
//     never by starting anything new.
//   - Abort is allowed in BEGUN only and is idempotent in ABORTED.
//
// This package imports only the standard library.
//
// # Vocabulary
//
// State and AbortReason carry Fluss's codes (BEGUN 0 … ABORTED 3;
// TARGET_NOT_EMPTY 0, BUILD_DEADLINE_EXCEEDED 1,
// COMMIT_DECISION_DEADLINE_EXCEEDED 2, ABORTED_BY_CALLER 3) and marshal as
// text by their names. A Handle names a transaction: the target by name,
// its table and partition ids (ids start at 1; partition id 0 means a
// non-partitioned table) and the transaction id, a canonical lowercase
// UUID (NewTxnID, ValidateTxnID). A Status reports the state and, exactly
// when ABORTED, the abort reason and message. TargetInfo is what Begin
// returns: the frozen facts a builder needs (schema id and kv.TableSchema
// JSON, bucket count and bucketing, remote data directory, one snapshot id
// and canonical snapshot directory per bucket, the manifest path, the
// build deadline) and never a credential. ManifestRef is what Commit
// freezes: path, exact length and SHA-256.
//
// # Begin, token by token
//
// Begin carries a caller token (ValidateCallerToken: 1..256 printable
// ASCII characters): a job names its transaction with it and repeats it
// after a restart. Same token and principal: while the fence is being set
// up Begin waits for it, once it is ready Begin returns the same
// TargetInfo, in COMMITTING or COMMITTED it returns the status, in ABORTED
// it fails with ErrTokenAborted (begin again with a new token). Another
// token or principal finds the target occupied (ErrTargetOccupied).
//
// # Errors
//
// Every error wraps one or more of the sentinels in errors.go; callers
// test them with errors.Is. IsRetriable reports the errors after which the
// same request may be repeated as is (ErrUnavailable, and
// ErrTooManyTransactions after a back-off). Begin, Commit and Abort are
// idempotent, so a retry never starts anything new.
//
// # The transaction record
//
// Record is the coordinator's persisted transaction record and
// EncodeRecord/DecodeRecord its JSON. The members are Fluss's transaction
// JSON v1 names, in Fluss's order, where they apply:
//
//	version, bulk_load_id, state, caller_token, database_name, table_name,
//	partition_name?, table_id, partition_id?, creator_name, creator_type,
//	remote_data_dir, schema_id, snapshot_ids?, created_time_ms,
//	updated_time_ms, build_deadline_ms, commit_decision_deadline_ms?,
//	result_expire_time_ms?, manifest_path?, manifest_length?,
//	manifest_sha256?, abort_reason?, abort_message?
//
// followed by thaw's own: bucket_count, bucketing, table_schema (the
// kv.TableSchema JSON object frozen at Begin) and adopted_buckets (the
// adoption cursor: buckets [0, adopted_buckets) are in the snapshot
// registry). Fluss's metadata_path and metadata_version are not kept:
// they pin a ZooKeeper registration version that a write can predict,
// while an etcd revision is known only after the write; the record and
// the registration instead change in one etcd transaction, and the
// registration carries the transaction id. snapshot_ids present means the
// fence is ready; abort_reason present in BEGUN means an abort is in
// progress.
//
// Encoding is canonical: no whitespace, fixed member order, optional
// members omitted when absent, no HTML escaping (see testdata for
// golden records). Decoding is strict: a UTF-8 byte order mark, invalid
// UTF-8, malformed JSON, anything but one object, trailing data, a
// duplicate key at any depth, an unknown member (names match exactly,
// not case-insensitively), a missing required member, null, a wrong type,
// a fraction or exponent in an integer, an out-of-range number, a version
// other than 1 and a record Validate rejects are all ErrInvalidRecord.
//
// # Concurrency
//
// Everything here is a plain value or a pure function, safe for
// concurrent use.
//
// Status: implemented with the bulk-load transaction (issue 5).
package bulkload
