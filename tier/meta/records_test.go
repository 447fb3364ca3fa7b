package meta_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
)

// TestBucketSnapshotGolden holds Fluss's BucketSnapshotJsonSerdeTest bytes.
func TestBucketSnapshotGolden(t *testing.T) {
	const golden = `{"version":1,"snapshot_id":1,"log_offset":1002,"metadata_path":"oss://test/a2"}`
	want := meta.BucketSnapshot{Version: 1, SnapshotID: 1, LogOffset: 1002, MetadataPath: "oss://test/a2"}
	b, err := meta.Marshal(want)
	if err != nil || string(b) != golden {
		t.Fatalf("marshal: %s, %v\nwant %s", b, err, golden)
	}
	got, err := meta.Unmarshal[meta.BucketSnapshot]([]byte(golden))
	if err != nil || got != want {
		t.Fatalf("unmarshal: %+v, %v", got, err)
	}
	// Jackson leaves '&', '<' and '>' alone; so must we.
	b, err = meta.Marshal(meta.BucketSnapshot{Version: 1, SnapshotID: 2, MetadataPath: "s3://b/x?a=1&b=<2>"})
	if err != nil || string(b) != `{"version":1,"snapshot_id":2,"log_offset":0,"metadata_path":"s3://b/x?a=1&b=<2>"}` {
		t.Fatalf("marshal with &<>: %s, %v", b, err)
	}
}

