package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestQuickstartPolicyIsTheExample: the policy the quickstart applies is
// examples/policies/quickstart.yaml, byte for byte.
func TestQuickstartPolicyIsTheExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != quickstartPolicy {
		t.Fatalf("examples/policies/quickstart.yaml and quickstartPolicy differ:\nfile:\n%s\nconst:\n%s", b, quickstartPolicy)
	}
}

// TestQuickstart runs `thaw quickstart` on a small sample and checks what
// it claims against the lake and the tier it leaves behind: the promoted
// partitions are exactly the window's three newest days, each holds as many
// rows as the lake has distinct keys in that day, and the verification
// looked every sampled row up.
func TestQuickstart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qs")
	code, out, errOut := run(t, "quickstart", "--dir", dir, "--rows", "600", "--verify", "40")
	if code != 0 {
		t.Fatalf("quickstart exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Log(out)
	for _, want := range []string{"working in " + dir, "lake       created lake.events", "over 7 day partitions",
		"tier       started the embedded tier", "promoter   started the promoter", "plan       3 partitions to promote",
		"verify     40 of 40 sampled lake rows found in the tier", "outside the window) is absent from the tier", "done in "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	promoted := map[string]int64{}
	for _, m := range regexp.MustCompile(`(?m)^promoted   quickstart\.events/(\S+): (\d+) rows(?: \(\d+ read, \d+ duplicate keys dropped\))?, 4 buckets`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		promoted[m[1]] = n
	}
	want := []string{"2024-01-05", "2024-01-06", "2024-01-07"}
	if got := slices.Sorted(mapKeys(promoted)); !slices.Equal(got, want) {
		t.Fatalf("promoted partitions %v, want %v", got, want)
	}

	// The lake's distinct (id, day) keys per day, read independently.
	l, err := lake.Open(t.Context(), lake.Config{URI: filepath.Join(dir, "lake", "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "lake", "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, batches, err := l.Scan(t.Context(), "lake.events", lake.ScanOptions{Columns: []string{"id", "event_ts"}})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]map[int64]bool{}
	for rec, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		ids, ts := rec.Column(0).(*array.Int64), rec.Column(1).(*array.Timestamp)
		for i := range int(rec.NumRows()) {
			day := time.UnixMicro(int64(ts.Value(i))).UTC().Format(time.DateOnly)
			if keys[day] == nil {
				keys[day] = map[int64]bool{}
			}
			keys[day][ids.Value(i)] = true
		}
		rec.Release()
	}

	// The tier the quickstart left in {dir}/tier.
	e, err := daemon.StartEmbedded(t.Context(), daemon.EmbeddedConfig{DataDir: filepath.Join(dir, "tier"), TabletServers: 1, EtcdUnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	waitReady(t, e)
	tc, err := tierclient.New(t.Context(), e.Address(), tierclient.WithHTTPClient(e.HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	parts, err := tc.Partitions(t.Context(), "quickstart", "events")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(parts); !slices.Equal(parts, want) {
		t.Fatalf("tier partitions %v, want %v", parts, want)
	}
	for _, p := range want {
		n := 0
		if err := scanUntilReady(t, tc, p, &n); err != nil {
			t.Fatal(err)
		}
		if n != len(keys[p]) || n == 0 {
			t.Errorf("partition %s: %d tier rows, the lake has %d keys", p, n, len(keys[p]))
		}
		if promoted[p] != int64(n) {
			t.Errorf("partition %s: quickstart claims %d rows promoted, the tier holds %d", p, promoted[p], n)
		}
	}

	// The config it wrote for the daemon loads.
	cfg, err := daemon.LoadPromoterConfig(filepath.Join(dir, "promoter.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Tier.IsEmbedded() || cfg.DataDir != dir || cfg.Tier.Listen != daemon.DefaultListen {
		t.Fatalf("written config: %+v", cfg)
	}

	// The lookup it suggests finds its row.
	m := regexp.MustCompile(`(?m)^  thaw get (quickstart\.events) '([^']+)'    # the daemon's tier listens on ` + regexp.QuoteMeta(daemon.DefaultListen) + `$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("output lacks the thaw get line")
	}
	if code, got, errOut := run(t, "get", "--server", e.Address(), m[1], m[2]); code != 0 || !strings.Contains(got, "(1 of 1 key found)") {
		t.Fatalf("thaw get %s %s: exit %d\n%s%s", m[1], m[2], code, got, errOut)
	}
	if pol, err := os.ReadFile(filepath.Join(dir, "policies", "quickstart.yaml")); err != nil || string(pol) != quickstartPolicy {
		t.Fatalf("written policy: %v", err)
	}

	// A second run into the same directory refuses.
	if code, _, errOut := run(t, "quickstart", "--dir", dir); code != 2 || !strings.Contains(errOut, "not empty") {
		t.Fatalf("second run: %d %s", code, errOut)
	}
}

// scanUntilReady counts the rows of a partition, retrying while the
// restarted tier still restores its replicas.
// waitReady waits up to a minute for e to be ready.
func waitReady(t *testing.T, e *daemon.Embedded) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

func scanUntilReady(t *testing.T, tc *tierclient.Client, partition string, n *int) error {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		*n = 0
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := tc.Scan(ctx, tierclient.Target{Database: "quickstart", Table: "events", Partition: partition}, func(kv.Row) error {
			*n++
			return nil
		})
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
