package bulktxn

import (
	"testing"
	"time"
)

// TestRecoverBehindTheRecordsClock: after a failover to a coordinator
// whose wall clock is behind the previous leader's (skew D), the recovered
// machine's time was the record's UpdatedMs (the old leader's clock), so
// every resend and retry it scheduled came D late: a replica that did not
// confirm the first fence was asked again only after D. Its own clock
// times them now; the record's stamps stay monotonic.
func TestRecoverBehindTheRecordsClock(t *testing.T) {
	m0, _, err := New(DefaultConfig(), validBegin())
	if err != nil {
		t.Fatal(err)
	}
	rec := m0.Record()
	skew := 10 * time.Minute
	rec.UpdatedMs = base.Add(skew).UnixMilli() // written by the old leader, clock ahead by 10 min
	now := base.Add(time.Minute)               // new leader's clock
	m, effs, err := Recover(DefaultConfig(), rec, Observed{RecordRev: 6, Registration: RegLoading, RegistrationRev: 6,
		Holders: placement(2, []string{"ts-1"}, 1), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, e := range effs {
		if _, ok := e.(SendFence); ok {
			sent++
		}
	}
	if sent == 0 {
		t.Fatalf("no fence sent: %v", effs)
	}
	// ts-1 did not confirm. Time passes on the new leader: 30 s, six
	// resend intervals.
	resent := 0
	for i := 1; i <= 30; i++ {
		effs, err := m.Step(Tick{Now: now.Add(time.Duration(i) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range effs {
			if _, ok := e.(SendFence); ok {
				resent++
			}
		}
	}
	if resent == 0 {
		t.Fatalf("no fence resend within 30 s of the new leader's clock (resend interval %s): the round stalls for the %s skew", DefaultConfig().ResendInterval, skew)
	}
	if got := m.Record().UpdatedMs; got < rec.UpdatedMs {
		t.Fatalf("record stamped %d, before its earlier stamp %d", got, rec.UpdatedMs)
	}
}
