package cli

import (
	"strings"
	"testing"
)

// TestRefusedCommandsChangeNothing: a command refused for its input
// changes nothing. thaw table create created the database and then had the
// table refused (replication above 16, a name the coordinator refuses),
// leaving the database behind; thaw put --create-partitions created the
// partitions of its first rows and then refused a later row.
func TestRefusedCommandsChangeNothing(t *testing.T) {
	e, _ := startTestTier(t)
	srv := e.HostPort()
	for _, args := range [][]string{
		{"table", "create", "freshdb.items", "--column", "id BIGINT", "--primary-key", "id", "--replication", "17", "--server", srv},
		{"table", "create", "freshdb.it$ems", "--column", "id BIGINT", "--primary-key", "id", "--server", srv},
	} {
		if code, _, errOut := run(t, args...); code != 2 {
			t.Fatalf("thaw %v: exit %d, want 2 (usage): %s", args, code, errOut)
		}
	}
	code, out, errOut := run(t, "database", "list", "--server", srv)
	if code != 0 {
		t.Fatalf("database list: %d %s", code, errOut)
	}
	if strings.Contains(out, "freshdb") {
		t.Errorf("a refused table create left database freshdb behind:\n%s", out)
	}

	if code, _, errOut := run(t, "table", "create", "db.events", "--column", "dt STRING", "--column", "id BIGINT",
		"--primary-key", "dt,id", "--partition-key", "dt", "--server", srv); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	code, _, errOut = run(t, "put", "db.events", "--create-partitions", "--server", srv,
		`{"dt":"p20240101","id":1}`, `{"dt":"bad.value","id":2}`)
	if code == 0 || !strings.Contains(errOut, "bad.value") {
		t.Fatalf("put with an invalid partition value: exit %d: %s", code, errOut)
	}
	code, out, errOut = run(t, "partition", "list", "db.events", "--server", srv)
	if code != 0 {
		t.Fatalf("partition list: %s", errOut)
	}
	if strings.Contains(out, "p20240101") {
		t.Errorf("a refused put left partition p20240101 behind:\n%s", out)
	}
}

// TestPromoterClientTimeoutFlag: the promoter's client commands refuse a
// --timeout that is not positive as a usage error (exit 2), as the tier's
// do, instead of sending the request and failing on the deadline (exit 1).
func TestPromoterClientTimeoutFlag(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--timeout", "0", "--promoter", "127.0.0.1:1"},
		{"cancel", "p-0123456789abcdef", "--timeout", "-1s", "--promoter", "127.0.0.1:1"},
		{"promote", "db.t", "--timeout", "0", "--promoter", "127.0.0.1:1"},
		{"plan", "--policy", "p", "--timeout", "0", "--promoter", "127.0.0.1:1"},
	} {
		if code, _, errOut := run(t, args...); code != 2 || !strings.Contains(errOut, "--timeout must be positive") {
			t.Errorf("thaw %v: exit %d, want 2 (usage): %s", args, code, errOut)
		}
	}
}
