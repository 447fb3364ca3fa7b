package cli

import (
	"strings"
	"testing"
)

// TestStatusIDRefusesPolicy: thaw status PROMOTION-ID --policy X is a usage
// error (it printed the promotion whatever its policy and exited 0: the
// flag selects the list only).
func TestStatusIDRefusesPolicy(t *testing.T) {
	code, _, errOut := run(t, "status", "p-0123456789abcdef", "--policy", "mine", "--promoter", "127.0.0.1:1")
	if code != 2 || !strings.Contains(errOut, "--policy") {
		t.Fatalf("thaw status ID --policy: exit %d, %s; want a usage error", code, errOut)
	}
}
