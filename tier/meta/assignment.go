package meta

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// GetAssignment reads a target's assignment; ErrNotFound if there is none
// (the target does not exist or is being dropped).
func (s *Store) GetAssignment(ctx context.Context, t Target) (Versioned[Assignment], error) {
	return get[Assignment](ctx, s, s.k.assignment(t), "assignment of "+t.String())
}

// ListAssignments returns every assignment, in key order.
func (s *Store) ListAssignments(ctx context.Context) ([]Versioned[Assignment], error) {
	as, _, err := list[Assignment](ctx, s, s.k.assignments(), assignmentPage)
	return as, err
}

// DroppedTargets returns those of targets that this metadata created and
// that have been dropped since (or are being dropped: a drop deletes the
// assignment first), in the order given. Assignments are created with
// their table or partition and never re-created, so a target whose id was
// allocated but which has no assignment is gone for good. A target whose
// id was never allocated here is not returned: it is not this
// metadata's to judge (a changelog shared with another tier, a wrong etcd
// prefix). An invalid target is ErrInvalid.
func (s *Store) DroppedTargets(ctx context.Context, targets []Target) ([]Target, error) {
	for _, t := range targets {
		if err := t.Validate(); err != nil {
			return nil, err
		}
	}
	// The sequences before the assignments: every id below them was
	// allocated, together with its assignment, before the list is read.
	tkey, pkey := s.k.seqTable(), s.k.seqPartition()
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(tkey), clientv3.OpGet(pkey)).Commit()
	if err != nil {
		return nil, fmt.Errorf("meta: read the id sequences: %w", err)
	}
	next := [2]int64{1, 1}
	for i, key := range []string{tkey, pkey} {
		if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if next[i], err = parseSeqValue(key, kvs[0].Value); err != nil {
				return nil, err
			}
		}
	}
	as, err := s.ListAssignments(ctx)
	if err != nil {
		return nil, err
	}
	live := make(map[Target]bool, len(as))
	for _, a := range as {
		live[a.Value.Target()] = true
	}
	var dropped []Target
	for _, t := range targets {
		if t.TableID < next[0] && t.PartitionID < next[1] && !live[t] {
			dropped = append(dropped, t)
		}
	}
	return dropped, nil
}

// ListDroppedData returns the dropped targets whose object-store data is
// still to be deleted, in key order.
func (s *Store) ListDroppedData(ctx context.Context) ([]Versioned[DroppedData], error) {
	ds, _, err := list[DroppedData](ctx, s, s.k.droppedAll(), assignmentPage)
	return ds, err
}

// DeleteDroppedData forgets a dropped target whose data is deleted, if its
// record still has revision rev (fencing.ErrPreconditionFailed otherwise).
func (s *Store) DeleteDroppedData(ctx context.Context, g Guard, t Target, rev int64) error {
	key := s.k.dropped(t)
	_, err := s.txn(ctx, g, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, []clientv3.Op{clientv3.OpDelete(key)}, nil)
	if err != nil {
		return fmt.Errorf("meta: forget the dropped data of %s: %w", t, err)
	}
	return nil
}

// PutAssignment replaces a target's assignment if it still has mod
// revision rev, and returns the new revision. Assignments are created with
// their table or partition and deleted with it, so rev must be that of an
// existing assignment: ErrNotFound if there is none, fencing.
// ErrPreconditionFailed if it has moved. The caller keeps the bucket count
// and the replication factor of the table; a zero Version is written as
// RecordVersion.
func (s *Store) PutAssignment(ctx context.Context, g Guard, a Assignment, rev int64) (int64, error) {
	if a.Version == 0 {
		a.Version = RecordVersion
	}
	if rev <= 0 {
		return 0, fmt.Errorf("%w: put assignment of %s: revision %d (an assignment is replaced, never created)", ErrInvalid, a.Target(), rev)
	}
	key := s.k.assignment(a.Target())
	op, err := put(key, a)
	if err != nil {
		return 0, err
	}
	resp, err := s.txn(ctx, g,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)},
		[]clientv3.Op{op},
		[]clientv3.Op{clientv3.OpGet(key, clientv3.WithCountOnly())})
	switch {
	case failed(err) && count(resp, 0) == 0:
		return 0, fmt.Errorf("%w: assignment of %s", ErrNotFound, a.Target())
	case err != nil:
		return 0, fmt.Errorf("meta: put assignment of %s at revision %d: %w", a.Target(), rev, err)
	}
	return resp.Header.Revision, nil
}