// TestRecordFormats pins the JSON of every record.
func TestRecordFormats(t *testing.T) {
	sch, err := kv.NewTable(schema(2, false))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		enc  func() ([]byte, error)
		want string
	}{
		{"database", func() ([]byte, error) {
			return meta.Marshal(meta.DatabaseRecord{Version: 1, Name: "sales", CreatedMs: 1700000000000})
		}, `{"version":1,"name":"sales","created_ms":1700000000000}`},
		{"table", func() ([]byte, error) {
			return meta.Marshal(meta.TableRecord{
				Version: 1, ID: 7, Database: "sales", Name: "orders", Schema: sch.Schema(), ReplicationFactor: 3,
				RemoteDataDir: "s3://bucket/thaw", DataState: meta.Loading, BulkLoadID: "txn-1",
				CreatedMs: 1700000000000, ModifiedMs: 1700000000500,
			})
		}, `{"version":1,"table_id":7,"database":"sales","name":"orders","schema":{"schema_id":0,"columns":[` +
			`{"name":"id","type":"BIGINT","nullable":false},{"name":"day","type":"STRING","nullable":false},{"name":"v","type":"STRING","nullable":true}],` +
			`"primary_key":["id","day"],"bucket_key":["id","day"],"buckets":2,"bucketing":"fluss"},"replication_factor":3,` +
			`"remote_data_dir":"s3://bucket/thaw","data_state":"LOADING","bulk_load_id":"txn-1","created_ms":1700000000000,"modified_ms":1700000000500}`},
		{"partition", func() ([]byte, error) {
			return meta.Marshal(meta.PartitionRecord{Version: 1, ID: 3, TableID: 7, Name: "2024-01-01", DataState: meta.Active, CreatedMs: 1, ModifiedMs: 2})
		}, `{"version":1,"partition_id":3,"table_id":7,"name":"2024-01-01","data_state":"ACTIVE","created_ms":1,"modified_ms":2}`},
		{"assignment", func() ([]byte, error) {
			return meta.Marshal(meta.Assignment{Version: 1, TableID: 7, PartitionID: 3, Buckets: []meta.BucketAssignment{
				{Replicas: []string{"ts-1", "ts-2"}, Leader: "ts-1", LeaderEpoch: 4}, {Replicas: []string{}, Leader: ""},
			}})
		}, `{"version":1,"table_id":7,"partition_id":3,"buckets":[{"replicas":["ts-1","ts-2"],"leader":"ts-1","leader_epoch":4},{"replicas":[],"leader":"","leader_epoch":0}]}`},
		{"assignment of a table", func() ([]byte, error) {
			return meta.Marshal(meta.Assignment{Version: 1, TableID: 7, Buckets: []meta.BucketAssignment{{Replicas: []string{"ts-1"}, Leader: "ts-1"}}})
		}, `{"version":1,"table_id":7,"buckets":[{"replicas":["ts-1"],"leader":"ts-1","leader_epoch":0}]}`},
		{"dropped data of a partition", func() ([]byte, error) {
			return meta.Marshal(meta.DroppedData{Version: 1, TableID: 7, PartitionID: 3, Dir: "s3://bucket/thaw/kv/sales/orders-7/2024-01-01-p3", DroppedMs: 1700000000000})
		}, `{"version":1,"table_id":7,"partition_id":3,"dir":"s3://bucket/thaw/kv/sales/orders-7/2024-01-01-p3","dropped_ms":1700000000000}`},
		{"dropped data of a table", func() ([]byte, error) {
			return meta.Marshal(meta.DroppedData{Version: 1, TableID: 7, Dir: "file:///r/kv/sales/orders-7", DroppedMs: 1})
		}, `{"version":1,"table_id":7,"dir":"file:///r/kv/sales/orders-7","dropped_ms":1}`},
		{"server", func() ([]byte, error) {
			return meta.Marshal(meta.ServerRecord{Version: 1, ID: "ts-1", Address: "10.0.0.5:7400", StartedMs: 1700000000000})
		}, `{"version":1,"id":"ts-1","address":"10.0.0.5:7400","started_ms":1700000000000}`},
		{"server with its changelog", func() ([]byte, error) {
			return meta.Marshal(meta.ServerRecord{Version: 1, ID: "ts-1", Address: "a:1", StartedMs: 1, Changelog: "kafka:Mk3OEYBSD34fcwNTJENDM2Qk/prod.thaw"})
		}, `{"version":1,"id":"ts-1","address":"a:1","started_ms":1,"changelog":"kafka:Mk3OEYBSD34fcwNTJENDM2Qk/prod.thaw"}`},
		{"assignment with the buckets' changelog", func() ([]byte, error) {
			return meta.Marshal(meta.Assignment{Version: 1, TableID: 7, Buckets: []meta.BucketAssignment{{Replicas: []string{"ts-1"}, Leader: "ts-1", Changelog: "local:0123456789abcdef0123456789abcdef"}}})
		}, `{"version":1,"table_id":7,"buckets":[{"replicas":["ts-1"],"leader":"ts-1","leader_epoch":0,"changelog":"local:0123456789abcdef0123456789abcdef"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.enc()
			if err != nil || string(b) != tc.want {
				t.Fatalf("got  %s, %v\nwant %s", b, err, tc.want)
			}
		})
	}
}

func TestStrictDecoding(t *testing.T) {
	good := `{"version":1,"snapshot_id":5,"log_offset":7,"metadata_path":"file:///m"}`
	if _, err := meta.Unmarshal[meta.BucketSnapshot]([]byte(good)); err != nil {
		t.Fatalf("good record: %v", err)
	}
	for _, tc := range []struct{ name, doc string }{
		{"unknown field", `{"version":1,"snapshot_id":5,"log_offset":7,"metadata_path":"file:///m","extra":1}`},
		{"field in another case", `{"Version":1,"snapshot_id":5,"log_offset":7,"metadata_path":"file:///m"}`},
		{"duplicate key", `{"version":1,"snapshot_id":5,"snapshot_id":6,"log_offset":7,"metadata_path":"file:///m"}`},
		{"trailing data", good + `{}`},
		{"trailing garbage", good + `x`},
		{"missing version", `{"snapshot_id":5,"log_offset":7,"metadata_path":"file:///m"}`},
		{"version 0", `{"version":0,"snapshot_id":5,"log_offset":7,"metadata_path":"file:///m"}`},
		{"version 2", `{"version":2,"snapshot_id":5,"log_offset":7,"metadata_path":"file:///m"}`},
		{"version out of range", `{"version":99999999999999999999,"snapshot_id":5,"log_offset":7,"metadata_path":"file:///m"}`},
		{"version not an integer", `{"version":1.5,"snapshot_id":5,"log_offset":7,"metadata_path":"file:///m"}`},
		{"wrong type", `{"version":"1","snapshot_id":5,"log_offset":7,"metadata_path":"file:///m"}`},
		{"negative offset", `{"version":1,"snapshot_id":5,"log_offset":-1,"metadata_path":"file:///m"}`},
		{"no metadata path", `{"version":1,"snapshot_id":5,"log_offset":7}`},
		{"not an object", `[1]`},
		{"empty", ``},
		{"byte order mark", "\ufeff" + good},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v, err := meta.Unmarshal[meta.BucketSnapshot]([]byte(tc.doc)); !errors.Is(err, meta.ErrCorrupt) {
				t.Fatalf("got %+v, %v; want ErrCorrupt", v, err)
			}
		})
	}
}

func TestStrictDecodingNested(t *testing.T) {
	table := func(mod func(string) string) string {
		return mod(`{"version":1,"table_id":7,"database":"d","name":"t","schema":{"schema_id":0,"columns":[` +
			`{"name":"id","type":"BIGINT","nullable":false}],"primary_key":["id"],"buckets":2,"bucketing":"fluss"},` +
			`"replication_factor":1,"remote_data_dir":"file:///r","data_state":"ACTIVE","created_ms":1,"modified_ms":1}`)
	}
	if _, err := meta.Unmarshal[meta.TableRecord]([]byte(table(func(s string) string { return s }))); err != nil {
		t.Fatalf("good table: %v", err)
	}
	for _, tc := range []struct {
		name     string
		old, new string
	}{
		{"unknown field in the schema", `"buckets":2,`, `"buckets":2,"owner":"x",`},
		{"unknown field in a column", `"nullable":false}`, `"nullable":false,"comment":""}`},
		{"duplicate key in a column", `"nullable":false}`, `"nullable":false,"nullable":true}`},
		{"invalid schema", `"buckets":2`, `"buckets":0`},
		{"unknown type", `"BIGINT"`, `"BIGNUM"`},
		{"loading without id", `"ACTIVE"`, `"LOADING"`},
		{"unknown data state", `"ACTIVE"`, `"FROZEN"`},
		{"no data state", `"data_state":"ACTIVE",`, ``},
		{"bad remote dir", `file:///r`, `r`},
		{"zero id", `"table_id":7`, `"table_id":0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := table(func(s string) string { return strings.Replace(s, tc.old, tc.new, 1) })
			if v, err := meta.Unmarshal[meta.TableRecord]([]byte(doc)); !errors.Is(err, meta.ErrCorrupt) {
				t.Fatalf("got %+v, %v; want ErrCorrupt", v, err)
			}
		})
	}
	for _, doc := range []string{
		`{"version":1,"table_id":1,"buckets":[{"replicas":["ts-1"],"leader":"ts-2","leader_epoch":0}]}`,
		`{"version":1,"table_id":1,"buckets":[{"replicas":["ts-1","ts-1"],"leader":"","leader_epoch":0}]}`,
		`{"version":1,"table_id":1,"buckets":[{"replicas":["TS_1"],"leader":"","leader_epoch":0}]}`,
		`{"version":1,"table_id":1,"buckets":[]}`,
		`{"version":1,"table_id":1,"buckets":[{"replicas":[],"leader":"","leader_epoch":-1}]}`,
	} {
		if v, err := meta.Unmarshal[meta.Assignment]([]byte(doc)); !errors.Is(err, meta.ErrCorrupt) {
			t.Errorf("assignment %s: got %+v, %v; want ErrCorrupt", doc, v, err)
		}
	}
	if _, err := meta.Unmarshal[meta.PartitionRecord]([]byte(`{"version":1,"partition_id":1,"table_id":1,"name":"a/b","data_state":"ACTIVE","created_ms":1,"modified_ms":1}`)); !errors.Is(err, meta.ErrCorrupt) {
		t.Errorf("partition named a/b: %v", err)
	}
}

func TestMarshalValidates(t *testing.T) {
	for name, enc := range map[string]func() error{
		"version 0":   func() error { _, err := meta.Marshal(meta.DatabaseRecord{Name: "d"}); return err },
		"bad db name": func() error { _, err := meta.Marshal(meta.DatabaseRecord{Version: 1, Name: "a.b"}); return err },
		"bad server": func() error {
			_, err := meta.Marshal(meta.ServerRecord{Version: 1, ID: "TS 1", Address: "x:1"})
			return err
		},
		"no address": func() error { _, err := meta.Marshal(meta.ServerRecord{Version: 1, ID: "ts-1"}); return err },
		"server changelog with a space": func() error {
			_, err := meta.Marshal(meta.ServerRecord{Version: 1, ID: "ts-1", Address: "x:1", Changelog: "local: x"})
			return err
		},
		"server changelog too long": func() error {
			_, err := meta.Marshal(meta.ServerRecord{Version: 1, ID: "ts-1", Address: "x:1", Changelog: strings.Repeat("x", meta.MaxChangelogIdentity+1)})
			return err
		},
		"bucket changelog not ASCII": func() error {
			_, err := meta.Marshal(meta.Assignment{Version: 1, TableID: 7, Buckets: []meta.BucketAssignment{{Replicas: []string{"ts-1"}, Leader: "ts-1", Changelog: "local:é"}}})
			return err
		},
		"dropped data outside kv/": func() error {
			_, err := meta.Marshal(meta.DroppedData{Version: 1, TableID: 1, Dir: "file:///r", DroppedMs: 1})
			return err
		},
		"dropped data dir with a trailing slash": func() error {
			_, err := meta.Marshal(meta.DroppedData{Version: 1, TableID: 1, Dir: "file:///r/kv/d/t-1/", DroppedMs: 1})
			return err
		},
		"dropped data dir not a URI": func() error {
			_, err := meta.Marshal(meta.DroppedData{Version: 1, TableID: 1, Dir: "/r/kv/d/t-1", DroppedMs: 1})
			return err
		},
		"dropped data without a time": func() error {
			_, err := meta.Marshal(meta.DroppedData{Version: 1, TableID: 1, Dir: "file:///r/kv/d/t-1"})
			return err
		},
		"dropped data of table 0": func() error {
			_, err := meta.Marshal(meta.DroppedData{Version: 1, Dir: "file:///r/kv/d/t-0", DroppedMs: 1})
			return err
		},
		"loading no id": func() error {
			_, err := meta.Marshal(meta.PartitionRecord{Version: 1, ID: 1, TableID: 1, Name: "p", DataState: meta.Loading})
			return err
		},
	} {
		if err := enc(); !errors.Is(err, meta.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
	}
	big := meta.Assignment{Version: 1, TableID: 1, Buckets: make([]meta.BucketAssignment, kv.MaxBuckets)}
	long := strings.Repeat("s", 62)
	for i := range big.Buckets {
		big.Buckets[i] = meta.BucketAssignment{Replicas: []string{long + "1", long + "2", long + "3"}, Leader: long + "1"}
	}
	if _, err := meta.Marshal(big); !errors.Is(err, meta.ErrTooLarge) {
		t.Errorf("assignment of 4096 x 3 long ids: %v; want ErrTooLarge", err)
	}
}
