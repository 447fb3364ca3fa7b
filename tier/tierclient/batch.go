package tierclient

import (
	"context"
	"slices"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
)

// batch is one write request in the making: mutations of one bucket of one
// target, their key and value bytes copied into one arena. Batches are
// pooled with their arenas and mutation messages.
type batch struct {
	entry  *targetEntry
	enc    *targetState // the state the rows were encoded for
	bucket int
	muts   []*tierv1.Mutation // muts[:n] are in use; the rest are spare
	n      int
	arena  []byte
	bytes  int // key and value bytes
}

// add appends a mutation, copying key and value.
func (b *batch) add(op tierv1.MutationOp, key, value []byte) {
	if b.n == len(b.muts) {
		chunk := make([]tierv1.Mutation, max(64, b.n))
		for i := range chunk {
			b.muts = append(b.muts, &chunk[i])
		}
	}
	start := len(b.arena)
	b.arena = append(b.arena, key...)
	mid := len(b.arena)
	b.arena = append(b.arena, value...)
	m := b.muts[b.n]
	m.Op = op
	m.Key = b.arena[start:mid:mid]
	m.Value = nil
	if len(value) > 0 {
		m.Value = b.arena[mid:len(b.arena):len(b.arena)]
	}
	b.n++
	b.bytes += len(key) + len(value)
}

func (c *Client) getBatch(e *targetEntry, enc *targetState, bucket int) *batch {
	b, _ := c.batches.Get().(*batch)
	if b == nil {
		b = new(batch)
	}
	b.entry, b.enc, b.bucket = e, enc, bucket
	return b
}

func (c *Client) putBatch(b *batch) {
	for _, m := range b.muts[:b.n] {
		m.Key, m.Value = nil, nil
	}
	b.entry, b.enc, b.n, b.arena, b.bytes = nil, nil, 0, b.arena[:0], 0
	if cap(b.arena) > 4*c.opts.maxBatchBytes {
		b.arena = nil // a batch that grew around one huge row
	}
	c.batches.Put(b)
}

// sendWrite sends a batch to its bucket's leader under the retry policy,
// halving it while the server finds it too large. Halves go one after the
// other, so the bucket still applies the rows in order.
func (c *Client) sendWrite(ctx context.Context, b *batch) (attempts int, err error) {
	return c.sendMutations(ctx, b, b.muts[:b.n])
}

func (c *Client) sendMutations(ctx context.Context, b *batch, muts []*tierv1.Mutation) (int, error) {
	attempts, err := c.call(ctx, b.entry, b.bucket, b.enc, func(ctx context.Context, tablet tierv1connect.TabletServiceClient, st *targetState, loc location) error {
		_, err := tablet.Write(ctx, connect.NewRequest(&tierv1.WriteRequest{
			Target:      st.id,
			Bucket:      int32(b.bucket),
			LeaderEpoch: loc.epoch,
			Mutations:   muts,
		}))
		return err
	})
	if err != nil && !slices.ContainsFunc(muts, func(m *tierv1.Mutation) bool { return m.GetOp() != tierv1.MutationOp_MUTATION_OP_DELETE }) {
		// Deletes of a partition dropped meanwhile delete nothing, as
		// those of a partition that never existed.
		if gone, gerr := c.partitionGone(ctx, b.entry, b.enc, err); gone || gerr != nil {
			return attempts, gerr
		}
	}
	if err == nil || classify(err) != split || len(muts) < 2 {
		return attempts, err
	}
	c.opts.logger.Debug("tierclient: split write batch", "target", b.entry.target.String(), "bucket", b.bucket, "rows", len(muts), "err", err)
	h := len(muts) / 2
	a, err := c.sendMutations(ctx, b, muts[:h])
	if attempts += a; err != nil {
		return attempts, err
	}
	a, err = c.sendMutations(ctx, b, muts[h:])
	return attempts + a, err
}
