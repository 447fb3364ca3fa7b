package bulkloadclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
)

// CheckCoverage checks that results cover every bucket of bc exactly once,
// each with the snapshot id Begin froze for it. The error, wrapping
// bulkload.ErrInvalidRequest, names every missing, duplicate, out-of-range
// or mismatched bucket.
func CheckCoverage(bc *BuildContext, results []snapshotbuild.BucketResult) error {
	if bc == nil {
		return errNoContext
	}
	count := make([]int, bc.buckets)
	var problems []string
	var outside []int
	for _, r := range results {
		if r.Bucket < 0 || r.Bucket >= bc.buckets {
			outside = append(outside, r.Bucket)
			continue
		}
		count[r.Bucket]++
		if count[r.Bucket] == 1 && r.SnapshotID != bc.snapshotIDs[r.Bucket] {
			problems = append(problems, fmt.Sprintf("bucket %d has snapshot id %d, want %d", r.Bucket, r.SnapshotID, bc.snapshotIDs[r.Bucket]))
		}
	}
	var missing, dup []int
	for b, n := range count {
		switch {
		case n == 0:
			missing = append(missing, b)
		case n > 1:
			dup = append(dup, b)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, "missing buckets "+ints(missing))
	}
	if len(dup) > 0 {
		problems = append(problems, "duplicate buckets "+ints(dup))
	}
	if len(outside) > 0 {
		problems = append(problems, fmt.Sprintf("buckets %s out of range [0,%d)", ints(outside), bc.buckets))
	}
	if len(problems) > 0 {
		return fmt.Errorf("bulkloadclient: %w: results of %d buckets do not cover the %d buckets of %s exactly once: %s",
			bulkload.ErrInvalidRequest, len(results), bc.buckets, bc.handle.Target, strings.Join(problems, "; "))
	}
	return nil
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// EncodeManifest returns the canonical manifest of results (which must
// pass CheckCoverage), buckets in ascending order.
func EncodeManifest(bc *BuildContext, results []snapshotbuild.BucketResult) ([]byte, error) {
	if err := CheckCoverage(bc, results); err != nil {
		return nil, err
	}
	sorted := slices.Clone(results)
	slices.SortFunc(sorted, func(a, b snapshotbuild.BucketResult) int { return a.Bucket - b.Bucket })
	m := &snapshot.Manifest{BulkLoadID: bc.handle.TxnID}
	for _, r := range sorted {
		m.Buckets = append(m.Buckets, snapshot.ManifestBucket{BucketID: int32(r.Bucket), Metadata: r.MetadataRef()})
	}
	b, err := snapshot.EncodeManifest(m)
	if err != nil {
		return nil, fmt.Errorf("bulkloadclient: %w: %w", bulkload.ErrInvalidRequest, err)
	}
	return b, nil
}

// Commit checks that results cover every bucket exactly once, writes the
// manifest (write-if-absent: an identical existing manifest is adopted, a
// different one is bulkload.ErrManifestConflict) at the frozen manifest
// path, and commits the transaction. It repeats the same Commit every
// CommitRetryInterval while the outcome is retriable or unknown, resolving
// an unknown outcome through Status, until awaitBudget is spent; it never
// begins anything new. It returns the COMMITTED status, or the last error.
func (c *Client) Commit(ctx context.Context, bc *BuildContext, results []snapshotbuild.BucketResult, awaitBudget time.Duration) (bulkload.Status, error) {
	if bc == nil {
		return bulkload.Status{}, errNoContext
	}
	manifest, err := EncodeManifest(bc, results)
	if err != nil {
		return bulkload.Status{}, err
	}
	if err := c.writeManifest(ctx, bc, manifest); err != nil {
		return bulkload.Status{}, err
	}
	sum := sha256.Sum256(manifest)
	req := &tierv1.CommitBulkLoadRequest{
		Handle: handleProto(bc.handle), ManifestPath: bc.manifestPath,
		ManifestLength: int64(len(manifest)), ManifestSha256: hex.EncodeToString(sum[:]),
	}
	op := "commit " + bc.handle.TxnID
	deadline := time.Now().Add(awaitBudget)
	for attempt := 1; ; attempt++ {
		resp, err := c.svc.Commit(ctx, connect.NewRequest(req))
		if err == nil {
			st := statusFromProto(resp.Msg.GetStatus())
			if st.State == bulkload.Committed {
				return st, nil
			}
			if st.State == bulkload.Aborted {
				return st, abortedErr(st)
			}
			// COMMITTING: the server keeps driving it; ask again.
			err = fmt.Errorf("bulkloadclient: %s: %w: transaction is %s", op, bulkload.ErrUnavailable, st.State)
		} else {
			err = mapErr(ctx, op, err)
		}
		if !IsRetriable(err) {
			return bulkload.Status{}, err
		}
		// The outcome is unknown: the transaction may have committed (or
		// aborted) meanwhile.
		if st, serr := c.Status(ctx, bc.handle); serr == nil {
			switch st.State {
			case bulkload.Committed:
				return st, nil
			case bulkload.Aborted:
				return st, abortedErr(st)
			}
		}
		if time.Until(deadline) < CommitRetryInterval {
			return bulkload.Status{}, fmt.Errorf("%w (await budget %v spent after %d attempts)", err, awaitBudget, attempt)
		}
		c.log.Debug("bulk load commit: retrying", "txn_id", bc.handle.TxnID, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return bulkload.Status{}, fmt.Errorf("bulkloadclient: %s: %w (last error: %w)", op, ctx.Err(), err)
		case <-time.After(CommitRetryInterval):
		}
	}
}

// writeManifest writes manifest at bc's manifest path, write-if-absent.
func (c *Client) writeManifest(ctx context.Context, bc *BuildContext, manifest []byte) error {
	store := c.store
	if store == nil {
		s, err := objstore.Open(ctx, bc.remoteDataDir)
		if err != nil {
			return fmt.Errorf("bulkloadclient: open remote data dir %s: %w", bc.remoteDataDir, err)
		}
		defer s.Close()
		store = s
	}
	key, err := store.Key(bc.manifestPath)
	if err != nil {
		return fmt.Errorf("bulkloadclient: manifest path: %w", err)
	}
	if _, err := store.PutIfAbsent(ctx, key, objstore.BytesSource(manifest)); err != nil {
		if errors.Is(err, objstore.ErrConflict) {
			return fmt.Errorf("bulkloadclient: write manifest %s: %w: %w", bc.manifestPath, bulkload.ErrManifestConflict, err)
		}
		return fmt.Errorf("bulkloadclient: write manifest %s: %w", bc.manifestPath, err)
	}
	return nil
}
