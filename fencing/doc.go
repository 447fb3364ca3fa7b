// Package fencing provides leader election in etcd, epochs that name
// leadership terms, writes guarded by the epoch, and the gate that rejects
// stale epochs where a request lands.
//
// # Epochs
//
// Elect campaigns with a lease-bound key under an election prefix; the
// candidate whose key has the lowest create revision leads. A term's Epoch
// is that create revision. Every later candidate's key is created later, so
// each new leader's epoch is strictly higher than its predecessor's: epochs
// of one election increase with every change of leader and are never
// reused. Epochs are revisions of one etcd cluster. They are comparable only
// within one election prefix, and they stay monotonic only as long as the
// cluster's revision does: restore etcd from a backup with its revision
// bumped (etcdutl snapshot restore --bump-revision --mark-compacted).
//
// # Guarded writes
//
// GuardedTxn (and Leadership.Txn) runs a transaction only if the leader key
// still has the caller's epoch as its create revision, checked inside the
// same etcd transaction. A deposed leader therefore changes nothing, however
// late its request arrives. The two failures are told apart: ErrNotLeader
// (the term is over; stop) and ErrPreconditionFailed (the caller's own
// comparisons failed; re-read and retry). Any other error leaves the outcome
// unknown.
//
// # Gates
//
// Whatever a leader sends elsewhere (coordinator to tablet servers) carries
// its epoch, and the receiver admits it through a Gate, which rejects an
// epoch lower than the highest it has admitted with ErrStaleEpoch. Fencing is
// enforced where the write lands, never by the sender's belief that it still
// leads.
//
// # Losing leadership
//
// A Leadership's Context is cancelled, with a cause wrapping
// ErrLeadershipLost, as soon as the term is seen to end: the session lease
// is no longer kept alive (expired, revoked, client closed), the leader key
// is deleted, the key cannot be confirmed within the lease TTL after the
// watch on it broke, or the leader resigned. Run all of the leader's work
// under that context and stop when it is done; a term never resumes. Resign
// cancels the context before it deletes the key, so work stops before the
// next leader can start.
//
// # Clocks
//
// Safety assumes no clock: guarded writes and gates compare revisions only.
// Liveness assumes only what the lease TTL does: a crashed leader's key
// expires about TTL after its last keep-alive, as measured by etcd. The old
// leader learns of the loss from the watch on its key (at once, if it can
// still reach etcd) or from its own keep-alive deadline: TTL after the last
// answered keep-alive, or after the grant if none was answered yet, by its
// own clock (DrainKeepAlive: clientv3's own deadline comes seconds later
// when no keep-alive was ever answered). Between the two it may
// still believe it leads while a successor already does; guarded writes and
// gates are what make that window harmless.
//
// # Concurrency
//
// Leadership, Gate and Gates are safe for concurrent use. Each Leadership
// runs two goroutines, one watching its key, one observing its lease's
// keep-alive answers; both end with the term.
//
// This package imports only the standard library and the etcd client.
package fencing
