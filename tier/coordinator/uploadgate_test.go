package coordinator

import (
	"context"
	"testing"
	"time"
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
	owner := new(int)
	// A freeze whose term has ended closes nothing: the runner's cleanup
	// that reopens may have run already.
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if err := g.closeAndDrain(ended, "t1", owner); err == nil {
		t.Fatal("closeAndDrain of an ended term returned nil")
	}
	if fail := g.enter("t1"); fail != nil {
		t.Fatalf("an ended term's freeze closed the transaction: %v", fail)
	}
	g.leave("t1")
	// The term ends while the freeze waits.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
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
