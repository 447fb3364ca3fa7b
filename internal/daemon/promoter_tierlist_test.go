package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/internal/coordlist/coordlisttest"
	"github.com/thawdb/thaw/kv"
)

// TestPromoterTierAddressList: tier.address may list several coordinators
// ("a:7070,b:7070"), and the promoter hands the same string to its tier
// client and its bulk-load client. With a dead address first and the
// standby coordinator second, both clients reach the active coordinator.
func TestPromoterTierAddressList(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := promoterTestConfig(t)
	e := startTier(t, ctx, EmbeddedConfig{DataDir: filepath.Join(cfg.DataDir, "tier"), TabletServers: 1, Coordinators: 2})
	l, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	standby := "coord-1"
	if l.ID == standby {
		standby = "coord-2"
	}
	dead := coordlisttest.ClosedAddress(t)

	no := false
	cfg.Tier = PromoterTierConfig{Embedded: &no, Address: dead + ", " + e.CoordinatorAddress(standby)}
	cfg.Tier.Etcd.defaults()
	cfg.Tier.Etcd.Endpoints = e.EtcdEndpoints()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a list of coordinators in tier.address: %v", err)
	}
	pp, err := openPromoterParts(ctx, cfg, PromoterOptions{RunOptions: RunOptions{}.withDefaults()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pp.close(); err != nil {
			t.Error(err)
		}
	}()

	if err := pp.tier.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatalf("tier client: %v", err)
	}
	_, err = pp.tier.CreateTable(ctx, "shop", "items", kv.TableSchema{
		Columns:    []kv.Column{{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}}},
		PrimaryKey: []string{"id"},
		Buckets:    1,
	}, 1)
	if err != nil {
		t.Fatalf("tier client: %v", err)
	}
	// No load in progress: an answer of the active coordinator, not a
	// failure to reach one.
	if _, _, err := pp.bulk.GetInProgress(ctx, bulkload.Target{Database: "shop", Table: "items"}); !errors.Is(err, bulkload.ErrNotFound) {
		t.Fatalf("bulk-load client: %v, want ErrNotFound", err)
	}
}