// AssignmentUpdate is one delivery of WatchAssignments. Applying the
// updates in order keeps a copy of the assignments equal to etcd's at Rev.
type AssignmentUpdate struct {
	// Reset says Put holds every assignment and replaces whatever the
	// receiver held: the first update, and again whenever the watch could
	// not resume (its revision was compacted).
	Reset bool
	// Rev is the etcd revision the receiver's copy is current at.
	Rev int64
	// Put holds the assignments created or changed, each target once.
	Put []Versioned[Assignment]
	// Deleted holds the targets whose assignment was deleted (dropped),
	// each once and never also in Put.
	Deleted []Target
	// Undecodable holds, in a Reset, the targets whose assignment exists
	// but could not be decoded (logged): not in Put, yet not deleted
	// either. A receiver keeps what it held for them.
	Undecodable []Target
}

// WatchAssignments delivers every assignment and then every change, as
// AssignmentUpdates, until ctx is done; then it closes the channel. It
// survives etcd errors (it retries with backoff) and compaction (it lists
// again and sends a Reset). Deliveries block until received: a slow
// receiver delays them but loses nothing. An undecodable assignment is
// logged and skipped.
func (s *Store) WatchAssignments(ctx context.Context) <-chan AssignmentUpdate {
	ch := make(chan AssignmentUpdate)
	send := func(u AssignmentUpdate) bool {
		select {
		case ch <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		defer close(ch)
		s.follow(ctx, s.k.assignments(), assignmentPage,
			func(kvs []*mvccpb.KeyValue, rev int64) bool {
				u := AssignmentUpdate{Reset: true, Rev: rev, Put: make([]Versioned[Assignment], 0, len(kvs))}
				for _, kv := range kvs {
					if a, ok := s.decodeAssignment(kv); ok {
						u.Put = append(u.Put, a)
					} else if t, err := s.k.parseAssignmentKey(string(kv.Key)); err == nil {
						u.Undecodable = append(u.Undecodable, t)
					}
				}
				return send(u)
			},
			func(evs []*clientv3.Event) bool {
				u := AssignmentUpdate{Rev: evs[len(evs)-1].Kv.ModRevision}
				for _, ev := range lastEvents(evs) {
					if ev.Type == clientv3.EventTypePut {
						if a, ok := s.decodeAssignment(ev.Kv); ok {
							u.Put = append(u.Put, a)
						}
						continue
					}
					t, err := s.k.parseAssignmentKey(string(ev.Kv.Key))
					if err != nil {
						s.log.Error("meta skips a deleted key", "key", string(ev.Kv.Key), "err", err)
						continue
					}
					u.Deleted = append(u.Deleted, t)
				}
				return len(u.Put)+len(u.Deleted) == 0 || send(u)
			})
	}()
	return ch
}

func (s *Store) decodeAssignment(kv *mvccpb.KeyValue) (Versioned[Assignment], bool) {
	a, err := decodeKV[Assignment](kv)
	if err == nil {
		var t Target
		if t, err = s.k.parseAssignmentKey(string(kv.Key)); err == nil && t != a.Value.Target() {
			err = fmt.Errorf("%w: key %s holds the assignment of %s", ErrCorrupt, kv.Key, a.Value.Target())
		}
	}
	if err != nil {
		s.log.Error("meta skips an undecodable assignment", "key", string(kv.Key), "err", err)
		return a, false
	}
	return a, true
}
