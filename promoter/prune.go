package promoter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/periodic"
)

// DefaultLedgerRetention is how long finished promotion records stay in the
// ledger by default (Config.LedgerRetention).
const DefaultLedgerRetention = 30 * 24 * time.Hour

// ledgerPruneInterval is how often Run prunes the ledger (and once at its
// start).
const ledgerPruneInterval = time.Hour

// PruneLedger deletes the finished promotion records that are older than
// Config.LedgerRetention (by UpdatedAt) and that no plan decides by any
// more, and returns how many it deleted. Of each promotion target (catalog,
// lake table, tier table and partition) it keeps, whatever their age:
//
//   - every record not finished (planned to committing);
//   - the newest committed record: it is what makes a plan skip the target
//     ("already promoted", or "stale" when the lake moved on), also after
//     the tier partition was dropped;
//   - when the target has no committed record, the newest failed record
//     that is not retriable: it keeps a plan from trying that lake snapshot
//     again until someone requests it.
//
// Every other finished record (aborted attempts, retriable failures,
// failures and commits superseded by a newer commit) changes no plan's
// action, so deleting it changes nothing but the history that `thaw
// status` lists. A record is deleted only while its key is not
// running (compare-and-swap on its revision, fenced like every ledger
// write); a record that changed since it was listed, or whose key is busy,
// is left for the next pass, and so is a record whose key waits in the
// queue (a request answered with the attempt after it). When the ledger
// holds a record this promoter
// cannot read, nothing is deleted (it might be the one a target keeps).
// With a negative LedgerRetention it deletes nothing.
func (p *Promoter) PruneLedger(ctx context.Context) (int, error) {
	if p.cfg.LedgerRetention < 0 {
		return 0, nil
	}
	// No Request between its plan and its queueing meanwhile (pruneMu).
	p.pruneMu.Lock()
	defer p.pruneMu.Unlock()
	recs, err := p.cfg.Ledger.List(ctx)
	if err != nil {
		if errors.Is(err, ErrUnreadable) {
			p.logUnreadable(err)
		}
		return 0, fmt.Errorf("promoter: prune ledger: %w", err)
	}
	n := 0
	for _, r := range prunable(recs, p.now().Add(-p.cfg.LedgerRetention)) {
		k := p.recordKey(r)
		// Not while the key runs or waits in the queue: a request of the
		// target was answered with the attempt after this record's, which
		// its waiter (thaw promote --wait) waits for; without the record
		// the run would be attempt 1, and the waiter would wait for ever.
		if !p.q.tryAcquireIdle(k) {
			continue
		}
		err := p.cfg.Ledger.Delete(ctx, r.ID, r.Revision)
		p.q.done(k)
		switch {
		case err == nil:
			n++
			p.m.pruned.Inc()
		case errors.Is(err, ErrConflict), errors.Is(err, ErrNotFound):
			// Written or deleted since the List: the next pass decides.
		case fencing.IsFenced(err):
			p.halt(err)
			return n, err
		default:
			return n, fmt.Errorf("promoter: prune ledger: %w", err)
		}
	}
	if n > 0 {
		p.log.Info("pruned promotion records", "records", n, "retention", p.cfg.LedgerRetention)
	}
	return n, nil
}

// pruneLoop prunes the ledger at once and then every ledgerPruneInterval.
func (p *Promoter) pruneLoop(ctx context.Context) {
	periodic.Every(ctx, 0, ledgerPruneInterval, func() {
		if _, err := p.PruneLedger(ctx); err != nil && ctx.Err() == nil && !halts(err) {
			p.log.Warn("prune ledger", "err", err)
		}
	})
}

// recordKey is the queue key whose holder may write r: its policy (by the
// lake table, as planned; the record's own policy name when no configured
// policy promotes that table) and its partition.
func (p *Promoter) recordKey(r Record) Key {
	k := Key{Policy: r.Policy, Partition: r.Partition}
	if pol := p.byLake[lakeKey(r.Catalog, r.LakeTable)]; pol != nil {
		k.Policy = pol.Name()
	}
	return k
}

// prunable returns the records of recs that PruneLedger deletes: finished
// before cutoff and not kept by their target (see PruneLedger).
func prunable(recs []Record, cutoff time.Time) []Record {
	type target struct{ catalog, lakeTable, database, table, partition string }
	byTarget := map[target][]Record{}
	for _, r := range recs {
		t := target{r.Catalog, r.LakeTable, r.Database, r.Table, r.Partition}
		byTarget[t] = append(byTarget[t], r)
	}
	var out []Record
	for _, rs := range byTarget {
		sortNewestFirst(rs)
		keep := slices.IndexFunc(rs, func(r Record) bool { return r.Phase == PhaseCommitted })
		if keep < 0 {
			keep = slices.IndexFunc(rs, func(r Record) bool { return r.Phase == PhaseFailed && !r.Retriable })
		}
		for i, r := range rs {
			if i != keep && r.Phase.Terminal() && r.UpdatedAt.Before(cutoff) {
				out = append(out, r)
			}
		}
	}
	// Oldest first: a pass cut short has deleted the oldest.
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(a.UpdatedAt.Compare(b.UpdatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out
}
