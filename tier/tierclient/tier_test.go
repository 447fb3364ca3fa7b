package tierclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

// These tests run the client against a real tier in the process
// (internal/daemon): embedded etcd, a coordinator, tablet servers sharing
// one changelog, Pebble replicas. Nothing is faked.

func startTier(t *testing.T, cfg daemon.EmbeddedConfig) *daemon.Embedded {
	t.Helper()
	cfg.DataDir = t.TempDir()
	cfg.EtcdUnsafeNoFsync = true
	e, err := daemon.StartEmbedded(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close tier: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

func newClient(t *testing.T, addr string, opts ...tierclient.Opt) *tierclient.Client {
	t.Helper()
	// The client's retries go to the test's output (shown with -v or on
	// failure).
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := tierclient.New(t.Context(), addr, append([]tierclient.Opt{tierclient.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func createTable(t *testing.T, c *tierclient.Client, table string, s kv.TableSchema, rf int) (tierclient.Target, *tierclient.TableInfo) {
	t.Helper()
	if err := c.CreateDatabase(t.Context(), "db"); err != nil {
		t.Fatal(err)
	}
	info, err := c.CreateTable(t.Context(), "db", table, s, rf)
	if err != nil {
		t.Fatal(err)
	}
	return tierclient.Target{Database: "db", Table: table}, info
}

// sameRow compares rows by their encoded bytes (exact for every type,
// decimals included) and by their printed form.
func sameRow(t *testing.T, tab *kv.Table, got, want kv.Row) bool {
	t.Helper()
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	a, err := tab.EncodeValue(got)
	if err != nil {
		t.Fatalf("encode %v: %v", got, err)
	}
	b, err := tab.EncodeValue(want)
	if err != nil {
		t.Fatalf("encode %v: %v", want, err)
	}
	return bytes.Equal(a, b) && fmt.Sprintf("%T", got) == fmt.Sprintf("%T", want) && len(got) == len(want)
}

func allTypesSchema() kv.TableSchema {
	col := func(name string, k kv.Kind, nullable bool, mods ...int) kv.Column {
		c := kv.Column{Name: name, Type: kv.Type{Kind: k}, Nullable: nullable}
		switch k {
		case kv.KindDecimal:
			c.Type.Precision, c.Type.Scale = mods[0], mods[1]
		case kv.KindChar, kv.KindBinary:
			c.Type.Length = mods[0]
		case kv.KindTime, kv.KindTimestamp, kv.KindTimestampLTZ:
			c.Type.Precision = mods[0]
		}
		return c
	}
	return kv.TableSchema{
		Columns: []kv.Column{
			col("id", kv.KindBigInt, false),
			col("name", kv.KindString, false),
			col("b", kv.KindBoolean, true),
			col("i8", kv.KindTinyInt, true),
			col("i16", kv.KindSmallInt, true),
			col("i32", kv.KindInt, true),
			col("f32", kv.KindFloat, true),
			col("f64", kv.KindDouble, true),
			col("dec", kv.KindDecimal, true, 10, 2),
			col("bigdec", kv.KindDecimal, true, 38, 6),
			col("ch", kv.KindChar, true, 4),
			col("bin", kv.KindBinary, true, 3),
			col("bytes", kv.KindBytes, true),
			col("d", kv.KindDate, true),
			col("tm", kv.KindTime, true, 3),
			col("ts", kv.KindTimestamp, true, 6),
			col("ltz", kv.KindTimestampLTZ, true, 9),
		},
		PrimaryKey: []string{"id", "name"},
		Buckets:    4,
	}
}

func allTypesRow(i int64) kv.Row {
	if i%5 == 4 { // every nullable column NULL
		r := make(kv.Row, 17)
		r[0], r[1] = i, fmt.Sprintf("name-%d", i)
		return r
	}
	big38, _ := new(big.Int).SetString(fmt.Sprintf("-1234567890123456789012345678%d", i%10), 10)
	return kv.Row{
		i, fmt.Sprintf("name-%d-ü", i), i%2 == 0, int8(i % 100), int16(-i), int32(i * 1000), float32(i) / 3, float64(i) * 1.5,
		kv.DecimalFromInt64(i*100 + 7), kv.DecimalFromBig(big38), "ab", []byte{1, 2, byte(i)}, []byte(fmt.Sprintf("bytes-%d", i)),
		kv.Date(19000 + i), kv.Time(3600_000 + i), kv.Timestamp{Millis: 1_700_000_000_000 + i, NanoOfMilli: 123_000},
		kv.Timestamp{Millis: -i, NanoOfMilli: int32(i % 1_000_000)},
	}
}

// TestRoundTripAllTypes upserts rows holding every kv type (and NULLs) and
// reads them back with Get; a missing key reads nil.
func TestRoundTripAllTypes(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 3})
	c := newClient(t, e.HostPort())
	target, info := createTable(t, c, "types", allTypesSchema(), 0)
	var rows, keys []kv.Row
	for i := range int64(50) {
		rows = append(rows, allTypesRow(i))
		k, err := info.KeyRow(rows[i][0], rows[i][1])
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := c.Upsert(t.Context(), target, rows); err != nil {
		t.Fatal(err)
	}
	missing, _ := info.KeyRow(int64(999), "nobody")
	got, err := c.Get(t.Context(), target, append(slices.Clone(keys), missing))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range rows {
		if !sameRow(t, info.KV, got[i], want) {
			t.Errorf("row %d: got %v, want %v", i, got[i], want)
		}
	}
	if got[len(rows)] != nil {
		t.Errorf("missing key read %v", got[len(rows)])
	}
	// Upserting again replaces (and is idempotent).
	rows[3][7] = float64(-1)
	if err := c.Upsert(t.Context(), target, rows[3:4]); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(t.Context(), target, keys[3:4]); err != nil || !sameRow(t, info.KV, got[0], rows[3]) {
		t.Fatalf("after replace: %v, %v", got, err)
	}
	// A row that does not fit the schema fails the call; nothing is written.
	bad := allTypesRow(1000)
	bad[10] = "too long for CHAR(4)"
	err = c.Upsert(t.Context(), target, []kv.Row{allTypesRow(1001), bad})
	var rowErr *kv.RowError
	if !errors.Is(err, kv.ErrInvalidRow) || !errors.As(err, &rowErr) || rowErr.Column != "ch" || !strings.HasPrefix(err.Error(), "tierclient: ") {
		t.Fatalf("bad row: %v", err)
	}
	k1001, _ := info.KeyRow(int64(1001), "name-1001-ü")
	if got, err := c.Get(t.Context(), target, []kv.Row{k1001}); err != nil || got[0] != nil {
		t.Fatalf("row before the bad one was written: %v, %v", got, err)
	}
}

func simpleSchema(buckets int) kv.TableSchema {
	return kv.TableSchema{
		Columns: []kv.Column{
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
		},
		PrimaryKey: []string{"id"},
		Buckets:    buckets,
	}
}

func scanAll(t *testing.T, c *tierclient.Client, target tierclient.Target) map[int64]string {
	t.Helper()
	seen := make(map[int64]string)
	err := c.Scan(t.Context(), target, func(r kv.Row) error {
		id := r[0].(int64)
		if _, dup := seen[id]; dup {
			return fmt.Errorf("row %d seen twice", id)
		}
		v, _ := r[1].(string)
		seen[id] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seen
}

// TestDeleteAndScan deletes rows, then scans every bucket in small pages:
// every remaining row exactly once, in key order within its bucket.
func TestDeleteAndScan(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 3})
	c := newClient(t, e.HostPort(), tierclient.WithScanPageRows(7))
	target, info := createTable(t, c, "del", simpleSchema(8), 0)
	const n = 500
	var rows []kv.Row
	for i := range int64(n) {
		rows = append(rows, kv.Row{i, fmt.Sprint("v", i)})
	}
	if err := c.Upsert(t.Context(), target, rows); err != nil {
		t.Fatal(err)
	}
	var dels []kv.Row
	for i := int64(0); i < n; i += 3 {
		k, _ := info.KeyRow(i)
		dels = append(dels, k)
	}
	dels = append(dels, kv.Row{int64(n + 7), nil}) // missing: not an error
	if err := c.Delete(t.Context(), target, dels); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(t.Context(), target, dels[:3])
	if err != nil || got[0] != nil || got[1] != nil || got[2] != nil {
		t.Fatalf("deleted rows read %v, %v", got, err)
	}
	seen := scanAll(t, c, target)
	for i := range int64(n) {
		v, ok := seen[i]
		if ok == (i%3 == 0) || (ok && v != fmt.Sprint("v", i)) {
			t.Fatalf("row %d: present %v value %q", i, ok, v)
		}
	}
	if want := n - (n+2)/3; len(seen) != want {
		t.Fatalf("scan saw %d rows, want %d", len(seen), want)
	}
	// Within a bucket, rows come in key order; buckets come in turn.
	var lastBucket = -1
	var lastKey []byte
	err = c.Scan(t.Context(), target, func(r kv.Row) error {
		b, _ := info.KV.Bucket(r)
		k, _ := info.KV.EncodeKey(r)
		if b < lastBucket || (b == lastBucket && bytes.Compare(k, lastKey) <= 0) {
			return fmt.Errorf("row %v (bucket %d) after bucket %d key %x", r, b, lastBucket, lastKey)
		}
		lastBucket, lastKey = b, k
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// fn's error stops the scan and comes back as it is.
	stop := errors.New("stop")
	if err := c.Scan(t.Context(), target, func(kv.Row) error { return stop }); err != stop {
		t.Fatalf("scan returned %v, want fn's error", err)
	}
}

// TestBatching checks that writes are split into batches of at most the
// configured rows, per bucket, and that a batch the server finds too large
// is halved until it fits.
func TestBatching(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1, Tablet: daemon.TabletOptions{MaxBatchRows: 40}})
	var mu sync.Mutex
	var batches []tierclient.BatchInfo
	onBatch := func(b tierclient.BatchInfo) { mu.Lock(); batches = append(batches, b); mu.Unlock() }

	c := newClient(t, e.HostPort(), tierclient.WithMaxBatchRows(7), tierclient.WithOnBatch(onBatch))
	target, info := createTable(t, c, "batch", simpleSchema(3), 1)
	var rows []kv.Row
	perBucket := make(map[int]int)
	for i := range int64(1000) {
		rows = append(rows, kv.Row{i, "x"})
		b, _ := info.KV.Bucket(rows[i])
		perBucket[b]++
	}
	if err := c.Upsert(t.Context(), target, rows); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, n := range perBucket {
		want += (n + 6) / 7
	}
	sum := 0
	for _, b := range batches {
		if b.Rows > 7 || b.Err != nil || b.Attempts < 1 {
			t.Fatalf("batch %+v", b)
		}
		sum += b.Rows
	}
	if len(batches) != want || sum != 1000 {
		t.Fatalf("%d batches of %d rows; want %d batches of 1000", len(batches), sum, want)
	}
	if n := len(scanAll(t, c, target)); n != 1000 {
		t.Fatalf("scan: %d rows", n)
	}

	// The server takes at most 40 rows per request: 300-row batches are
	// rejected as too large and halved (300 → 150 → 75 → 37 or 38).
	batches = nil
	big := newClient(t, e.HostPort(), tierclient.WithMaxBatchRows(300), tierclient.WithOnBatch(onBatch))
	for i := range rows {
		rows[i][1] = "y"
	}
	if err := big.Upsert(t.Context(), target, rows); err != nil {
		t.Fatal(err)
	}
	split := false
	for _, b := range batches {
		if b.Err != nil {
			t.Fatalf("batch %+v", b)
		}
		split = split || b.Attempts > 3
	}
	if !split {
		t.Fatalf("no batch was split: %+v", batches)
	}
	got := scanAll(t, c, target)
	for i := range int64(1000) {
		if got[i] != "y" {
			t.Fatalf("row %d = %q after the split writes", i, got[i])
		}
	}
	// Gets are split the same way.
	keys := make([]kv.Row, 1000)
	for i := range keys {
		keys[i] = kv.Row{int64(i), nil}
	}
	res, err := big.Get(t.Context(), target, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r == nil || r[1] != "y" {
			t.Fatalf("get %d: %v", i, r)
		}
	}
}

// TestWriterOrder writes the same keys many times, interleaved with
// deletes, through a Writer with small batches: after Flush each key has
// its last written value.
func TestWriterOrder(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 3})
	c := newClient(t, e.HostPort(), tierclient.WithMaxBatchRows(5))
	target, info := createTable(t, c, "order", simpleSchema(4), 0)
	w, err := c.NewWriter(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	const keys, rounds = 20, 50
	for r := range rounds {
		for k := range int64(keys) {
			if err := w.Write(t.Context(), kv.Row{k, fmt.Sprintf("k%d-r%d", k, r)}); err != nil {
				t.Fatal(err)
			}
			if r == rounds-1 && k%4 == 0 {
				key, _ := info.KeyRow(k)
				if err := w.Delete(t.Context(), key); err != nil {
					t.Fatal(err)
				}
			}
		}
		if r == rounds/2 {
			if err := w.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			if st := w.Stats(); st.AckedRows != st.Rows {
				t.Fatalf("after Flush: %+v", st)
			}
		}
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Rows != keys*rounds+keys/4 || st.AckedRows != st.Rows || st.Batches < st.Rows/5 {
		t.Fatalf("stats %+v", st)
	}
	got := scanAll(t, c, target)
	for k := range int64(keys) {
		v, ok := got[k]
		switch {
		case k%4 == 0 && ok:
			t.Errorf("key %d: deleted last, read %q", k, v)
		case k%4 != 0 && v != fmt.Sprintf("k%d-r%d", k, rounds-1):
			t.Errorf("key %d = %q, want the last write", k, v)
		}
	}
	if err := w.Write(t.Context(), kv.Row{int64(1), "late"}); !errors.Is(err, tierclient.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestPartitionedRouting writes rows of several partitions through the
// whole table: each lands in its own partition.
func TestPartitionedRouting(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 2})
	c := newClient(t, e.HostPort())
	// One partition key (tier/clustertest's TestCLI writes a table with
	// two).
	schema := kv.TableSchema{
		Columns: []kv.Column{
			{Name: "dt", Type: kv.Type{Kind: kv.KindString}},
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
		},
		PrimaryKey:    []string{"dt", "id"},
		PartitionKeys: []string{"dt"},
		Buckets:       3,
	}
	target, info := createTable(t, c, "parts", schema, 0)
	days := []string{"2026-11-27", "2026-11-28", "2026-11-29"}
	for _, d := range days[:2] {
		if err := c.CreatePartition(t.Context(), "db", "parts", d); err != nil {
			t.Fatal(err)
		}
	}
	var rows []kv.Row
	for i := range int64(90) {
		rows = append(rows, kv.Row{days[i%2], i, fmt.Sprint("v", i)})
	}
	if err := c.Upsert(t.Context(), target, rows); err != nil {
		t.Fatal(err)
	}
	for p, d := range days[:2] {
		pt := tierclient.Target{Database: "db", Table: "parts", Partition: d}
		n := 0
		err := c.Scan(t.Context(), pt, func(r kv.Row) error {
			if r[0] != d || r[1].(int64)%2 != int64(p) {
				return fmt.Errorf("row %v in partition %s", r, d)
			}
			n++
			return nil
		})
		if err != nil || n != 45 {
			t.Fatalf("partition %s: %d rows, %v", d, n, err)
		}
	}
	if n := 0; c.Scan(t.Context(), target, func(kv.Row) error { n++; return nil }) != nil || n != 90 {
		t.Fatalf("scan of the whole table: %d rows", n)
	}
	// Gets route by the key's partition; a partition that does not exist
	// holds nothing.
	k0, _ := info.KeyRow(days[0], int64(0))
	k1, _ := info.KeyRow(days[1], int64(1))
	kx, _ := info.KeyRow(days[2], int64(2))
	got, err := c.Get(t.Context(), target, []kv.Row{k0, k1, kx})
	if err != nil || got[0][2] != "v0" || got[1][2] != "v1" || got[2] != nil {
		t.Fatalf("get: %v, %v", got, err)
	}
	// Writing to a partition that does not exist fails (NOT_FOUND)...
	err = c.Upsert(t.Context(), target, []kv.Row{{days[2], int64(7), "x"}})
	if tierpb.ReasonOf(err) != tierpb.ReasonNotFound {
		t.Fatalf("write to a missing partition: %v", err)
	}
	// ...unless the client creates partitions.
	cc := newClient(t, e.HostPort(), tierclient.WithCreatePartitions(true))
	if err := cc.Upsert(t.Context(), target, []kv.Row{{days[2], int64(7), "x"}}); err != nil {
		t.Fatal(err)
	}
	if names, err := c.Partitions(t.Context(), "db", "parts"); err != nil || len(names) != 3 {
		t.Fatalf("partitions %v, %v", names, err)
	}
	// A delete in a partition that does not exist has nothing to delete:
	// it succeeds and does not create the partition, even on a client that
	// creates partitions; an upsert of the same Writer then does.
	day4 := "2026-11-30"
	k4, _ := info.KeyRow(day4, int64(4))
	if err := cc.Delete(t.Context(), target, []kv.Row{k4, k0}); err != nil {
		t.Fatalf("delete in a missing partition: %v", err)
	}
	if names, err := c.Partitions(t.Context(), "db", "parts"); err != nil || len(names) != 3 {
		t.Fatalf("after the delete, partitions %v, %v", names, err)
	}
	if got, err := c.Get(t.Context(), target, []kv.Row{k0, k1}); err != nil || got[0] != nil || got[1] == nil {
		t.Fatalf("after deleting k0: %v, %v", got, err)
	}
	// One Delete asks the coordinator once per missing partition, not
	// once per key.
	log := &coordLog{}
	lc := newClient(t, e.HostPort(), tierclient.WithHTTPClient(&http.Client{Transport: log}))
	var missing []kv.Row
	for i := range int64(50) {
		k, _ := info.KeyRow("2026-12-01", i)
		missing = append(missing, k)
	}
	if err := lc.Delete(t.Context(), target, missing); err != nil {
		t.Fatal(err)
	}
	if n := log.method("GetTargetLocations"); n != 1 {
		t.Fatalf("a delete of 50 keys in one missing partition located targets %d times, want 1", n)
	}
	w, err := cc.NewWriter(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(t.Context(), k4); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(t.Context(), kv.Row{day4, int64(4), "y"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(t.Context(), target, []kv.Row{k4}); err != nil || got[0] == nil || got[0][2] != "y" {
		t.Fatalf("the row written after a skipped delete: %v, %v", got, err)
	}
	// A named partition takes only its own rows.
	one := tierclient.Target{Database: "db", Table: "parts", Partition: days[0]}
	if err := c.Upsert(t.Context(), one, []kv.Row{{days[1], int64(1), "x"}}); !errors.Is(err, tierclient.ErrInvalidArgument) {
		t.Fatalf("row of another partition: %v", err)
	}
	// So does a lookup; the error names the key as an upsert's names the row.
	g0, _ := info.KeyRow(days[0], int64(1))
	g1, _ := info.KeyRow(days[1], int64(1))
	_, err = c.Get(t.Context(), one, []kv.Row{g0, g1})
	var re *tierclient.RowError
	if !errors.Is(err, tierclient.ErrInvalidArgument) || !errors.As(err, &re) || re.Op != "get" || re.Index != 1 || re.Target != one {
		t.Fatalf("key of another partition: %v", err)
	}
}

// TestPrefixGet looks rows up by their bucket key, a leading part of the
// primary key.
func TestPrefixGet(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	c := newClient(t, e.HostPort())
	target, _ := createTable(t, c, "prefix", kv.TableSchema{
		Columns: []kv.Column{
			{Name: "user", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "seq", Type: kv.Type{Kind: kv.KindInt}},
			{Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
		},
		PrimaryKey: []string{"user", "seq"},
		BucketKey:  []string{"user"},
		Buckets:    4,
	}, 1)
	var rows []kv.Row
	for u := range int64(10) {
		for s := range int32(u) {
			rows = append(rows, kv.Row{u, s, fmt.Sprintf("%d/%d", u, s)})
		}
	}
	if err := c.Upsert(t.Context(), target, rows); err != nil {
		t.Fatal(err)
	}
	got, err := c.PrefixGet(t.Context(), target, []kv.Row{{int64(3), nil, nil}, {int64(0), nil, nil}, {int64(9), nil, nil}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 3 || len(got[1]) != 0 || len(got[2]) != 9 {
		t.Fatalf("prefix rows %d, %d, %d; want 3, 0, 9", len(got[0]), len(got[1]), len(got[2]))
	}
	for s, r := range got[2] {
		if r[2] != fmt.Sprintf("9/%d", s) {
			t.Fatalf("user 9 row %d = %v", s, r)
		}
	}
}

// TestTargetLoading fences a table LOADING the way a bulk load's Begin
// does (a guarded write of the table's data state in the metadata, with
// the active coordinator's guard; the tablet servers learn it from their
// watch): writes and reads fail with TARGET_LOADING, which the client does
// not retry, then succeed once the table is ACTIVE again.
func TestTargetLoading(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 2})
	c := newClient(t, e.HostPort())
	target, info := createTable(t, c, "loading", simpleSchema(2), 0)
	if err := c.Upsert(t.Context(), target, []kv.Row{{int64(1), "a"}}); err != nil {
		t.Fatal(err)
	}
	setState := func(state meta.DataState, id string) {
		t.Helper()
		g, err := e.Guard(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		rec, err := e.Meta().GetTable(t.Context(), "db", "loading")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Meta().SetDataState(t.Context(), g, meta.DataStateChange{
			Target: meta.TargetName{Database: "db", Table: "loading"}, Rev: rec.Rev, State: state, BulkLoadID: id,
		}); err != nil {
			t.Fatal(err)
		}
	}
	setState(meta.Loading, "bl-test")
	var err error
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		start := time.Now()
		err = c.Upsert(t.Context(), target, []kv.Row{{int64(2), "b"}})
		if tierpb.IsTargetLoading(err) {
			if time.Since(start) > 5*time.Second {
				t.Errorf("TARGET_LOADING took %v: retried?", time.Since(start))
			}
			break
		}
		if err != nil {
			t.Fatalf("upsert while fencing: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !tierpb.IsTargetLoading(err) || !tierclient.IsTargetLoading(err) || tierclient.IsRetriable(err) {
		t.Fatalf("write to a LOADING target: %v", err)
	}
	if md := tierpb.MetadataOf(err); md[tierpb.KeyBulkLoadID] != "bl-test" {
		t.Errorf("metadata %v", md)
	}
	var be *tierclient.BucketError
	if !errors.As(err, &be) || be.Op != "write" || be.Target != target {
		t.Errorf("error %v is not a write BucketError for %v", err, target)
	}
	k1, _ := info.KeyRow(int64(1))
	if _, err := c.Get(t.Context(), target, []kv.Row{k1}); !tierpb.IsTargetLoading(err) {
		t.Fatalf("read of a LOADING target: %v", err)
	}
	if l, err := c.Locations(t.Context(), target, true); err != nil || l.BulkLoadID != "bl-test" {
		t.Fatalf("locations: %+v, %v", l, err)
	}

	setState(meta.Active, "")
	deadline = time.Now().Add(20 * time.Second)
	for err = errors.New("not yet"); err != nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		err = c.Upsert(t.Context(), target, []kv.Row{{int64(2), "b"}})
		if err != nil && !tierpb.IsTargetLoading(err) {
			t.Fatal(err)
		}
	}
	if err != nil {
		t.Fatalf("after unfencing: %v", err)
	}
	if got := scanAll(t, c, target); len(got) != 2 || got[1] != "a" || got[2] != "b" {
		t.Fatalf("rows %v", got)
	}
}

// TestLeaderFailover crashes the tablet server leading a bucket while a
// Writer streams rows: the client finds the new leader (refreshing the
// locations after the dead address fails, or following NOT_LEADER) and
// every row ends up written.
func TestLeaderFailover(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{
		TabletServers: 3,
		Tablet:        daemon.TabletOptions{LeaseTTL: time.Second},
		Coordinator:   daemon.CoordinatorOptions{LeaseTTL: time.Second, RebalanceInterval: 100 * time.Millisecond},
	})
	c := newClient(t, e.HostPort(), tierclient.WithMaxBatchRows(50), tierclient.WithRequestTimeout(5*time.Second))
	target, info := createTable(t, c, "failover", simpleSchema(4), 3)
	before, err := c.Locations(t.Context(), target, true)
	if err != nil {
		t.Fatal(err)
	}
	// A second client keeps the routes of before the crash.
	var mu sync.Mutex
	var staleBatches []tierclient.BatchInfo
	stale := newClient(t, e.HostPort(), tierclient.WithOnBatch(func(b tierclient.BatchInfo) {
		mu.Lock()
		staleBatches = append(staleBatches, b)
		mu.Unlock()
	}))
	if _, err := stale.Locations(t.Context(), target, false); err != nil {
		t.Fatal(err)
	}
	w, err := c.NewWriter(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6000
	var killed atomic.Value
	for i := range int64(n) {
		if i == n/3 {
			if err := w.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			victim := before.Leaders[0][strings.LastIndex(before.Leaders[0], "/")+1:]
			if err := e.KillTablet(t.Context(), victim); err != nil {
				t.Fatal(err)
			}
			killed.Store(victim)
		}
		if err := w.Write(t.Context(), kv.Row{i, fmt.Sprint("v", i)}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.AckedRows != n || st.Retries == 0 {
		t.Fatalf("stats %+v: want %d rows acknowledged after retries", st, n)
	}
	after, err := c.Locations(t.Context(), target, false)
	if err != nil {
		t.Fatal(err)
	}
	if after.Leaders[0] == before.Leaders[0] || strings.HasSuffix(after.Leaders[0], "/"+killed.Load().(string)) {
		t.Fatalf("bucket 0 still routed to %s", after.Leaders[0])
	}
	got := scanAll(t, c, target)
	for i := range int64(n) {
		if got[i] != fmt.Sprint("v", i) {
			t.Fatalf("row %d = %q", i, got[i])
		}
	}

	// The crashed server comes back (now a follower, or not yet hosting
	// the bucket): the stale client's write to bucket 0 goes to it first,
	// is refused (NOT_LEADER, STALE_EPOCH, NOT_FOUND or UNAVAILABLE,
	// depending on how far it got) and lands at the new leader.
	if err := e.StartTablet(t.Context(), killed.Load().(string)); err != nil {
		t.Fatal(err)
	}
	var row kv.Row
	for i := int64(n); row == nil; i++ {
		if b, _ := info.KV.Bucket(kv.Row{i, nil}); b == 0 {
			row = kv.Row{i, "late"}
		}
	}
	if err := stale.Upsert(t.Context(), target, []kv.Row{row}); err != nil {
		t.Fatal(err)
	}
	if len(staleBatches) != 1 || staleBatches[0].Attempts < 2 {
		t.Fatalf("stale client's batches %+v: want one, sent more than once", staleBatches)
	}
	if got, err := c.Get(t.Context(), target, []kv.Row{row}); err != nil || got[0][1] != "late" {
		t.Fatalf("get %v: %v, %v", row, got, err)
	}
}

// TestCoordinatorFailover configures the client with a standby
// coordinator (it follows the NOT_LEADER hint), then stops the active one:
// metadata calls go on against the new leader.
func TestCoordinatorFailover(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1, Coordinators: 2, Coordinator: daemon.CoordinatorOptions{LeaseTTL: time.Second}})
	l, err := e.Leader(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	standby := "coord-1"
	if l.ID == standby {
		standby = "coord-2"
	}
	c := newClient(t, e.CoordinatorAddress(standby))
	first, err := c.Leader(t.Context())
	if err != nil || first.ID != l.ID {
		t.Fatalf("leader %+v, %v; want %s", first, err, l.ID)
	}
	target, _ := createTable(t, c, "coord", simpleSchema(2), 1)
	if err := e.StopCoordinator(t.Context(), l.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Upsert(t.Context(), target, []kv.Row{{int64(1), "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTable(t.Context(), "db", "coord2", simpleSchema(2), 1); err != nil {
		t.Fatal(err)
	}
	now, err := c.Leader(t.Context())
	if err != nil || now.ID != standby || now.Epoch <= first.Epoch {
		t.Fatalf("leader after failover %+v, %v; want %s with a higher epoch than %d", now, err, standby, first.Epoch)
	}
}

// TestWriterFailure drops the table under a Writer: the Writer fails with
// an error naming the bucket, and stays failed.
func TestWriterFailure(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	c := newClient(t, e.HostPort(), tierclient.WithRetryPolicy(tierclient.RetryPolicy{Timeout: 3 * time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}))
	target, _ := createTable(t, c, "dropped", simpleSchema(2), 1)
	w, err := c.NewWriter(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(t.Context(), kv.Row{int64(1), "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, e.HostPort())
	if err := other.DropTable(t.Context(), "db", "dropped"); err != nil {
		t.Fatal(err)
	}
	// The tablet servers stop serving the table once they see the drop;
	// until then writes still land in its replicas.
	deadline := time.Now().Add(20 * time.Second)
	for i := int64(0); err == nil && time.Now().Before(deadline); i++ {
		if err = w.Write(t.Context(), kv.Row{i, "b"}); err == nil {
			err = w.Flush(t.Context())
		}
	}
	err = w.Flush(t.Context())
	var be *tierclient.BucketError
	if err == nil || !errors.As(err, &be) || be.Target != target || !strings.HasPrefix(err.Error(), "tierclient: ") {
		t.Fatalf("flush after drop: %v", err)
	}
	if err := w.Write(t.Context(), kv.Row{int64(1), "c"}); err == nil {
		t.Fatal("write on a failed writer: no error")
	}
	if err := w.Close(t.Context()); err == nil {
		t.Fatal("close of a failed writer: no error")
	}
	if st := w.Stats(); st.FailedRows == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestEveryProtocol writes and reads through every protocol.
func TestEveryProtocol(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	for i, p := range []tierclient.Protocol{tierclient.ProtocolConnectHTTP1, tierclient.ProtocolConnectH2C, tierclient.ProtocolGRPC} {
		c := newClient(t, e.HostPort(), tierclient.WithProtocol(p))
		target, _ := createTable(t, c, fmt.Sprint("proto", i), simpleSchema(2), 1)
		if err := c.Upsert(t.Context(), target, []kv.Row{{int64(1), p.String()}}); err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		got, err := c.Get(t.Context(), target, []kv.Row{{int64(1), nil}})
		if err != nil || got[0][1] != p.String() {
			t.Fatalf("%v: %v, %v", p, got, err)
		}
	}
}

// TestWriterConcurrent shares one Writer among goroutines, with a buffer
// small enough that Write blocks on acknowledgements.
func TestWriterConcurrent(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 2})
	c := newClient(t, e.HostPort(), tierclient.WithMaxBatchRows(16), tierclient.WithMaxBatchBytes(512), tierclient.WithMaxBufferedBytes(2048))
	target, _ := createTable(t, c, "concurrent", simpleSchema(4), 0)
	w, err := c.NewWriter(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 500
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				if err := w.Write(t.Context(), kv.Row{int64(g*each + i), fmt.Sprint("g", g)}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := scanAll(t, c, target)
	if len(got) != writers*each {
		t.Fatalf("%d rows, want %d", len(got), writers*each)
	}
	for id, v := range got {
		if v != fmt.Sprint("g", id/each) {
			t.Fatalf("row %d = %q", id, v)
		}
	}
}

// TestCreateTableAfterAnotherClientDropped: client A has the routing of
// db.x cached; client B drops the table; A creates db.x again and writes
// into it at once. The write lands in the new table (A's CreateTable
// forgets what it cached of the old one), where B reads it.
func TestCreateTableAfterAnotherClientDropped(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	a := newClient(t, e.HostPort())
	b := newClient(t, e.HostPort())
	target, _ := createTable(t, a, "x", simpleSchema(2), 1)
	if err := a.Upsert(t.Context(), target, []kv.Row{{int64(1), "old"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.DropTable(t.Context(), "db", "x"); err != nil {
		t.Fatal(err)
	}
	info, err := a.CreateTable(t.Context(), "db", "x", simpleSchema(2), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Upsert(t.Context(), target, []kv.Row{{int64(2), "new"}}); err != nil {
		t.Fatalf("upsert into the table just created (id %d): %v", info.ID, err)
	}
	k, err := info.KeyRow(int64(2))
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Get(t.Context(), target, []kv.Row{k})
	if err != nil || got[0] == nil {
		t.Fatalf("read of the new row by another client: %v %v", got, err)
	}
}

// TestCreateTableChecksArguments: a schema kv refuses or a replication
// factor out of range is refused before the coordinator is asked; the
// wire's int32 fields truncated them (buckets 1<<32+8 created 8 buckets,
// replication 1<<32+3 became 3).
func TestCreateTableChecksArguments(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	c := newClient(t, e.HostPort())
	if err := c.CreateDatabase(t.Context(), "db"); err != nil {
		t.Fatal(err)
	}
	wide := simpleSchema(1)
	wide.Buckets = 1<<32 + 8
	for name, call := range map[string]func() error{
		"buckets":     func() error { _, err := c.CreateTable(t.Context(), "db", "wide", wide, 1); return err },
		"replication": func() error { _, err := c.CreateTable(t.Context(), "db", "rf", simpleSchema(1), 1<<32+3); return err },
		"negative":    func() error { _, err := c.CreateTable(t.Context(), "db", "neg", simpleSchema(1), -1); return err },
	} {
		if err := call(); !errors.Is(err, tierclient.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	for _, name := range []string{"wide", "rf", "neg"} {
		if _, err := c.RefreshTable(t.Context(), "db", name); tierpb.ReasonOf(err) != tierpb.ReasonNotFound {
			t.Errorf("table %s after its refused create: %v, want NOT_FOUND", name, err)
		}
	}
}
