package bulkloadclient

import (
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
)

// TestAddRowOfTheReservedKey: a row whose key encodes to the tier's
// replica state key (SMALLINT and DOUBLE keys are raw bytes) failed the
// whole session (the builder refuses the key for good); AddRow refuses the
// row alone, as any row that does not fit, and the session goes on.
func TestAddRowOfTheReservedKey(t *testing.T) {
	const schema = `{"schema_id":0,"columns":[{"name":"a","type":"SMALLINT","nullable":false},` +
		`{"name":"b","type":"BIGINT","nullable":false},{"name":"c","type":"DOUBLE","nullable":false},` +
		`{"name":"d","type":"DOUBLE","nullable":false},{"name":"e","type":"SMALLINT","nullable":false}],` +
		`"primary_key":["a","b","c","d","e"],"buckets":1,"bucketing":"fluss"}`
	remote := "file://" + filepath.ToSlash(t.TempDir())
	txn := "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
	bc, err := fromTargetInfo(&tierv1.BulkLoadTargetInfo{
		Handle:   &tierv1.BulkLoadHandle{Target: &tierv1.TargetPath{Database: "shop", Table: "k"}, TableId: 7, TxnId: txn},
		SchemaId: 0, TableSchemaJson: []byte(schema), BucketCount: 1, Bucketing: "fluss",
		RemoteDataDir: remote, SnapshotIds: []int64{1},
		ManifestPath: remote + "/kv/shop/k-7/_bulkload/" + txn + "/manifest", BuildDeadlineMs: time.Now().Add(time.Hour).UnixMilli(),
	})
	if err != nil {
		t.Fatal(err)
	}
	k := []byte(snapshot.StateKey)
	le := binary.LittleEndian
	row := kv.Row{int16(le.Uint16(k[0:2])), int64(k[2]), math.Float64frombits(le.Uint64(k[3:11])),
		math.Float64frombits(le.Uint64(k[11:19])), int16(le.Uint16(k[19:21]))}
	if key, _ := bc.Table().EncodeKey(row); string(key) != snapshot.StateKey {
		t.Fatalf("key %q", key)
	}
	s := openSession(t, bc, SessionOptions{})
	if err := s.AddRow(t.Context(), row); !errors.Is(err, snapshotbuild.ErrInvalidRow) {
		t.Fatalf("the row of the reserved key: %v", err)
	}
	if err := s.AddRow(t.Context(), kv.Row{int16(1), int64(2), 3.0, 4.0, int16(5)}); err != nil {
		t.Fatalf("valid row after a rejected one: %v", err)
	}
}
