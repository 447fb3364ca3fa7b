package benchwrite

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/benchutil"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestSmoke runs the harness with a tiny input against an embedded tier:
// it must write, verify and end with the result line. Nothing is asserted
// about speed.
func TestSmoke(t *testing.T) {
	var out bytes.Buffer
	err := Run(t.Context(), &out, []string{
		"--rows", "5000", "--buckets", "3", "--batch", "300", "--data-dir", t.TempDir(), "--verify-sample", "200",
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !regexp.MustCompile(`^ordinary write: [0-9]+ rows/s$`).MatchString(last) {
		t.Fatalf("last line %q is not the result line", last)
	}
	for _, want := range []string{"wrote 5000 rows", "rows/s", "MB/s", "p50", "p99", "peak RSS", "200 sampled rows read back equal", "counted 5000 rows"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// 5000 rows in batches of at most 300 over 3 buckets: at least 17 batches.
	m := regexp.MustCompile(`batches: ([0-9]+) acknowledged`).FindStringSubmatch(out.String())
	if m == nil || len(m[1]) < 2 {
		t.Errorf("batch count %v: want at least 17", m)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--rows", "0"},
		{"--buckets", "0"},
		{"--key-bytes", "1", "--rows", "1000"},
		{"--protocol", "http3"},
		{"--value-bytes", "-1"},
		{"extra"},
	} {
		if err := Run(t.Context(), &bytes.Buffer{}, args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestServerLeftAsItWas runs the harness twice against a running tier
// (--server): the first time it creates the database bench and drops it
// with its table at the end; the second time bench exists with a table of
// someone else's, and both stay.
func TestServerLeftAsItWas(t *testing.T) {
	ctx := t.Context()
	tier, err := daemon.StartEmbedded(ctx, daemon.EmbeddedConfig{DataDir: t.TempDir(), EtcdUnsafeNoFsync: true, TabletServers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close() })
	if err := tier.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	tc, err := tierclient.New(ctx, tier.Address())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	run := func() string {
		var out bytes.Buffer
		if err := Run(ctx, &out, []string{"--server", tier.Address(), "--rows", "2000", "--buckets", "2", "--replication", "1", "--verify-sample", "10"}); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
		return out.String()
	}
	// absent reports whether the database bench does not exist (creating
	// it if so).
	absent := func() bool {
		created, err := tc.CreateNewDatabase(ctx, "bench")
		if err != nil {
			t.Fatal(err)
		}
		return created
	}

	if out := run(); !absent() || strings.Contains(out, "note:") {
		t.Fatalf("the harness left the database bench behind:\n%s", out)
	}
	// bench exists now (absent created it), with a table of its own.
	kept := benchutil.NewRowGen(benchutil.RowGenConfig{Buckets: 1, KeyBytes: 8, ValueBytes: 8})
	if _, err := tc.CreateTable(ctx, "bench", "keep", kept.Schema(), 1); err != nil {
		t.Fatal(err)
	}
	run()
	if absent() {
		t.Fatal("the harness dropped a database it did not create")
	}
	if _, err := tc.Table(ctx, "bench", "keep"); err != nil {
		t.Fatalf("the table bench.keep: %v", err)
	}
}

// TestPercentiles: nearest rank, the smallest latency with at least q of
// them at or below it; the index int(q*n) was one rank high (p99 of 100
// batches was the maximum, p50 of two the larger).
func TestPercentiles(t *testing.T) {
	var l latencies
	for i := 100; i >= 1; i-- {
		l.add(tierclient.BatchInfo{Latency: time.Duration(i) * time.Millisecond})
	}
	if p50, p99, pmax := l.percentiles(); p50 != 50*time.Millisecond || p99 != 99*time.Millisecond || pmax != 100*time.Millisecond {
		t.Fatalf("1..100 ms: p50 %v, p99 %v, max %v; want 50ms, 99ms, 100ms", p50, p99, pmax)
	}
	var two latencies
	two.add(tierclient.BatchInfo{Latency: time.Second})
	two.add(tierclient.BatchInfo{Latency: time.Millisecond})
	if p50, p99, _ := two.percentiles(); p50 != time.Millisecond || p99 != time.Second {
		t.Fatalf("{1ms, 1s}: p50 %v, p99 %v; want 1ms, 1s", p50, p99)
	}
	var none latencies
	if p50, p99, pmax := none.percentiles(); p50 != 0 || p99 != 0 || pmax != 0 {
		t.Fatalf("no batches: %v %v %v", p50, p99, pmax)
	}
}
