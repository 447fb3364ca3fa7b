package promoter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// seedRecords returns records as the executor writes them: a new attempt,
// one begun, one committed, an aborted one with a retriable error, a
// failed one, in several time zones.
func seedRecords() []Record {
	now := time.Date(2024, 1, 8, 10, 30, 0, 123456789, time.UTC)
	id := PromotionID("default", "lake.events", "shop.events", "2024-01-05", 42)
	planned := Record{
		ID: id, Policy: "events", Catalog: "default", LakeTable: "lake.events", Partition: "2024-01-05",
		LakePartitions: []string{"0/event_day=2024-01-05", "1/event_day=2024-01-05/region=eu"}, SourceSnapshotID: 42,
		ScanSnapshotID: 43, Database: "shop", Table: "events", CallerToken: CallerToken(id, 1), Attempt: 1,
		Phase: PhasePlanned, Buckets: 4, CreatedAt: now, UpdatedAt: now,
	}
	begun := planned
	begunAt := now.Add(time.Second)
	begun.Phase, begun.TxnID, begun.BegunAt, begun.UpdatedAt = PhaseBegun, "0b0d6f7e-52f1-4b8e-9a43-0b2a1e6c1d11", &begunAt, begunAt
	committed := begun
	committedAt := now.Add(time.Minute).In(time.FixedZone("", 2*3600))
	committed.Phase, committed.CommittedAt, committed.Rows, committed.Bytes, committed.Duplicates = PhaseCommitted, &committedAt, 1000, 1<<20, 7
	aborted := begun
	aborted.Phase, aborted.Error, aborted.Retriable = PhaseAborted, "shutdown: context canceled <&>", true
	failed := planned
	failed.ID = PromotionID("c", "ns.t", "db.t", "", -5)
	failed.Partition, failed.LakePartitions, failed.SourceSnapshotID, failed.Attempt = "", nil, -5, 3
	failed.CallerToken = CallerToken(failed.ID, 3)
	failed.Phase, failed.Error = PhaseFailed, "promoter: schema: column \"x\" \u00e9"
	failed.CreatedAt = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	return []Record{planned, begun, committed, aborted, failed}
}

// FuzzDecodeRecord: decoding a stored ledger value never panics; an error
// says what is wrong, and a refused version names the version this
// promoter reads; a decoded record is valid, its encoding is of the
// current version, decodes to an equal record and encodes to the same
// bytes.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range seedRecords() {
		b, err := encodeRecord(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(r.ID, b)
		// As promoters wrote it before records carried a version.
		old, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(r.ID, old)
		f.Add(r.ID, bytes.Replace(b, []byte(`"version":1`), []byte(`"version":3`), 1))
		r.InterruptedBuilds = 1
		if b, err = encodeRecord(r); err != nil {
			f.Fatal(err)
		}
		f.Add(r.ID, b)
	}
	for _, tc := range badRecords() {
		f.Add(tc.id, []byte(tc.doc))
	}
	f.Fuzz(func(t *testing.T, id string, b []byte) {
		r, err := decodeRecord(id, b)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "decode record: ") || len(msg) == len("decode record: ") {
				t.Fatalf("error %q names no problem", msg)
			}
			if want := fmt.Sprintf("this promoter reads versions 1 to %d; upgrade it", LedgerRecordVersion); errors.Is(err, ErrRecordVersion) &&
				(!strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "decode record: record version ")) {
				t.Fatalf("version error %q does not say %q", err, want)
			}
			return
		}
		if err := r.validate(); err != nil {
			t.Fatalf("decoded %q is not valid: %v", b, err)
		}
		if r.ID != id {
			t.Fatalf("decoded record %s under the key of %s", r.ID, id)
		}
		enc, err := encodeRecord(r)
		if err != nil {
			t.Fatalf("encode of decoded %q: %v", b, err)
		}
		// The lowest version that holds it: 2 with interrupted builds, else 1.
		version := 1
		if r.InterruptedBuilds != 0 {
			version = 2
		}
		if !bytes.HasPrefix(enc, fmt.Appendf(nil, `{"version":%d,`, version)) {
			t.Fatalf("encoding of decoded %q is not of version %d: %q", b, version, enc)
		}
		r2, err := decodeRecord(id, enc)
		if err != nil {
			t.Fatalf("decode of encoded %q: %v", enc, err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip of %q changed %+v into %+v", b, r, r2)
		}
		if enc2, err := encodeRecord(r2); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable: %q then %q (%v)", enc, enc2, err)
		}
	})
}

// FuzzDecodeRequest: decoding a stored request never panics, an error says
// what is wrong, and a decoded request encodes to a value that decodes to
// the same request and encodes to the same bytes again.
func FuzzDecodeRequest(f *testing.F) {
	at := time.Date(2024, 1, 8, 10, 30, 0, 123456789, time.UTC)
	for _, r := range []StoredRequest{
		{Key: Key{Policy: "events", Partition: "2024-01-02"}, Forced: true, IDs: []string{PromotionID("default", "lake.events", "shop.events", "2024-01-02", 42)}, At: at},
		{Key: Key{Policy: "events"}, At: at},
	} {
		b, err := encodeRequest(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(bytes.Replace(b, []byte(`"version":1`), []byte(`"version":2`), 1))
	}
	f.Add([]byte(`{"version":1,"policy":"p","partition":"x","forced":false,"ids":null,"requested_at":"2024-01-08T12:30:00+02:00"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "decode request: ") || len(msg) == len("decode request: ") {
				t.Fatalf("error %q names no problem", msg)
			}
			return
		}
		enc, err := encodeRequest(r)
		if err != nil {
			t.Fatalf("encode of decoded %q: %v", b, err)
		}
		r2, err := decodeRequest(enc)
		if err != nil {
			t.Fatalf("decode of encoded %q: %v", enc, err)
		}
		if r2.Key != r.Key || r2.Forced != r.Forced || len(r2.IDs) != len(r.IDs) || !r2.At.Equal(r.At) ||
			(len(r.IDs) > 0 && !reflect.DeepEqual(r.IDs, r2.IDs)) {
			t.Fatalf("round trip of %q changed %+v into %+v", b, r, r2)
		}
		if enc2, err := encodeRequest(r2); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable: %q then %q (%v)", enc, enc2, err)
		}
	})
}
