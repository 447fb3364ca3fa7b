package cli

import (
	"strings"
	"testing"
)

// TestPutCreatesNamedPartition: thaw put --partition P --create-partitions
// creates P when it does not exist, as it does for rows routed by their
// values (it answered NOT_FOUND, without the hint, and created nothing);
// a row of another partition refuses the put before anything is created.
func TestPutCreatesNamedPartition(t *testing.T) {
	e, _ := startTestTier(t)
	srv := e.HostPort()
	if code, _, errOut := run(t, "table", "create", "db.events", "--column", "dt STRING", "--column", "id BIGINT",
		"--primary-key", "dt,id", "--partition-key", "dt", "--server", srv); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	if code, _, errOut := run(t, "put", "db.events", "--create-partitions", "--server", srv, `{"dt":"p1","id":1}`); code != 0 {
		t.Fatalf("put routed by value: exit %d: %s", code, errOut)
	}
	if code, out, errOut := run(t, "put", "db.events", "--partition", "p2", "--create-partitions", "--server", srv, `{"dt":"p2","id":2}`); code != 0 {
		t.Fatalf("put --partition p2 --create-partitions: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "get", "db.events", "--partition", "p2", "--server", srv, `{"dt":"p2","id":2}`); code != 0 || !strings.Contains(out, "1 of 1 key found") {
		t.Fatalf("get the row put into p2: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut := run(t, "put", "db.events", "--partition", "p3", "--create-partitions", "--server", srv, `{"dt":"p4","id":3}`)
	if code == 0 || !strings.Contains(errOut, `belongs to partition "p4"`) {
		t.Fatalf("put of a p4 row with --partition p3: exit %d: %s", code, errOut)
	}
	_, out, _ := run(t, "partition", "list", "db.events", "--server", srv)
	if !strings.Contains(out, "p2") || strings.Contains(out, "p3") || strings.Contains(out, "p4") {
		t.Fatalf("partitions after the puts, want p1 and p2 only:\n%s", out)
	}
}
