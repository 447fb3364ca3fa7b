package promoter

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
)

// TestEstimateBuild: the estimate is the lake bytes at 32 MiB/s for every
// size, where bytes times a second used to overflow from about 8.6 GiB (a
// 10 GiB partition got -3m49.756s), and saturates at the largest Duration.
func TestEstimateBuild(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		want  time.Duration
	}{
		{0, 0},
		{-1, 0},
		{1, 0}, // 30 ns, rounded to the millisecond
		{32 << 20, time.Second},
		{48 << 20, 1500 * time.Millisecond},
		{10 << 30, 320 * time.Second},
		{20 << 30, 640 * time.Second},
		{1 << 50, 33554432 * time.Second},
		{math.MaxInt64, math.MaxInt64},
	} {
		if got := estimateBuild(tc.bytes); got != tc.want {
			t.Errorf("estimateBuild(%d) = %v, want %v", tc.bytes, got, tc.want)
		}
	}
	// And in a plan item.
	p := &Promoter{}
	ps := &planState{plan: &Plan{Policy: "p", Catalog: "default", LakeTable: "lake.events", Database: "lake", Table: "events"},
		records: map[string][]Record{}}
	const size = 10 << 30
	g := &group{name: "2024-01-01", parts: []lake.PartitionStats{{TotalBytes: size, RecordCount: 1}}}
	d := policies.Decision{Candidate: policies.Candidate{Name: g.name, Bytes: size, Rows: 1}, Reason: "x"}
	if it := p.planItem(context.Background(), ps, g, d, item{}); it.EstimatedBuild != 320*time.Second {
		t.Fatalf("a 10 GiB item's EstimatedBuild = %v, want 5m20s", it.EstimatedBuild)
	}
}
