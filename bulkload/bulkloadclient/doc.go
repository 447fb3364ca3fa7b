// Package bulkloadclient is thaw's public SDK for the bulk-load workflow: Begin
// returns an immutable, serializable build context; build sessions turn rows
// into bucket snapshots (through snapshotbuild); Commit assembles and writes
// the manifest and retries within the caller's budget; Abort releases the
// target.
//
// Contract: the build context holds only frozen target facts, never
// credentials, connections or local paths. Credentials are acquired by the
// build session and stay in process memory.
//
// Status: implemented with issue 6.
package bulkloadclient
