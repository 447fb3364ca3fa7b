// Package snapshot defines thaw's KV snapshot files: their layout in object
// storage, the _METADATA and bulk-load manifest documents, and the pure
// validator the coordinator runs on Commit. One format serves snapshots a
// tablet server takes and snapshots built offline. It follows Apache Fluss
// (CompletedSnapshot JSON v1 and the bulk-load proposal, apache/fluss#4222)
// and adds a SHA-256 per file. It imports only the standard library.
//
// # Layout
//
// Paths are URIs joined with "/"; the remote dir has no trailing slash:
//
//	{remote}/kv/{db}/{table}-{tableId}[/{partition}-p{partitionId}]            Target.Dir
//	  /{bucket}                                                               Target.TabletDir
//	  /{bucket}/snap-{snapshotId}/private-{sha256(content)}-{sha256(localPath)} private data files (PrivateFileName)
//	  /{bucket}/snap-{snapshotId}/_METADATA                                   Target.MetadataPath
//	  /{bucket}/shared/                                                       Target.SharedDir (tablet-made snapshots only)
//	  /_bulkload/{txnId}/manifest                                             Target.ManifestPath
//
// Target's path methods never fail: call Target.Validate (and ValidateTxnID)
// first, and pass non-negative bucket and snapshot ids. Validate rejects
// empty or non-[A-Za-z0-9_-] names, negative table and partition ids and a
// remote dir that is not a plain "scheme://authority[/path]" URI.
//
// # Documents
//
// _METADATA is Fluss's CompletedSnapshot JSON v1, field for field and in
// Fluss's order, so EncodeMetadata reproduces Fluss's bytes; thaw adds
// "sha256" (64 lowercase hex digits) after "size" in each kv_file_handle,
// omitted when absent. The manifest lists, per bucket in order, the path,
// length and sha256 of the bucket's _METADATA. Encoding is canonical: no
// whitespace, fixed member order, only '"', '\\' and control characters
// escaped.
//
// Decoding is strict. DecodeMetadata and DecodeManifest reject, each with a
// *DecodeError wrapping a specific sentinel: a document over MaxDocumentSize
// (ErrTooLarge), a UTF-8 byte order mark (ErrBOM), malformed JSON including
// invalid UTF-8 and lone surrogates (ErrSyntax), nesting deeper than 16
// (ErrTooDeep), anything but whitespace after the value (ErrTrailingData), a
// key repeated in any object (ErrDuplicateKey), a member the format does
// not define (ErrUnknownField), a missing member (ErrMissingField), null
// anywhere (ErrNull), a value of the wrong JSON type (ErrWrongType), a
// fraction or exponent in an integer (ErrNotInteger), an integer outside
// int32 or int64 as Fluss types it (ErrOutOfRange), an empty "sha256"
// (ErrInvalidValue), a missing version (ErrMissingVersion) and a version
// other than 1 (ErrUnsupportedVersion). Member order is free on input.
// Decoding checks form, not meaning: negative sizes, non-canonical digests or
// foreign paths decode, and the Validator rejects them.
//
// # Write order and immutability
//
// Writers are commit-marker-last: first every data file of a snapshot, then
// its _METADATA, then (for a bulk load, after every bucket is done) the
// manifest. An object is never overwritten with different bytes: objects
// are created if absent, and an existing object is adopted only if it is
// byte-identical. Private file names embed the SHA-256 of their content, so
// a name pins its bytes. A prefix without a _METADATA, or a bulk-load
// directory without a manifest, is incomplete and is left for garbage
// collection; nothing a live snapshot references is deleted.
//
// # Validation
//
// Validate and Validator check a bulk-load Commit (CommitRequest) against the
// Plan that Begin froze, and return every violation, each a *Violation
// whose Rule (itself a sentinel for errors.Is) names the rule broken. The
// rules are those of Fluss's server-side validation plus thaw's own:
//
//   - the plan: a valid target and transaction id, N ≥ 1 buckets, positive
//     limits, exactly one non-negative snapshot id per bucket;
//   - the request: 0 < length ≤ MaxManifestSize, canonical sha256, the
//     manifest path exactly the planned one;
//   - the manifest: present, exactly length bytes (not truncated, not grown),
//     matching sha256, strictly valid, version 1, bulk_load_id equal to the
//     transaction id, buckets 0..N-1 each exactly once in order (missing,
//     duplicate, extra and out-of-order entries are distinct rules), each
//     _METADATA reference at the canonical path with 0 < length ≤
//     MaxMetadataSize and a canonical sha256;
//   - each _METADATA: present, exact length, matching sha256, strictly valid,
//     version 1, table_id, partition_id (present iff partitioned), bucket_id,
//     snapshot_id and snapshot_location equal to the plan's, no shared files,
//     no auto-increment ranges, log_offset ≥ 0, row_count present iff
//     required and ≥ 0, snapshot_incremental_size equal to the sum of the
//     private sizes;
//   - each private file: size ≥ 0; a safe local_path (ValidateLocalPath);
//     local and remote paths unique; the remote path strictly within the
//     snap-{S}/ directory (same scheme and authority, no "..", "." or empty
//     segments, no '%', '?', '#' or backslash, not the _METADATA object);
//     thaw: a canonical sha256 and the name
//     private-{sha256}-{sha256(local_path)}; an observed size equal to size;
//   - the total input (manifest + every _METADATA + every private file) is
//     at most MaxInputSize.
//
// The validator is pure: it never touches storage. The caller reads what
// each stage returns (only canonical, bounded objects inside the
// transaction's directories) and supplies bytes and observed sizes. It does
// not read or hash private data files, and it does not check that they form
// an openable Pebble checkpoint; restore verifies each file's size and
// SHA-256 while downloading (NewVerifyingReader) before opening the
// database.
//
// # Concurrency
//
// Functions and Target methods are safe for concurrent use. A Validator
// and a reader from NewVerifyingReader are not.
package snapshot
