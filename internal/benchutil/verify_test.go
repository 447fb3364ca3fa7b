package benchutil

import (
	"math/rand/v2"
	"testing"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestVerifySampleAllRows: with sample >= rows VerifySample checks every
// row. It drew the row numbers with replacement, so about a third were
// never read although it reported min(sample, rows) rows read back equal:
// the wrong row here is one that draw never read.
func TestVerifySampleAllRows(t *testing.T) {
	ctx := t.Context()
	tier, _, stop, err := StartTier(ctx, "verify sample", t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c, err := tierclient.New(ctx, tier.HostPort())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := NewRowGen(RowGenConfig{Buckets: 2, KeyBytes: 8, ValueBytes: 20, Seed: 1})
	tg := tierclient.Target{Database: "vs", Table: "t"}
	if err := c.CreateDatabase(ctx, "vs"); err != nil {
		t.Fatal(err)
	}
	info, err := c.CreateTable(ctx, "vs", "t", g.Schema(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitServing(ctx, c, tg, info); err != nil {
		t.Fatal(err)
	}
	const rows = 200
	w, err := c.NewWriter(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	// The rows the old draw read (with replacement).
	rng := rand.New(rand.NewPCG(g.cfg.Seed, 0x5eed))
	read := map[int64]bool{}
	for range rows {
		read[rng.Int64N(rows)] = true
	}
	victim := int64(-1)
	row := make(kv.Row, 2)
	for i := range int64(rows) {
		g.Row(row, i)
		if !read[i] && victim < 0 {
			victim = i
			row[1] = "WRONG PAYLOAD"
		}
		if err := w.Write(ctx, row); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("VerifySample(sample=%d, rows=%d) reads %d distinct rows; row %d holds a wrong payload", rows, rows, len(read), victim)
	if err := VerifySample(ctx, c, tg, info, g, rows, rows); err == nil {
		t.Fatalf("VerifySample with sample == rows passed although row %d is wrong", victim)
	}
}
