// Package clustertest holds the tier's in-process cluster tests: a whole
// tier started with daemon.StartEmbedded (embedded etcd, coordinators,
// three tablet servers, replication factor 3, the local changelog and a
// file:// object store), driven through tierclient, raw RPCs, plain HTTP
// and the thaw CLI. It has no non-test code.
//
// The tests cover: replicated writes read back from every replica (each
// replica in turn serves alone as the leader); a tablet server crash and
// restart with writes in flight (replicas move and restore from snapshot
// plus changelog, no acknowledged write is lost); coordinator failover
// (the standby takes over and the old epoch is fenced off in etcd and at
// the tablet servers); a LOADING target rejecting reads and writes with
// TARGET_LOADING; bad input (unknown table or partition, rows not
// matching the schema, oversize batches, malformed requests) failing with
// clear errors and leaving the data unchanged; and the CLI end to end.
//
// Set THAW_TEST_LOG=1 to see the tier's logs (debug with =debug).
package clustertest
