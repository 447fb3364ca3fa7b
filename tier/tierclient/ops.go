package tierclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
)

// Upsert writes rows (a value for every column each) into t. Every row is
// encoded and routed before anything is sent, so a row that does not fit
// the schema, or whose partition does not exist (without
// WithCreatePartitions), fails the call with nothing written: a *RowError.
// The rows are then sent like a Writer's: per bucket, in order, in
// batches, buckets concurrently. On failure some buckets may have been
// written and others not; the error joins one BucketError per failed
// bucket. Upserting the same rows again is harmless. With
// WithCreatePartitions, a call that fails on a row creates no partition.
func (c *Client) Upsert(ctx context.Context, t Target, rows []kv.Row) error {
	return c.apply(ctx, t, tierv1.MutationOp_MUTATION_OP_UPSERT, "upsert", rows)
}

// Delete deletes the rows whose primary keys keys hold (rows of the table
// in which only primary-key columns are read; see TableInfo.KeyRow). It
// behaves as Upsert does; deleting a missing key is not an error, nor is
// a key whose partition does not exist, which is skipped (Delete never
// creates a partition; one call asks the coordinator once per missing
// partition, however many of its keys it holds).
func (c *Client) Delete(ctx context.Context, t Target, keys []kv.Row) error {
	return c.apply(ctx, t, tierv1.MutationOp_MUTATION_OP_DELETE, "delete", keys)
}

func (c *Client) apply(ctx context.Context, t Target, op tierv1.MutationOp, name string, rows []kv.Row) error {
	w, err := c.newWriter(ctx, t, ctx, true)
	if err != nil {
		return fmt.Errorf("tierclient: %s %v: %w", name, t, err)
	}
	abandon := func(i int, err error) error {
		w.mu.Lock()
		w.mu.closed = true
		w.dropLocked()
		w.mu.Unlock()
		w.cancel()
		return &RowError{Op: name, Target: t, Index: i, Err: err}
	}
	if op == tierv1.MutationOp_MUTATION_OP_UPSERT && w.r.perRow() && c.opts.createPartitions {
		// Routing a row creates its partition: every row is checked
		// first, so that a call that fails creates none.
		enc := w.r.info.KV.NewEncoder()
		for i, r := range rows {
			if _, _, _, err := enc.Encode(kv.RowFields(r)); err != nil {
				return abandon(i, err)
			}
			if _, err := enc.PartitionName(kv.RowFields(r)); err != nil {
				return abandon(i, err)
			}
		}
	}
	for i, r := range rows {
		if err := w.mutate(ctx, op, r); err != nil {
			return abandon(i, err)
		}
	}
	if err := w.Close(ctx); err != nil {
		return fmt.Errorf("tierclient: %s %v: %w", name, t, errors.Unwrap(err))
	}
	return nil
}

// keyGroup is the keys (or prefixes) of one call that go to one bucket.
type keyGroup struct {
	e      *targetEntry
	enc    *targetState
	bucket int
	idx    []int // positions in the call's input
	keys   [][]byte
}

// groupKeys encodes rows with encode and groups them by physical target
// and bucket, in first-seen order. A row that cannot be routed or encoded
// is a *RowError of op, returned as it is; any other error is wrapped with
// "{op} from {t}".
func (c *Client) groupKeys(ctx context.Context, op string, t Target, rows []kv.Row,
	encode func(st *targetState, row kv.Row) ([]byte, int, error),
) ([]*keyGroup, error) {
	r, err := c.newRouter(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("tierclient: %s from %v: %w", op, t, err)
	}
	byKey := make(map[queueKey]*keyGroup)
	var groups []*keyGroup
	for i, row := range rows {
		e, err := r.route(ctx, row)
		if err != nil {
			return nil, &RowError{Op: op, Target: t, Index: i, Err: err}
		}
		if e == nil {
			continue // no such partition: nothing to find
		}
		st := e.state.Load()
		key, bucket, err := encode(st, row)
		if err != nil {
			return nil, &RowError{Op: op, Target: t, Index: i, Err: err}
		}
		g := byKey[queueKey{e, bucket}]
		if g == nil {
			g = &keyGroup{e: e, enc: st, bucket: bucket}
			byKey[queueKey{e, bucket}] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.keys = append(g.keys, key)
	}
	return groups, nil
}

// fanOut runs do on every group's keys in chunks of at most the batch row
// limit, all at once (the in-flight limit paces the requests), and joins
// one BucketError per failed group.
func (c *Client) fanOut(ctx context.Context, op string, groups []*keyGroup, do func(ctx context.Context, g *keyGroup, lo, hi int) (int, error)) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := make(map[*keyGroup]*BucketError)
	for _, g := range groups {
		for lo := 0; lo < len(g.keys); lo += c.opts.maxBatchRows {
			hi := min(lo+c.opts.maxBatchRows, len(g.keys))
			wg.Go(func() {
				attempts, err := do(ctx, g, lo, hi)
				if err == nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				be := failed[g]
				if be == nil {
					be = &BucketError{Op: op, Target: g.e.target, Bucket: g.bucket}
					failed[g] = be
				}
				be.Rows += hi - lo
				be.Attempts, be.Err = attempts, err
			})
		}
	}
	wg.Wait()
	var errs []error
	for _, g := range groups {
		if be := failed[g]; be != nil {
			errs = append(errs, be)
		}
	}
	return errors.Join(errs...)
}

