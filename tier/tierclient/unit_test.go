package tierclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierpb"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Opt
		want string
	}{
		{"rows", WithMaxBatchRows(0), "max batch rows 0"},
		{"bytes", WithMaxBatchBytes(-1), "max batch bytes -1"},
		{"per bucket", WithMaxInFlightPerBucket(0), "max in-flight per bucket 0"},
		{"in flight", WithMaxInFlight(0), "max in-flight 0"},
		{"buffered", WithMaxBufferedBytes(10), "max buffered bytes 10"},
		{"timeout", WithRequestTimeout(0), "request timeout 0s"},
		{"protocol", WithProtocol(9), "unknown protocol"},
		{"logger", WithLogger(nil), "nil logger"},
		{"scan", WithScanPageRows(0), "scan page rows 0"},
		{"scan above int32", WithScanPageRows(1 << 31), "scan page rows 2147483648: must be in 1..2147483647"},
		{"backoff", WithRetryPolicy(RetryPolicy{Timeout: time.Second, MinBackoff: time.Second, MaxBackoff: time.Millisecond}), "retry policy"},
		{"unbounded", WithRetryPolicy(RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Second}), "must bound the retries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// New validates before it contacts anyone: the address is never dialled.
			_, err := New(t.Context(), "127.0.0.1:1", tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "tierclient: ") {
				t.Fatalf("New: %v; want an error containing %q", err, tc.want)
			}
		})
	}
	o := defaultOptions()
	if err := o.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := New(t.Context(), ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty address: %v", err)
	}
}

func TestNewUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	// Port 1 refuses connections: New retries (UNAVAILABLE) until ctx ends.
	_, err := New(ctx, "127.0.0.1:1", WithRetryPolicy(RetryPolicy{Timeout: time.Minute, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}))
	if err == nil || !strings.HasPrefix(err.Error(), "tierclient: find the active coordinator") {
		t.Fatalf("New: %v", err)
	}
}

