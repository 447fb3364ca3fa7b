package daemon

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPromoterListenFailsFirst: thaw promoter binds its API address (and
// reads its key pair and callers file) before it opens etcd and the tier,
// as every role does: an address in use fails at once, with the embedded
// tier never started (it was started and waited for first; behind an etcd
// that does not answer, the mistake was never reported).
func TestPromoterListenFailsFirst(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := promoterTestConfig(t)
	cfg.Listen = busy.Addr().String()
	d, err := StartPromoter(t.Context(), cfg, PromoterOptions{Embedded: smallEmbedded})
	if err == nil {
		d.Close()
		t.Fatal("StartPromoter on a listen address in use succeeded")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %v, want the address in use", err)
	}
	if _, serr := os.Stat(filepath.Join(cfg.DataDir, "tier", "etcd")); serr == nil {
		t.Fatalf("the embedded tier was started before the address in use was found: %v", err)
	}
}
