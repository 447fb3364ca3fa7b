// Package coordinator is the tier's coordinator: one active, any number on
// standby, elected in etcd. It owns all metadata (databases, tables,
// partitions, bucket assignment, the snapshot registry, bulk-load
// transactions).
//
// Contract: every metadata write is an etcd transaction that compares the
// leader key (the coordinator epoch), and every coordinator → tablet request
// carries the epoch; a deposed coordinator can change nothing.
//
// Status: implemented with issue 4.
package coordinator
