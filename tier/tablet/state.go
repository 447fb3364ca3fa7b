package tablet

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
)

// bucketKey names one bucket of one target.
type bucketKey struct {
	target meta.Target
	bucket int32
}

// dataState is a target's data state as of an etcd revision (the mod
// revision of the table or partition record that holds it).
type dataState struct {
	state      meta.DataState
	bulkLoadID string
	rev        int64
}

func (d dataState) proto() tierv1.DataState {
	switch d.state {
	case meta.Active:
		return tierv1.DataState_DATA_STATE_ACTIVE
	case meta.Loading:
		return tierv1.DataState_DATA_STATE_LOADING
	}
	return tierv1.DataState_DATA_STATE_UNSPECIFIED
}

// targetState is the data state a target's replicas on this server
// enforce. The loop is its only writer. Every client request checks the
// state while holding fence for reading and keeps holding it until its
// work on the replica is done; SetDataState, after the loop stored a new
// state, takes fence for writing once, which waits out every request
// admitted under the old state.
type targetState struct {
	fence sync.RWMutex
	cur   atomic.Pointer[dataState]
}

func newTargetState() *targetState {
	ts := &targetState{}
	ts.cur.Store(&dataState{})
	return ts
}

func (ts *targetState) get() dataState { return *ts.cur.Load() }

// apply stores d if it is newer than the current state and reports
// whether it did. Only the loop calls it.
func (ts *targetState) apply(d dataState) bool {
	if d.state == "" || d.rev <= ts.cur.Load().rev {
		return false
	}
	ts.cur.Store(&d)
	return true
}

// drain waits until every request admitted before the call has finished.
func (ts *targetState) drain() {
	ts.fence.Lock()
	ts.fence.Unlock() //nolint:staticcheck // an empty critical section is the point: it waits out the readers
}

// bucketRoute is one bucket's assignment.
type bucketRoute struct {
	replicas   []string
	leader     string // "" while the bucket has none
	leaderAddr string // from a push; otherwise looked up in the live servers
	epoch      int32
}

func (r bucketRoute) hosts(id string) bool { return slices.Contains(r.replicas, id) }

// targetView is what the handlers know of a target: its names, schema,
// assignment and data state. It is immutable; the loop replaces it.
type targetView struct {
	id        meta.Target
	snap      snapshot.Target
	table     *kv.Table
	physKey   []int
	assignRev int64
	// routes holds every bucket when the assignment came from etcd, and
	// only this server's buckets when it came from a NotifyAssignment.
	routes map[int32]bucketRoute
	state  *targetState
}

// restoreSource says what a replica restores from: the bucket's latest
// registered snapshot (or nothing, for a bucket without one), or an
// explicit snapshot (RestoreSnapshot).
type restoreSource struct {
	explicit     bool
	snapshotID   int64
	metadataPath string
	bulkLoadID   string
}

// Replica states, as ReplicaStatus reports them.
const (
	restoringState = tierv1.ReplicaState_REPLICA_STATE_RESTORING
	readyState     = tierv1.ReplicaState_REPLICA_STATE_READY
	failedState    = tierv1.ReplicaState_REPLICA_STATE_FAILED
)

// restoringID is the snapshot id to report while restoring from src
// before its metadata is read: the explicit one, or -1.
func (src restoreSource) restoringID() int64 {
	if src.explicit {
		return src.snapshotID
	}
	return -1
}

// entryStatus is a replica entry's readiness, as ReplicaStatus reports it.
type entryStatus struct {
	state       tierv1.ReplicaState
	err         string
	restoringID int64 // -1: not restoring from a snapshot
	totalBytes  int64
	doneBytes   int64
}

// replicaEntry is one bucket replica on this server: one worker goroutine
// restores it, tails the changelog into it and takes its periodic
// snapshots, until the loop cancels ctx; then the worker closes and
// destroys the replica and closes done. An entry is replaced, never
// restarted, when the loop wants a new restore (RestoreSnapshot).
type replicaEntry struct {
	key    bucketKey
	rid    replica.ReplicaID
	state  *targetState
	source restoreSource
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	rep     atomic.Pointer[replica.Replica] // set while the replica serves
	status  atomic.Pointer[entryStatus]
	changed atomic.Pointer[chan struct{}] // closed (and replaced) by every setStatus
	// needCatchUp is nonzero while the replica leads a term it has not
	// caught up with the changelog in: the loop stores a new token at every
	// term it starts to lead (it may lead again at a later epoch without
	// having seen itself deposed), the first request of the term clears it
	// after CatchUp unless a newer term's token replaced it meanwhile.
	needCatchUp atomic.Uint64
	latestID    atomic.Int64 // latest snapshot taken or restored; 0: none

	// snap serializes snapshots of the replica and guards what the next
	// one needs.
	snap struct {
		sync.Mutex
		prev       *snapshot.Metadata // the latest snapshot restored or registered
		lastOffset int64              // its log offset; 0 for a replica without one
		full       bool               // the coordinator refused a snapshot as built: upload every file next time
	}

	leader bool  // loop-owned: the role last published for the entry
	epoch  int32 // loop-owned: with leader, the epoch it leads at
}

// setStatus publishes s and wakes whoever waits for a change (statusChanged).
func (e *replicaEntry) setStatus(s entryStatus) {
	e.status.Store(&s)
	next := make(chan struct{})
	if prev := e.changed.Swap(&next); prev != nil {
		close(*prev)
	}
}

// statusChanged returns a channel closed by the next setStatus. Take it
// before reading the status, so a change in between is not missed.
func (e *replicaEntry) statusChanged() <-chan struct{} { return *e.changed.Load() }

func (e *replicaEntry) getStatus() entryStatus { return *e.status.Load() }
