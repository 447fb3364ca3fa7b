package bulktxn

import (
	"errors"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
)

func TestAdmit(t *testing.T) {
	ok := AdmissionInput{
		Config: DefaultConfig(), PrimaryKey: true, Active: true, RemoteDataDir: "s3://b/thaw",
		Buckets: 8, AssignedBuckets: 8, ActiveTxns: 63, TargetTxns: 15,
	}
	cases := []struct {
		name   string
		mutate func(in *AdmissionInput)
		want   error
	}{
		{"admitted", func(*AdmissionInput) {}, nil},
		{"default build timeout", func(in *AdmissionInput) { in.BuildTimeout = 0 }, nil},
		{"max build timeout", func(in *AdmissionInput) { in.BuildTimeout = 24 * time.Hour }, nil},
		{"log table", func(in *AdmissionInput) { in.PrimaryKey = false }, bulkload.ErrNotPrimaryKeyTable},
		{"log table checked first", func(in *AdmissionInput) { in.PrimaryKey, in.HeldBy = false, "x" }, bulkload.ErrNotPrimaryKeyTable},
		{"negative build timeout", func(in *AdmissionInput) { in.BuildTimeout = -time.Second }, bulkload.ErrInvalidRequest},
		{"build timeout above max", func(in *AdmissionInput) { in.BuildTimeout = 24*time.Hour + time.Millisecond }, bulkload.ErrInvalidRequest},
		{"no remote data dir", func(in *AdmissionInput) { in.RemoteDataDir = "" }, bulkload.ErrInvalidRequest},
		{"held by a bulk load", func(in *AdmissionInput) { in.HeldBy = "00000000-0000-4000-8000-000000000009" }, bulkload.ErrTargetOccupied},
		{"publishing another load", func(in *AdmissionInput) { in.Active, in.HeldBy = true, "x" }, bulkload.ErrTargetOccupied},
		{"loading", func(in *AdmissionInput) { in.Active = false }, bulkload.ErrTargetOccupied},
		{"has snapshots", func(in *AdmissionInput) { in.HasSnapshots = true }, bulkload.ErrTargetNotEmpty},
		{"occupied before not empty", func(in *AdmissionInput) { in.HasSnapshots, in.Active = true, false }, bulkload.ErrTargetOccupied},
		{"assignment incomplete", func(in *AdmissionInput) { in.AssignedBuckets = 7 }, bulkload.ErrUnavailable},
		{"no assignment", func(in *AdmissionInput) { in.AssignedBuckets = 0 }, bulkload.ErrUnavailable},
		{"too many active", func(in *AdmissionInput) { in.ActiveTxns = 64 }, bulkload.ErrTooManyTransactions},
		{"too many for the target", func(in *AdmissionInput) { in.TargetTxns = 16 }, bulkload.ErrTooManyTransactions},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := ok
			c.mutate(&in)
			err := Admit(in)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("Admit = %v, want %v", err, c.want)
			}
		})
	}
	if !bulkload.IsRetriable(Admit(AdmissionInput{Config: DefaultConfig(), PrimaryKey: true, Active: true, RemoteDataDir: "x", Buckets: 1})) {
		t.Fatal("an incomplete assignment should be retriable")
	}
}

func TestConfig(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(c *Config){
		"zero resend":           func(c *Config) { c.ResendInterval = 0 },
		"sub-millisecond retry": func(c *Config) { c.RetryInterval = time.Microsecond },
		"default above max":     func(c *Config) { c.DefaultBuildTimeout = 25 * time.Hour },
		"adopt batch 0":         func(c *Config) { c.AdoptBatch = 0 },
		"adopt batch 65":        func(c *Config) { c.AdoptBatch = MaxAdoptBatch + 1 },
		"max active 0":          func(c *Config) { c.MaxActive = 0 },
		"no retention":          func(c *Config) { c.ResultRetention = 0 },
	}
	for name, mutate := range cases {
		c := DefaultConfig()
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v", name, err)
		}
		if _, _, err := New(c, validBegin()); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New = %v", name, err)
		}
	}
	if d, err := DefaultConfig().BuildTimeout(0); err != nil || d != time.Hour {
		t.Fatalf("BuildTimeout(0) = %v, %v", d, err)
	}
}

func validBegin() Begin {
	return Begin{
		Req: 1, TxnID: testTxnID, CallerToken: "t1", Principal: bulkload.Principal{Type: "User", Name: "alice"},
		Now: base, Target: bulkload.Target{Database: "sales", Table: "orders"}, TableID: 7,
		RemoteDataDir: "s3://bucket/thaw", Schema: testSchema(2, false), RegistrationRev: 5,
		Holders: placement(2, []string{"ts-1"}, 1),
	}
}