func TestParseProtocol(t *testing.T) {
	for _, p := range []Protocol{ProtocolConnectHTTP1, ProtocolConnectH2C, ProtocolGRPC} {
		got, err := ParseProtocol(p.String())
		if err != nil || got != p {
			t.Errorf("ParseProtocol(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParseProtocol("http3"); err == nil {
		t.Error("ParseProtocol(http3): no error")
	}
}

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7070":               "http://127.0.0.1:7070",
		"http://h:1/t/ts-1":            "http://h:1/t/ts-1",
		"http://h:1/":                  "http://h:1",
		"https://tier.example.com:443": "https://tier.example.com:443",
	} {
		if got := baseURL(in); got != want {
			t.Errorf("baseURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err       error
		act       action
		retriable bool
	}{
		{tierpb.NewNotLeaderError("x", tierpb.LeaderHint{Address: "h:1", Epoch: 3}), relocate, true},
		{tierpb.NewStaleEpochError("x", 4), relocate, true},
		{tierpb.NewError(tierpb.ReasonNotFound, "x", nil), relocate, false},
		{tierpb.NewError(tierpb.ReasonUnavailable, "x", nil), backoff, true},
		{connect.NewError(connect.CodeUnavailable, errors.New("connection refused")), backoff, true},
		{connect.NewError(connect.CodeDeadlineExceeded, errors.New("slow")), backoff, true},
		{tierpb.NewError(tierpb.ReasonBatchTooLarge, "x", map[string]string{tierpb.KeyLimit: "10"}), split, false},
		{tierpb.NewTargetLoadingError("x", tierv1.DataState_DATA_STATE_LOADING, "bl-1"), giveUp, false},
		{tierpb.NewError(tierpb.ReasonInvalidArgument, "x", nil), giveUp, false},
		{tierpb.NewError(tierpb.ReasonSchemaMismatch, "x", nil), giveUp, false},
		{ErrNoLeader, relocate, true},
		{context.Canceled, giveUp, false},
	} {
		if got := classify(tc.err); got != tc.act {
			t.Errorf("classify(%v) = %v, want %v", tc.err, got, tc.act)
		}
		wrapped := &BucketError{Op: "write", Target: Target{"d", "t", ""}, Bucket: 1, Err: fmt.Errorf("x: %w", tc.err)}
		if got := IsRetriable(errors.Join(errors.New("other"), wrapped)); got != tc.retriable {
			t.Errorf("IsRetriable(%v) = %v, want %v", tc.err, got, tc.retriable)
		}
	}
	loading := &BucketError{Err: tierpb.NewTargetLoadingError("x", tierv1.DataState_DATA_STATE_LOADING, "bl-1")}
	if !IsTargetLoading(errors.Join(loading)) || !tierpb.IsTargetLoading(loading) {
		t.Error("TARGET_LOADING not recognised through BucketError and Join")
	}
}

func TestRetrier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := RetryPolicy{MaxAttempts: 5, Timeout: time.Hour, MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}
		r := &retrier{p: p, start: time.Now(), attempt: 1}
		var waits []time.Duration
		for {
			t0 := time.Now()
			if !r.next(t.Context(), false) {
				break
			}
			waits = append(waits, time.Since(t0))
		}
		if len(waits) != 4 || r.attempt != 5 {
			t.Fatalf("%d retries, %d attempts; want 4, 5", len(waits), r.attempt)
		}
		// Exponential with jitter in [d/2, d], capped at MaxBackoff.
		for i, w := range waits {
			d := min(p.MinBackoff<<i, p.MaxBackoff)
			if w < d/2 || w > d {
				t.Errorf("wait %d = %v, want in [%v, %v]", i, w, d/2, d)
			}
		}

		// Immediate retries skip the wait, but never twice in a row.
		r = &retrier{p: p, start: time.Now(), attempt: 1}
		t0 := time.Now()
		r.next(t.Context(), true)
		if time.Since(t0) != 0 {
			t.Error("first immediate retry waited")
		}
		t0 = time.Now()
		r.next(t.Context(), true)
		if time.Since(t0) == 0 {
			t.Error("second immediate retry in a row did not wait")
		}

		// The time budget ends retries.
		r = &retrier{p: RetryPolicy{Timeout: 100 * time.Millisecond, MinBackoff: 30 * time.Millisecond, MaxBackoff: 30 * time.Millisecond}, start: time.Now(), attempt: 1}
		n := 0
		for r.next(t.Context(), false) {
			n++
		}
		if n < 3 || n > 7 {
			t.Errorf("%d retries in a 100ms budget of 15-30ms waits", n)
		}

		// Under the defaults, a first attempt that ran into the request
		// timeout is retried (a server past an overload, or a new leader,
		// answers the second), and so is a second one.
		r = &retrier{p: DefaultRetryPolicy, start: time.Now(), attempt: 1}
		for attempt := 1; attempt <= 2; attempt++ {
			time.Sleep(DefaultRequestTimeout)
			if !r.next(t.Context(), false) {
				t.Fatalf("default policy: no retry after attempt %d timed out", attempt)
			}
		}

		// ctx ends a wait.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		r = &retrier{p: p, start: time.Now(), attempt: 1}
		if r.next(ctx, false) {
			t.Error("retry after ctx was cancelled")
		}
	})
}

func testTable(t *testing.T, s kv.TableSchema) *kv.Table {
	t.Helper()
	tab, err := kv.NewTable(s)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestSchemaProtoRoundTrip(t *testing.T) {
	s := kv.TableSchema{
		SchemaID: 3,
		Columns: []kv.Column{
			{Name: "dt", Type: kv.Type{Kind: kv.KindString}},
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "amount", Type: kv.Type{Kind: kv.KindDecimal, Precision: 10, Scale: 2}, Nullable: true},
			{Name: "at", Type: kv.Type{Kind: kv.KindTimestampLTZ, Precision: 6}, Nullable: true},
		},
		PrimaryKey:    []string{"dt", "id"},
		PartitionKeys: []string{"dt"},
		Buckets:       16,
		Bucketing:     kv.BucketingPaimon,
	}
	tab, err := SchemaFromProto(SchemaToProto(s))
	if err != nil {
		t.Fatal(err)
	}
	got, want := tab.Schema(), testTable(t, s).Schema()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	bad := SchemaToProto(s)
	bad.Columns[1].Type = "BIGNUM"
	if _, err := SchemaFromProto(bad); err == nil || !strings.HasPrefix(err.Error(), "tierclient: ") {
		t.Fatalf("bad type: %v", err)
	}
	if _, err := SchemaFromProto(nil); err == nil {
		t.Fatal("nil schema: no error")
	}
}

