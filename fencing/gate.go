package fencing

import (
	"sync"
	"sync/atomic"
)

// Gate is the receiving side of fencing: it remembers the highest epoch it
// has admitted and rejects any lower one. The zero Gate is ready to use and
// admits any valid epoch; it is safe for concurrent use and does no I/O.
//
// Admit checks and records in one atomic step, but it does not order the
// caller's work that follows. Call it where writes are serialized (in the
// goroutine that owns the replica, or under the lock that applies the write)
// so that nothing admitted under a lower epoch lands after a higher one has
// been admitted.
//
// A Gate starts from nothing. A receiver that restarts should seed it before
// serving, by admitting the epoch of the current leader (CurrentLeader):
// every lower epoch belongs to a deposed leader.
type Gate struct {
	highest atomic.Int64
}

// Admit returns nil if epoch is at least the highest admitted so far,
// recording it if it is higher, and a *StaleEpochError (ErrStaleEpoch)
// otherwise. Epochs are positive: zero or a negative epoch is always stale.
func (g *Gate) Admit(epoch Epoch) error {
	if highest, ok := g.admit(epoch); !ok {
		return &StaleEpochError{Epoch: epoch, Highest: highest}
	}
	return nil
}

// Highest returns the highest epoch admitted, 0 if none.
func (g *Gate) Highest() Epoch { return Epoch(g.highest.Load()) }

func (g *Gate) admit(epoch Epoch) (highest Epoch, ok bool) {
	for {
		h := g.highest.Load()
		switch {
		case epoch <= 0 || int64(epoch) < h:
			return Epoch(h), false
		case int64(epoch) == h || g.highest.CompareAndSwap(h, int64(epoch)):
			return epoch, true
		}
	}
}

// Gates is a set of Gates keyed by scope, for a receiver that takes requests
// from more than one elected role (epochs of different elections are not
// comparable). Scopes are meant to be few and long-lived: a scope's Gate is
// never dropped, since forgetting it would forget the fence. The zero Gates
// is ready to use and safe for concurrent use.
type Gates struct {
	mu struct {
		sync.Mutex
		gates map[string]*Gate
	}
}

// Gate returns the Gate of scope, creating it on first use. Holding on to it
// saves the map look-up on a hot path.
func (g *Gates) Gate(scope string) *Gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	gate, ok := g.mu.gates[scope]
	if !ok {
		if g.mu.gates == nil {
			g.mu.gates = make(map[string]*Gate)
		}
		gate = &Gate{}
		g.mu.gates[scope] = gate
	}
	return gate
}

// Admit is Gate(scope).Admit(epoch), with the scope in the error.
func (g *Gates) Admit(scope string, epoch Epoch) error {
	if highest, ok := g.Gate(scope).admit(epoch); !ok {
		return &StaleEpochError{Scope: scope, Epoch: epoch, Highest: highest}
	}
	return nil
}
