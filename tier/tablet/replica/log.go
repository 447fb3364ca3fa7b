package replica

import (
	"context"
	"fmt"
)

// CatchUp applies the changelog up to the end it has when called. A
// follower that becomes the leader calls it before serving reads, so that
// they see every write acknowledged by the previous leader.
func (r *Replica) CatchUp(ctx context.Context) error {
	if err := r.catchUp(ctx); err != nil {
		return fmt.Errorf("replica: catch up %v: %w", r.id, err)
	}
	return nil
}

// LogOffsets returns the first retained offset and the end offset of the
// replica's changelog (start == end: the log holds no record).
func (r *Replica) LogOffsets(ctx context.Context) (start, end int64, err error) {
	r.lifecycle.RLock()
	defer r.lifecycle.RUnlock()
	if r.closed {
		return 0, 0, fmt.Errorf("replica: log offsets of %v: %w", r.id, ErrClosed)
	}
	if start, end, err = r.log.Offsets(ctx); err != nil {
		return 0, 0, fmt.Errorf("replica: log offsets of %v: %w", r.id, err)
	}
	return start, end, nil
}

// TruncateLog lets the changelog drop the records below offset, which a
// registered snapshot covers. It never drops a record this replica has not
// applied: offset is lowered to the applied offset + 1.
func (r *Replica) TruncateLog(ctx context.Context, offset int64) error {
	r.lifecycle.RLock()
	defer r.lifecycle.RUnlock()
	if r.closed {
		return fmt.Errorf("replica: truncate log of %v: %w", r.id, ErrClosed)
	}
	offset = min(offset, r.applied.Load()+1)
	if err := r.log.TruncateBefore(ctx, offset); err != nil {
		return fmt.Errorf("replica: truncate log of %v before %d: %w", r.id, offset, err)
	}
	return nil
}
