package promoterhttp

import (
	"math"
	"testing"
	"time"

	"github.com/thawdb/thaw/promoter"
)

// TestPlanTotalsSaturate: a plan's total estimate adds its promoted items'
// estimates and stays at the largest Duration instead of wrapping negative.
func TestPlanTotalsSaturate(t *testing.T) {
	p := &promoter.Plan{Items: []promoter.PlanItem{
		{Action: promoter.ActionPromote, EstimatedBuild: time.Minute},
		{Action: promoter.ActionSkip, EstimatedBuild: time.Hour},
		{Action: promoter.ActionPromote, EstimatedBuild: 2 * time.Minute},
	}}
	if got := PlanOf(p).EstimatedBuild; got != Duration(3*time.Minute) {
		t.Fatalf("total %v, want 3m0s", time.Duration(got))
	}
	p.Items = append(p.Items, promoter.PlanItem{Action: promoter.ActionPromote, EstimatedBuild: math.MaxInt64},
		promoter.PlanItem{Action: promoter.ActionPromote, EstimatedBuild: math.MaxInt64})
	if got := PlanOf(p).EstimatedBuild; got != math.MaxInt64 {
		t.Fatalf("total %v, want the largest Duration", time.Duration(got))
	}
}