func TestKeyRow(t *testing.T) {
	info := &TableInfo{Database: "d", Name: "t", KV: testTable(t, kv.TableSchema{
		Columns: []kv.Column{
			{Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
			{Name: "b", Type: kv.Type{Kind: kv.KindInt}},
			{Name: "a", Type: kv.Type{Kind: kv.KindBigInt}},
		},
		PrimaryKey: []string{"a", "b"},
		Buckets:    4,
	})}
	row, err := info.KeyRow(int64(7), int32(9))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(row) != fmt.Sprint(kv.Row{nil, int32(9), int64(7)}) {
		t.Fatalf("KeyRow = %v", row)
	}
	key, err := info.KV.EncodeKey(row)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := info.KV.EncodeKey(kv.Row{"x", int32(9), int64(7)})
	if string(key) != string(full) {
		t.Fatal("key row encodes another key than the full row")
	}
	if _, err := info.KeyRow(int64(7)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("short key: %v", err)
	}
}

func TestPrefixTable(t *testing.T) {
	c := &Client{}
	tab := testTable(t, kv.TableSchema{
		Columns: []kv.Column{
			{Name: "dt", Type: kv.Type{Kind: kv.KindString}},
			{Name: "user", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "seq", Type: kv.Type{Kind: kv.KindInt}},
			{Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
		},
		PrimaryKey:    []string{"dt", "user", "seq"},
		PartitionKeys: []string{"dt"},
		BucketKey:     []string{"user"},
		Buckets:       8,
	})
	pt, err := c.prefixTable(tab)
	if err != nil {
		t.Fatal(err)
	}
	row := kv.Row{"2026-01-01", int64(42), int32(3), "x"}
	prefix, err := pt.EncodeKey(row)
	if err != nil {
		t.Fatal(err)
	}
	key, err := tab.EncodeKey(row)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(key), string(prefix)) || len(prefix) >= len(key) {
		t.Fatalf("prefix %x is not a proper prefix of key %x", prefix, key)
	}
	if again, _ := c.prefixTable(tab); again != pt {
		t.Error("prefix table not cached")
	}
	notPrefix := testTable(t, kv.TableSchema{
		Columns:    []kv.Column{{Name: "a", Type: kv.Type{Kind: kv.KindInt}}, {Name: "b", Type: kv.Type{Kind: kv.KindInt}}},
		PrimaryKey: []string{"a", "b"},
		BucketKey:  []string{"b"},
		Buckets:    2,
	})
	if _, err := c.prefixTable(notPrefix); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bucket key b of key (a, b): %v", err)
	}
}

func TestBatchAddAndReuse(t *testing.T) {
	c := &Client{opts: defaultOptions()}
	b := c.getBatch(nil, nil, 3)
	var want []string
	for i := range 300 { // crosses mutation chunks and arena growth
		k := fmt.Appendf(nil, "key-%03d", i)
		v := fmt.Appendf(nil, "value-%d", i)
		op := tierv1.MutationOp_MUTATION_OP_UPSERT
		if i%7 == 0 {
			op, v = tierv1.MutationOp_MUTATION_OP_DELETE, nil
		}
		b.add(op, k, v)
		want = append(want, fmt.Sprintf("%v %s %s", op, k, v))
		k[0], v = 'X', append(v, 'X') // the batch holds copies
	}
	if b.n != 300 {
		t.Fatalf("n = %d", b.n)
	}
	size := 0
	for i, m := range b.muts[:b.n] {
		if got := fmt.Sprintf("%v %s %s", m.GetOp(), m.GetKey(), m.GetValue()); got != want[i] {
			t.Fatalf("mutation %d = %q, want %q", i, got, want[i])
		}
		if m.GetOp() == tierv1.MutationOp_MUTATION_OP_DELETE && m.Value != nil {
			t.Fatalf("delete %d carries a value", i)
		}
		size += len(m.GetKey()) + len(m.GetValue())
	}
	if b.bytes != size || b.bucket != 3 {
		t.Fatalf("bytes %d, bucket %d; want %d, 3", b.bytes, b.bucket, size)
	}
	muts := b.muts
	c.putBatch(b)
	if b.n != 0 || b.bytes != 0 || len(b.arena) != 0 || muts[0].Key != nil {
		t.Fatal("putBatch did not reset the batch")
	}
}

func TestTargetString(t *testing.T) {
	if got := (Target{"shop", "orders", "2026-01-01$eu"}).String(); got != "shop.orders/2026-01-01$eu" {
		t.Error(got)
	}
	if got := (Target{"shop", "orders", ""}).String(); got != "shop.orders" {
		t.Error(got)
	}
	if compareTargets(Target{"a", "b", ""}, Target{"a", "b", "p"}) >= 0 || compareTargets(Target{"b", "", ""}, Target{"a", "z", ""}) <= 0 {
		t.Error("compareTargets")
	}
}
