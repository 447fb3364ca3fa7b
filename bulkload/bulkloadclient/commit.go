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

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
)

// CheckCoverage checks that results cover every bucket of bc exactly once,
// each with the snapshot id Begin froze for it and that snapshot's
// _METADATA path (results of another transaction, whose snapshot ids may
// be the same, name other paths). The error, wrapping
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
		if count[r.Bucket] != 1 {
			continue
		}
		if id := bc.snapshotIDs[r.Bucket]; r.SnapshotID != id {
			problems = append(problems, fmt.Sprintf("bucket %d has snapshot id %d, want %d", r.Bucket, r.SnapshotID, id))
		} else if want := bc.SnapshotTarget().MetadataPath(r.Bucket, id); r.MetadataPath != want {
			problems = append(problems, fmt.Sprintf("bucket %d has _METADATA %s, want %s (results of another transaction?)", r.Bucket, r.MetadataPath, want))
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
// path, and commits the transaction. It repeats a manifest write that
// failed for a reason that may pass (objstore.IsTransient: the store
// unreachable, throttling, a server error, an interrupted upload), and the
// same Commit while its outcome is retriable or unknown, every
// CommitRetryInterval, resolving an unknown outcome through Status, until
// awaitBudget is spent (every step, a manifest write, a Commit call or a
// Status, ends with it too: Commit returns within the budget and one
// CommitRetryInterval, whatever ctx's deadline); it never begins anything
// new. Any other failure of
// the manifest write (refused permission, a missing bucket, a full store,
// an invalid key, an integrity failure, one objstore cannot classify) ends
// Commit at once with an error that names the manifest path and is not
// retriable, before the tier is asked anything: the transaction stays
// BEGUN. It returns the COMMITTED status, or the last error: a budget spent
// on either step leaves an error for which IsRetriable reports true, and
// the transaction as it was (a later Commit with the same context and
// results picks up where this one stopped).
func (c *Client) Commit(ctx context.Context, bc *BuildContext, results []snapshotbuild.BucketResult, awaitBudget time.Duration) (bulkload.Status, error) {
	if bc == nil {
		return bulkload.Status{}, errNoContext
	}
	manifest, err := EncodeManifest(bc, results)
	if err != nil {
		return bulkload.Status{}, err
	}
	deadline := time.Now().Add(awaitBudget)
	if err := c.writeManifest(ctx, bc, manifest, deadline, awaitBudget); err != nil {
		return bulkload.Status{}, err
	}
	sum := sha256.Sum256(manifest)
	req := &tierv1.CommitBulkLoadRequest{
		Handle: handleProto(bc.handle), ManifestPath: bc.manifestPath,
		ManifestLength: int64(len(manifest)), ManifestSha256: hex.EncodeToString(sum[:]),
	}
	op := "commit " + bc.handle.TxnID
	for attempt := 1; ; attempt++ {
		// The coordinator answers a Commit once it is decided (validation
		// reads every data file): each call ends with the budget, an
		// outcome unknown, not the caller's context's error.
		actx, acancel := stepContext(ctx, deadline)
		resp, err := call(actx, c, change, req, tierv1connect.BulkLoadServiceClient.Commit)
		budgetSpent := err != nil && actx.Err() != nil && ctx.Err() == nil
		acancel()
		if budgetSpent {
			err = fmt.Errorf("bulkloadclient: %s: %w: no answer within the await budget (the coordinator may still be validating or installing it)", op, bulkload.ErrUnavailable)
		} else if err == nil {
			st := statusFromProto(resp.GetStatus())
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
		// aborted) meanwhile. (Status waits for a coordinator that is
		// recovering, as during the failover that made the outcome unknown:
		// bounded by the budget too.)
		sctx, scancel := stepContext(ctx, deadline)
		st, serr := c.Status(sctx, bc.handle)
		scancel()
		if serr == nil {
			switch st.State {
			case bulkload.Committed:
				return st, nil
			case bulkload.Aborted:
				return st, abortedErr(st)
			}
		}
		if err := c.pause(ctx, op, "commit", attempt, deadline, awaitBudget, err); err != nil {
			return bulkload.Status{}, err
		}
	}
}

// stepContext bounds one step of Commit (a call, a Status, a manifest
// write) by the await budget's deadline, or by CommitRetryInterval when
// less of the budget is left.
func stepContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	until := deadline
	if time.Until(until) < CommitRetryInterval {
		until = time.Now().Add(CommitRetryInterval)
	}
	return context.WithDeadline(ctx, until)
}

// pause waits CommitRetryInterval before attempt+1 of step after err, or
// returns the error to end with: err, annotated, when the budget cannot
// hold another interval; ctx's error when it ends first (not retriable,
// like any call ended by its context: err is only quoted).
func (c *Client) pause(ctx context.Context, op, step string, attempt int, deadline time.Time, budget time.Duration, err error) error {
	if time.Until(deadline) < CommitRetryInterval {
		return fmt.Errorf("%w (await budget %v spent after %d attempts)", err, budget, attempt)
	}
	c.log.Debug("bulk load "+step+": retrying", "op", op, "attempt", attempt, "err", err)
	select {
	case <-ctx.Done():
		return fmt.Errorf("bulkloadclient: %s: %w (last error: %v)", op, ctx.Err(), err)
	case <-time.After(CommitRetryInterval):
		return nil
	}
}

// writeManifest writes manifest at bc's manifest path, write-if-absent,
// repeating a write that failed for a reason that may pass until deadline.
func (c *Client) writeManifest(ctx context.Context, bc *BuildContext, manifest []byte, deadline time.Time, budget time.Duration) error {
	var store interface {
		Key(uri string) (string, error)
		PutIfAbsent(ctx context.Context, key string, src objstore.Source) (objstore.Object, error)
	}
	switch {
	case c.store != nil:
		store = c.store
	case c.scoped:
		store = c.ScopedStore(bc)
	default:
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
	op := "write manifest " + bc.manifestPath
	for attempt := 1; ; attempt++ {
		pctx, pcancel := stepContext(ctx, deadline)
		_, err := store.PutIfAbsent(pctx, key, objstore.BytesSource(manifest))
		budgetSpent := err != nil && pctx.Err() != nil && ctx.Err() == nil
		pcancel()
		if err == nil || (c.store == nil && c.scoped && errors.Is(err, ErrNotBegun)) {
			// Through the gateway, a transaction that is no longer BEGUN
			// takes no manifest: an earlier Commit froze it (or the
			// transaction ended); the Commit call reports which.
			return nil
		}
		if budgetSpent {
			err = fmt.Errorf("bulkloadclient: %s: %w: not written within the await budget (%v)", op, bulkload.ErrUnavailable, err)
		} else {
			err = manifestErr(ctx, op, err)
		}
		if !IsRetriable(err) {
			return err
		}
		if err := c.pause(ctx, op, "manifest write", attempt, deadline, budget, err); err != nil {
			return err
		}
	}
}

// manifestErr classifies a failed manifest write (op names the manifest
// path). A different manifest at the path is ErrManifestConflict; a
// failure that objstore.IsTransient calls transient may pass, and
// repeating the write is safe, so it wraps bulkload.ErrUnavailable;
// anything else is final: the end of ctx, and store errors that repeating
// cannot cure (objstore's permanent classes: permission, a missing bucket,
// no space, an invalid request or key, an integrity failure) or that
// objstore cannot classify.
func manifestErr(ctx context.Context, op string, err error) error {
	switch {
	case ctx.Err() != nil: // (err only quoted: it may say it is retriable)
		return fmt.Errorf("bulkloadclient: %s: %w (%v)", op, ctx.Err(), err)
	case errors.Is(err, objstore.ErrConflict):
		return fmt.Errorf("bulkloadclient: %s: %w: %w", op, bulkload.ErrManifestConflict, err)
	case objstore.IsTransient(err):
		return fmt.Errorf("bulkloadclient: %s: %w: %w", op, bulkload.ErrUnavailable, err)
	default:
		return fmt.Errorf("bulkloadclient: %s: %w", op, err)
	}
}
