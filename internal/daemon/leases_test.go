package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/tier/meta"
)

func TestParseLeases(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []clientv3.LeaseID
		err  string
	}{
		{"", nil, ""},
		{"694da247fdb76607\n", []clientv3.LeaseID{0x694da247fdb76607}, ""},
		{"0000000000000001\n694da247fdb76607\n", []clientv3.LeaseID{1, 0x694da247fdb76607}, ""},
		{"694da247fdb76607", nil, "line 1"},                     // cut short: no newline
		{"694DA247FDB76607\n", nil, "line 1"},                   // not lowercase
		{"694da247fdb7660\n", nil, "line 1"},                    // 15 digits
		{"0000000000000001\n\n", nil, "line 2"},                 // empty line
		{"0000000000000000\n", nil, "line 1"},                   // no lease
		{"ffffffffffffffff\n", nil, "line 1"},                   // negative as int64
		{"0000000000000001\nxyz4567890abcdef\n", nil, "line 2"}, // not hex
	} {
		got, err := parseLeases([]byte(tc.in))
		switch {
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("parseLeases(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseLeases(%q) = %v, %v; want an error about %s", tc.in, got, err, tc.err)
		}
	}
}

// TestLeftLeasesRevoked: leases granted through recording clients are in
// the file until revoked; the next start revokes the ones a killed run
// left (their keys go with them) and empties the file; a damaged file is
// reported, emptied and revokes nothing.
func TestLeftLeasesRevoked(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	m, err := meta.StartEmbedded(ctx, meta.EmbeddedConfig{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	client := func() *clientv3.Client {
		t.Helper()
		cli, err := m.Client(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	fileIDs := func() []clientv3.LeaseID {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, leasesFileName))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := parseLeases(data)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	alive := func(cli *clientv3.Client, id clientv3.LeaseID) bool {
		t.Helper()
		resp, err := cli.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return resp.TTL > 0
	}

	// A run: two clients of one ledger, three leases, one revoked.
	ledger := newLeaseLedger(dir, slog.New(slog.DiscardHandler))
	a, b, other := client(), client(), client()
	ledger.record(a)
	ledger.record(b)
	var ids []clientv3.LeaseID
	for _, cli := range []*clientv3.Client{a, b, b} {
		g, err := cli.Grant(ctx, 600)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, g.ID)
	}
	if _, err := a.Put(ctx, "/thaw/servers/ts-1", "x", clientv3.WithLease(ids[0])); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Revoke(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Grant(ctx, 600) // another process's: not recorded
	if err != nil {
		t.Fatal(err)
	}
	if got := fileIDs(); !slices.Equal(got, []clientv3.LeaseID{ids[0], ids[2]}) {
		t.Fatalf("file lists %v, want %v", got, []clientv3.LeaseID{ids[0], ids[2]})
	}

	// The run is "killed" (nothing revoked); the next start revokes.
	var logs testlog.Buffer
	revokeLeftLeases(ctx, other, dir, slog.New(slog.NewTextHandler(&logs, nil)))
	if alive(other, ids[0]) || alive(other, ids[2]) || !alive(other, foreign.ID) {
		t.Fatalf("after the revoke: leases %v alive %v %v, foreign alive %v", ids, alive(other, ids[0]), alive(other, ids[2]), alive(other, foreign.ID))
	}
	if resp, err := other.Get(ctx, "/thaw/servers/ts-1"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the killed run's registration: %v, %v", resp, err)
	}
	if got := fileIDs(); len(got) != 0 || !strings.Contains(logs.String(), "leases=2") {
		t.Fatalf("file lists %v after the revoke; log %s", got, logs.String())
	}
	revokeLeftLeases(ctx, other, dir, slog.New(slog.DiscardHandler)) // nothing left: nothing to do

	// etcd refusing a revoke does not stop the start: reported, and the
	// lease is left to expire.
	if err := writeLeases(filepath.Join(dir, leasesFileName), []clientv3.LeaseID{foreign.ID}); err != nil {
		t.Fatal(err)
	}
	dead := client()
	if err := dead.Close(); err != nil {
		t.Fatal(err)
	}
	var refused testlog.Buffer
	revokeLeftLeases(ctx, dead, dir, slog.New(slog.NewTextHandler(&refused, nil)))
	if !alive(other, foreign.ID) || !strings.Contains(refused.String(), "cannot revoke a lease the previous run left") {
		t.Fatalf("refused revoke: foreign alive %v, log %s", alive(other, foreign.ID), refused.String())
	}

	// A damaged file revokes nothing, not even the lease it names.
	if err := os.WriteFile(filepath.Join(dir, leasesFileName), fmt.Appendf(nil, "%016x\nbad\n", int64(foreign.ID)), 0o600); err != nil {
		t.Fatal(err)
	}
	var damaged testlog.Buffer
	revokeLeftLeases(ctx, other, dir, slog.New(slog.NewTextHandler(&damaged, nil)))
	if !alive(other, foreign.ID) || !strings.Contains(damaged.String(), "ignoring the leases file") {
		t.Fatalf("damaged file: foreign alive %v, log %s", alive(other, foreign.ID), damaged.String())
	}
}
