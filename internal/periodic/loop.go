// Package periodic runs background passes: a function at a first delay and
// then at an interval, until a context ends. The tablet servers' snapshot
// and changelog sweeps, the coordinator's cleaning of dropped data and the
// promoter's reconcile and ledger prune all run this way.
package periodic

import (
	"context"
	"time"
)

// Every calls fn after first, then again interval after each call
// returns (a slow pass delays the next, never stacks), until ctx is done.
// It returns when ctx is done; fn itself should watch ctx.
func Every(ctx context.Context, first, interval time.Duration, fn func()) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
		t.Reset(interval)
	}
}
