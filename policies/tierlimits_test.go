package policies_test

import (
	"testing"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestLimitsAreTheTiers: a policy's bucket and replication limits are the
// tier's, so that a policy that loads (and passes --check) can create its
// table.
func TestLimitsAreTheTiers(t *testing.T) {
	if policies.MaxBuckets != kv.MaxBuckets || policies.MaxReplicationFactor != tierpb.MaxReplicationFactor {
		t.Fatalf("policies allow %d buckets and replication %d; the tier %d and %d",
			policies.MaxBuckets, policies.MaxReplicationFactor, kv.MaxBuckets, tierpb.MaxReplicationFactor)
	}
}
