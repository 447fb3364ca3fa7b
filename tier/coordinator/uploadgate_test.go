package coordinator

import (
	"context"
	"testing"
)

// A runner whose freeze closed a transaction to gateway writes and ended
// while a write was still in flight (its term over) reopens the
// transaction: new writes are taken again at once, not refused until a
// later Commit closes and reopens it, and the entry goes with the last
// write.
func TestUploadGatewayReopenWithWriteInFlight(t *testing.T) {
	g := &uploadGateway{txns: map[string]*txnWrites{}}
	if fail := g.enter("t1"); fail != nil {
		t.Fatal(fail)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the term ends while the freeze waits
	owner := new(int)
	if err := g.closeAndDrain(ctx, "t1", owner); err == nil {
		t.Fatal("closeAndDrain returned with a write in flight")
	}
	if fail := g.enter("t1"); fail == nil {
		t.Fatal("a write was taken while the freeze held the transaction")
	}
	g.reopen("t1", new(int)) // another runner's reopen changes nothing
	if fail := g.enter("t1"); fail == nil {
		t.Fatal("another owner's reopen lifted the close")
	}
	g.reopen("t1", owner)
	if fail := g.enter("t1"); fail != nil {
		t.Fatalf("after the owner's reopen: %v", fail)
	}
	g.leave("t1")
	g.leave("t1")
	if len(g.txns) != 0 {
		t.Fatalf("entries left after every write: %v", g.txns)
	}
	// A freeze after that waits for nothing.
	if err := g.closeAndDrain(t.Context(), "t1", owner); err != nil {
		t.Fatal(err)
	}
}