func TestNewRejects(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(b *Begin)
		want   error
	}{
		{"txn id not canonical", func(b *Begin) { b.TxnID = "TXN-1" }, bulkload.ErrInvalidRequest},
		{"empty caller token", func(b *Begin) { b.CallerToken = "" }, bulkload.ErrInvalidRequest},
		{"build timeout", func(b *Begin) { b.BuildTimeout = 48 * time.Hour }, bulkload.ErrInvalidRequest},
		{"schema not json", func(b *Begin) { b.Schema = []byte(`{`) }, bulkload.ErrInvalidRequest},
		{"schema invalid", func(b *Begin) { b.Schema = []byte(`{"schema_id":1,"columns":[],"primary_key":[],"buckets":2}`) }, bulkload.ErrInvalidRequest},
		{"partition of a plain table", func(b *Begin) { b.Target.Partition, b.PartitionID = "p1", 3 }, bulkload.ErrInvalidRequest},
		{"partitioned table as a whole", func(b *Begin) { b.Schema = testSchema(2, true) }, bulkload.ErrInvalidRequest},
		{"bad remote dir", func(b *Begin) { b.RemoteDataDir = "bucket/thaw" }, bulkload.ErrInvalidRequest},
		{"bad table name", func(b *Begin) { b.Target.Table = "a/b" }, bulkload.ErrInvalidRequest},
		{"no creator", func(b *Begin) { b.Principal = bulkload.Principal{} }, bulkload.ErrInvalidRequest},
		{"holders of another bucket count", func(b *Begin) { b.Holders = placement(3, []string{"ts-1"}, 1) }, ErrUnexpected},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := validBegin()
			c.mutate(&b)
			if _, _, err := New(DefaultConfig(), b); !errors.Is(err, c.want) {
				t.Fatalf("New = %v, want %v", err, c.want)
			}
		})
	}
	m, effs, err := New(DefaultConfig(), validBegin())
	if err != nil || len(effs) != 2 {
		t.Fatalf("New = %v, %d effects", err, len(effs))
	}
	if w, ok := effs[0].(PersistRecord); !ok || w.Op != OpBegin || w.ExpectRecordRev != 0 ||
		w.Registration == nil || *w.Registration != (RegistrationWrite{To: RegLoading, ExpectRev: 5}) {
		t.Fatalf("first effect %#v", effs[0])
	}
	if r := m.Record(); r.Buckets != 2 || r.Bucketing != "fluss" || r.SchemaID != 1 || r.BuildDeadlineMs != base.Add(time.Hour).UnixMilli() {
		t.Fatalf("record %+v", r)
	}
	if _, ok := m.TargetInfo(); ok {
		t.Fatal("target info before the fence is ready")
	}
}

func TestRecoverRejects(t *testing.T) {
	m, _, err := New(DefaultConfig(), validBegin())
	if err != nil {
		t.Fatal(err)
	}
	rec := m.Record()
	obs := Observed{RecordRev: 6, Registration: RegLoading, RegistrationRev: 6, Holders: placement(2, []string{"ts-1"}, 1), Now: base}
	if _, _, err := Recover(DefaultConfig(), rec, obs); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	bad := obs
	bad.RecordRev = 0
	if _, _, err := Recover(DefaultConfig(), rec, bad); !errors.Is(err, ErrUnexpected) {
		t.Fatalf("revision 0: %v", err)
	}
	bad = obs
	bad.Holders = Holders{}
	if _, _, err := Recover(DefaultConfig(), rec, bad); !errors.Is(err, ErrUnexpected) {
		t.Fatalf("no holders: %v", err)
	}
	broken := rec.Clone()
	broken.Buckets = 0
	if _, _, err := Recover(DefaultConfig(), broken, obs); !errors.Is(err, bulkload.ErrInvalidRecord) {
		t.Fatalf("invalid record: %v", err)
	}
	badDir := rec.Clone()
	badDir.RemoteDataDir = "not a uri"
	if _, _, err := Recover(DefaultConfig(), badDir, obs); !errors.Is(err, bulkload.ErrInvalidRecord) {
		t.Fatalf("invalid remote dir: %v", err)
	}
	committed := rec.Clone()
	committed.State, committed.ResultExpireMs = bulkload.Committed, 1
	if _, _, err := Recover(DefaultConfig(), committed, obs); !errors.Is(err, bulkload.ErrInvalidRecord) {
		t.Fatalf("committed without manifest: %v", err)
	}
}

func TestHolders(t *testing.T) {
	h := placement(3, []string{"a", "b"}, 2)
	c := h.Clone()
	if !h.Equal(c) {
		t.Fatal("clone differs")
	}
	c.Replicas[0][0] = "z"
	c.Incarnations["a"] = 9
	if h.Replicas[0][0] == "z" || h.Incarnations["a"] == 9 || h.Equal(c) {
		t.Fatal("Clone shares memory, or Equal ignores a change")
	}
	d := h.Clone()
	d.Incarnations["b"]++
	if h.Equal(d) {
		t.Fatal("Equal ignores an incarnation")
	}
	for r, s := range map[Registration]string{RegActive: "ACTIVE", RegLoading: "LOADING", RegActiveWithID: "ACTIVE(id)"} {
		if r.String() != s {
			t.Fatalf("%d: %s", r, r)
		}
	}
	for op := OpNone; op <= OpExpire; op++ {
		if op.String() == "Op(?)" {
			t.Fatalf("op %d has no name", op)
		}
	}
}
