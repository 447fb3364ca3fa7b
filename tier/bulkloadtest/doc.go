// Package bulkloadtest holds the end-to-end tests of the bulk-load
// transaction on real parts in one process: an embedded etcd, real
// coordinators (tier/coordinator, two of them for failover), three real
// tablet servers (tier/tablet) sharing one changelog.LocalProvider and a
// file:// object store, snapshots built offline with snapshotbuild and a
// manifest written with snapshot.EncodeManifest at the planned path. It
// has no non-test code.
//
// The tests cover: a whole load read back through TabletService.Lookup on
// every replica (non-partitioned and partitioned targets); a reader
// hammering lookups during a load that sees only TARGET_LOADING, or every
// row, never a subset; bad manifests (each rejected with its rule while
// the transaction stays BEGUN and abortable, the target untouched); the
// clear errors (occupied target, non-empty target, Commit after Abort,
// Abort after COMMITTING, token reuse, manifest conflict); Commit retried
// after a lost response; the crash matrix (the coordinator leader, and a
// tablet server, stopped at each injection point, a successor finishing);
// an assignment change mid-restore; deadlines and result garbage
// collection under an injected clock; the orphan cleaner.
//
// Set THAW_TEST_LOG=1 to see the tier's logs (debug with =debug).
package bulkloadtest
