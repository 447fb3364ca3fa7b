package fencing

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// GuardedTxn runs the transaction If(cmps).Then(then).Else(els) only while
// leaderKey still has epoch as its create revision, that is, only while the
// term that epoch names is current. The check and the writes are one etcd
// transaction, so a deposed leader can change nothing.
//
// The caller's transaction is nested inside the guard:
//
//	If(CreateRevision(leaderKey) == epoch)
//	Then(Txn(If(cmps).Then(then).Else(els)))
//	Else(Get(leaderKey))
//
// which keeps the two kinds of failure apart, and leaves the caller's own
// transaction within etcd's per-transaction operation limit unchanged:
//
//   - guard failed: nothing ran; the error wraps ErrNotLeader and the
//     response is nil;
//   - guard held, cmps failed: els ran; the error wraps
//     ErrPreconditionFailed and the response is the caller's transaction's
//     (Succeeded false, one response per els op), so the caller can use what
//     els read, and retry;
//   - guard held, cmps held: then ran; the error is nil and the response is
//     the caller's transaction's (Succeeded true, one response per then op).
//
// The returned response carries the outer transaction's header (revision).
// Any other error is etcd's or the context's: the outcome is then unknown
// and the caller must re-read before deciding anything.
func GuardedTxn(ctx context.Context, kv clientv3.KV, leaderKey string, epoch Epoch, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	if epoch <= 0 || leaderKey == "" {
		// etcd reports an absent key's create revision as 0: epoch 0 (none)
		// would pass the guard while no one leads.
		return nil, fmt.Errorf("%w: guarded txn on %q at epoch %d: no term", ErrNotLeader, leaderKey, epoch)
	}
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(leaderKey), "=", int64(epoch))).
		Then(clientv3.OpTxn(cmps, then, els)).
		Else(clientv3.OpGet(leaderKey)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("fencing: guarded txn on %s at epoch %d: %w", leaderKey, epoch, err)
	}
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			return nil, fmt.Errorf("%w: epoch %d, but leader key %s now has create revision %d", ErrNotLeader, epoch, leaderKey, kvs[0].CreateRevision)
		}
		return nil, fmt.Errorf("%w: epoch %d, but leader key %s is gone", ErrNotLeader, epoch, leaderKey)
	}
	inner := (*clientv3.TxnResponse)(resp.Responses[0].GetResponseTxn())
	inner.Header = resp.Header
	if !inner.Succeeded {
		return inner, fmt.Errorf("%w: guarded txn on %s at epoch %d", ErrPreconditionFailed, leaderKey, epoch)
	}
	return inner, nil
}