// splitting runs send on keys[lo:hi], halving the range while the server
// finds it too large, and returns the attempts made.
func splitting(lo, hi int, send func(lo, hi int) (int, error)) (int, error) {
	attempts, err := send(lo, hi)
	if err == nil || classify(err) != split || hi-lo < 2 {
		return attempts, err
	}
	mid := lo + (hi-lo)/2
	a, err := splitting(lo, mid, send)
	if attempts += a; err != nil {
		return attempts, err
	}
	a, err = splitting(mid, hi, send)
	return attempts + a, err
}

// decodeValue decodes a value of st's table, which must carry its schema
// id.
func decodeValue(st *targetState, v []byte) (kv.Row, error) {
	id, row, err := st.table.DecodeValue(v)
	if err != nil {
		return nil, err
	}
	if id != st.table.SchemaID() {
		return nil, fmt.Errorf("%w: a value has schema id %d, the table %d", ErrTargetChanged, id, st.table.SchemaID())
	}
	return row, nil
}

// Get returns the row of each key (a row of the table in which only the
// primary-key columns are read; see TableInfo.KeyRow), nil where there is
// none, in the order of keys. Keys are looked up in one request per bucket
// (per batch row limit), buckets in parallel, from the buckets' leaders,
// which see every acknowledged write.
func (c *Client) Get(ctx context.Context, t Target, keys []kv.Row) ([]kv.Row, error) {
	groups, err := c.groupKeys(ctx, "get", t, keys, func(st *targetState, row kv.Row) ([]byte, int, error) {
		key, err := st.table.EncodeKey(row)
		if err != nil {
			return nil, 0, err
		}
		bucket, err := st.table.Bucket(row)
		return key, bucket, err
	})
	if err != nil {
		return nil, err
	}
	out := make([]kv.Row, len(keys))
	err = c.fanOut(ctx, "lookup", groups, func(ctx context.Context, g *keyGroup, lo, hi int) (int, error) {
		return splitting(lo, hi, func(lo, hi int) (int, error) {
			var res []*tierv1.LookupResult
			attempts, err := c.call(ctx, g.e, g.bucket, g.enc, func(ctx context.Context, tablet tierv1connect.TabletServiceClient, st *targetState, loc location) error {
				resp, err := tablet.Lookup(ctx, connect.NewRequest(&tierv1.LookupRequest{
					Target: st.id, Bucket: int32(g.bucket), LeaderEpoch: &loc.epoch, Keys: g.keys[lo:hi],
				}))
				if err == nil {
					res = resp.Msg.GetResults()
				}
				return err
			})
			if gone, gerr := c.partitionGone(ctx, g.e, g.enc, err); gone || gerr != nil {
				return attempts, gerr // a dropped partition holds no row
			}
			if err != nil {
				return attempts, err
			}
			if len(res) != hi-lo {
				return attempts, fmt.Errorf("tierclient: lookup answered %d results for %d keys", len(res), hi-lo)
			}
			for i, r := range res {
				if !r.GetFound() {
					continue
				}
				if out[g.idx[lo+i]], err = decodeValue(g.enc, r.GetValue()); err != nil {
					return attempts, err
				}
			}
			return attempts, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("tierclient: get from %v: %w", t, err)
	}
	return out, nil
}

// PrefixGet returns, for each prefix, every row whose bucket-key columns
// equal the prefix row's (a row of the table in which only the bucket-key
// and partition-key columns are read), in key order: Fluss's prefix
// lookup. The table's bucket key must be a leading part of its primary key
// without the partition keys. One prefix's rows come in one response, so
// a prefix holding more rows or bytes than a tablet server answers at once
// (10,000 rows; tablet.max_batch_bytes, 4 MiB by default) fails with
// BATCH_TOO_LARGE: this client has no prefix scan yet.
func (c *Client) PrefixGet(ctx context.Context, t Target, prefixes []kv.Row) ([][]kv.Row, error) {
	groups, err := c.groupKeys(ctx, "prefix get", t, prefixes, func(st *targetState, row kv.Row) ([]byte, int, error) {
		pt, err := c.prefixTable(st.table)
		if err != nil {
			return nil, 0, err
		}
		key, err := pt.EncodeKey(row)
		if err != nil {
			return nil, 0, err
		}
		bucket, err := st.table.Bucket(row)
		return key, bucket, err
	})
	if err != nil {
		return nil, err
	}
	out := make([][]kv.Row, len(prefixes))
	err = c.fanOut(ctx, "prefix lookup", groups, func(ctx context.Context, g *keyGroup, lo, hi int) (int, error) {
		return splitting(lo, hi, func(lo, hi int) (int, error) {
			var res []*tierv1.PrefixLookupResult
			attempts, err := c.call(ctx, g.e, g.bucket, g.enc, func(ctx context.Context, tablet tierv1connect.TabletServiceClient, st *targetState, loc location) error {
				resp, err := tablet.PrefixLookup(ctx, connect.NewRequest(&tierv1.PrefixLookupRequest{
					Target: st.id, Bucket: int32(g.bucket), LeaderEpoch: &loc.epoch, Prefixes: g.keys[lo:hi],
				}))
				if err == nil {
					res = resp.Msg.GetResults()
				}
				return err
			})
			if gone, gerr := c.partitionGone(ctx, g.e, g.enc, err); gone || gerr != nil {
				return attempts, gerr // a dropped partition holds no row
			}
			if err != nil {
				return attempts, err
			}
			if len(res) != hi-lo {
				return attempts, fmt.Errorf("tierclient: prefix lookup answered %d results for %d prefixes", len(res), hi-lo)
			}
			for i, r := range res {
				rows := make([]kv.Row, 0, len(r.GetRows()))
				for _, kvr := range r.GetRows() {
					row, err := decodeValue(g.enc, kvr.GetValue())
					if err != nil {
						return attempts, err
					}
					rows = append(rows, row)
				}
				out[g.idx[lo+i]] = rows
			}
			return attempts, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("tierclient: prefix get from %v: %w", t, err)
	}
	return out, nil
}

// prefixTable returns a table whose key bytes are t's bucket-key bytes (the
// compacted encoding of the bucket-key columns), for prefix lookups.
func (c *Client) prefixTable(t *kv.Table) (*kv.Table, error) {
	if pt, ok := c.prefixTables.Load(t); ok {
		return pt.(*kv.Table), nil
	}
	phys, bk := t.PhysicalKey(), t.BucketKey()
	if len(bk) > len(phys) || !slices.Equal(bk, phys[:len(bk)]) {
		return nil, fmt.Errorf("%w: the bucket key is not a leading part of the primary key (without partition keys)", ErrInvalidArgument)
	}
	s := t.Schema()
	ps := kv.TableSchema{SchemaID: s.SchemaID, Columns: s.Columns, Buckets: s.Buckets}
	for _, i := range bk {
		ps.PrimaryKey = append(ps.PrimaryKey, s.Columns[i].Name)
	}
	pt, err := kv.NewTable(ps)
	if err != nil {
		return nil, err
	}
	c.prefixTables.Store(t, pt)
	return pt, nil
}

// Scan calls fn with every row of t, bucket after bucket (partition after
// partition for a partitioned table named without a partition), in key
// order within a bucket. It pages through each bucket from its leader;
// each page is consistent, and a row that exists for the whole scan is
// seen exactly once, but the scan as a whole is not a snapshot. fn is
// called from the calling goroutine; its error stops the scan and is
// returned as it is.
func (c *Client) Scan(ctx context.Context, t Target, fn func(kv.Row) error) error {
	r, err := c.newRouter(ctx, t)
	if err != nil {
		return fmt.Errorf("tierclient: scan %v: %w", t, err)
	}
	entries := []*targetEntry{r.fixed}
	if r.perRow() {
		names, err := c.Partitions(ctx, t.Database, t.Table)
		if err != nil {
			return err
		}
		entries = entries[:0]
		for _, name := range names {
			p := t
			p.Partition = name
			e, err := c.entry(ctx, p)
			if err != nil {
				return fmt.Errorf("tierclient: scan %v: %w", t, err)
			}
			entries = append(entries, e)
		}
	}
	for _, e := range entries {
		// One version of the target for all its buckets: a refresh between
		// two (the table dropped and created again) fails the scan with
		// ErrTargetChanged instead of mixing the two tables' rows.
		enc := e.state.Load()
		for bucket := range enc.table.Buckets() {
			if err := c.scanBucket(ctx, e, enc, bucket, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Client) scanBucket(ctx context.Context, e *targetEntry, enc *targetState, bucket int, fn func(kv.Row) error) error {
	var after []byte
	for {
		var page *tierv1.ScanResponse
		attempts, err := c.call(ctx, e, bucket, enc, func(ctx context.Context, tablet tierv1connect.TabletServiceClient, st *targetState, loc location) error {
			resp, err := tablet.Scan(ctx, connect.NewRequest(&tierv1.ScanRequest{
				Target: st.id, Bucket: int32(bucket), LeaderEpoch: &loc.epoch, StartAfter: after, Limit: int32(c.opts.scanPageRows),
			}))
			if err == nil {
				page = resp.Msg
			}
			return err
		})
		if err != nil {
			return &BucketError{Op: "scan", Target: e.target, Bucket: bucket, Attempts: attempts, Err: err}
		}
		rows := page.GetRows()
		for _, kvr := range rows {
			row, err := decodeValue(enc, kvr.GetValue())
			if err != nil {
				return &BucketError{Op: "scan", Target: e.target, Bucket: bucket, Attempts: attempts, Err: err}
			}
			if err := fn(row); err != nil {
				return err
			}
		}
		if len(page.GetNextPageToken()) == 0 || len(rows) == 0 {
			return nil
		}
		after = rows[len(rows)-1].GetKey()
	}
}
