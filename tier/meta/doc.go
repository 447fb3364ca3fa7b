// Package meta is the tier's metadata store in etcd: databases, tables,
// partitions, id sequences, bucket assignment, tablet server registrations,
// the snapshot registry and the per-target data state (ACTIVE or
// LOADING(txn)).
//
// Contract: every write is a single etcd transaction guarded by the writer's
// epoch and the revisions it read; no step needs one etcd transaction per
// bucket of a target.
//
// Status: implemented with issue 4.
package meta
