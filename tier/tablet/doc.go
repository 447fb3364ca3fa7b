// Package tablet is the tier's tablet server: it registers under an etcd
// lease, hosts bucket replicas (one Pebble database each, sharing one block
// cache and a bounded memtable budget), restores replicas from the latest
// completed snapshot plus the changelog, serves lookups, prefix lookups and
// scans, takes ordinary snapshots, and rejects requests from a stale epoch or
// for a target that is not ACTIVE.
//
// Status: implemented with issue 4.
package tablet
