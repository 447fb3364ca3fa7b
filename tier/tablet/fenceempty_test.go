package tablet_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/tablet"
)

// flakyProvider wraps a provider; once armed, the n-th Offsets call after
// arming fails (a transient error of the log service).
type flakyProvider struct {
	changelog.Provider
	armed  atomic.Bool
	calls  atomic.Int64
	failAt int64
}

func (p *flakyProvider) Open(ctx context.Context, id changelog.BucketLogID) (changelog.Log, error) {
	l, err := p.Provider.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	return &flakyLog{Log: l, p: p}, nil
}

type flakyLog struct {
	changelog.Log
	p *flakyProvider
}

func (l *flakyLog) Offsets(ctx context.Context) (int64, int64, error) {
	if l.p.armed.Load() && l.p.calls.Add(1) == l.p.failAt {
		return 0, 0, errors.New("transient: log service unavailable")
	}
	return l.Log.Offsets(ctx)
}

// TestFenceEmptyDespiteTransientLogError: an empty replica whose
// changelog offsets cannot be read for a moment during a fence is never
// confirmed READY, LOADING and not empty (the coordinator would abort the
// Begin with TARGET_NOT_EMPTY): a failed read fails the answer (the
// coordinator resends), and the confirmation carries the emptiness read
// right after the catch-up, not a second best-effort read.
func TestFenceEmptyDespiteTransientLogError(t *testing.T) {
	for failAt := int64(1); failAt <= 4; failAt++ {
		c := newCluster(t)
		fp := &flakyProvider{Provider: c.logs, failAt: failAt}
		c.deps = func(d *tablet.Deps) { d.Changelog = fp }
		ts := c.startServer("ts-1")
		tb := c.createTable("t", []string{"ts-1"})
		waitReady(t, ts, tb, 0, leader, 1)
		fp.armed.Store(true)
		var r *tierv1.ReplicaStatus
		for try := 0; r == nil; try++ {
			resp, err := ts.client.SetDataState(t.Context(), connect.NewRequest(&tierv1.SetDataStateRequest{
				CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id, DataState: tierv1.DataState_DATA_STATE_LOADING,
				BulkLoadId: "bulk-1", StateRevision: 1 << 40,
			}))
			switch {
			case err == nil:
				r = resp.Msg.Replicas[0]
			case try == 3:
				t.Fatalf("failing Offsets call %d: fence still fails after %d resends: %v", failAt, try, err)
			}
		}
		if r.State != tierv1.ReplicaState_REPLICA_STATE_READY || r.DataState != tierv1.DataState_DATA_STATE_LOADING || r.BulkLoadId != "bulk-1" || !r.Empty {
			t.Fatalf("failing Offsets call %d: the empty replica is confirmed as %v", failAt, r)
		}
	}
}
