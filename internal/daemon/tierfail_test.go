package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestPromoterStopsWhenItsTierFails: a component of the promoter's
// embedded tier that fails on its own (a coordinator's or tablet server's
// Run returning an error: Embedded.fail) stops the promoter, as it stops
// thaw server, so that a supervisor restarts the process. The promoter
// went on with a failed tier for good (no coordinator in the process, or
// a dead tablet server under a /readyz that stayed 200).
func TestPromoterStopsWhenItsTierFails(t *testing.T) {
	cfg := promoterTestConfig(t)
	d, err := StartPromoter(t.Context(), cfg, PromoterOptions{Embedded: smallEmbedded})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	d.Tier().fail(errors.New("tablet server ts-1: simulated failure"))
	select {
	case <-d.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the embedded tier failed, and the promoter goes on")
	}
	if err := d.Err(); err == nil || !strings.Contains(err.Error(), "simulated failure") {
		t.Fatalf("the promoter stopped with %v, want the tier's failure", err)
	}
}
