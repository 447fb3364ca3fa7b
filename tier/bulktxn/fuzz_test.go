package bulktxn

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
)

// seedRecords returns records as machines persist them, in every state:
// the record Begin creates (of a table and of a partition), then with the
// fence ready, the manifest frozen, an abort in progress, COMMITTING
// half adopted, COMMITTED and ABORTED.
func seedRecords(tb testing.TB) []bulkload.Record {
	tb.Helper()
	begin := func(part string, n int) bulkload.Record {
		b := Begin{
			Req: 1, TxnID: testTxnID, CallerToken: "t1", Principal: bulkload.Principal{Type: "User", Name: "alice"},
			Now: base, Target: bulkload.Target{Database: "sales", Table: "orders", Partition: part}, TableID: 7,
			RemoteDataDir: "s3://bucket/thaw", Schema: testSchema(n, part != ""), Holders: placement(n, []string{"ts-1", "ts-2"}, 2),
		}
		if part != "" {
			b.PartitionID = 3
		}
		_, effs, err := New(DefaultConfig(), b)
		if err != nil {
			tb.Fatal(err)
		}
		return effs[0].(PersistRecord).Record
	}
	at := func(r bulkload.Record, d time.Duration) bulkload.Record {
		r = r.Clone()
		r.UpdatedMs = r.CreatedMs + d.Milliseconds()
		return r
	}
	begun := begin("", 3)
	fenced := at(begun, time.Second)
	fenced.SnapshotIDs = []int64{4, 0, 9}
	frozen := at(fenced, time.Minute)
	frozen.Manifest = &bulkload.ManifestRef{
		Path:   snapTarget(&frozen).ManifestPath(testTxnID),
		Length: 321, SHA256: strings.Repeat("ab", 32),
	}
	frozen.CommitDecisionDeadlineMs = frozen.UpdatedMs + time.Hour.Milliseconds()
	aborting := at(fenced, 2*time.Minute)
	reason := bulkload.AbortedByCaller
	aborting.AbortReason = &reason
	committing := at(frozen, 2*time.Minute)
	committing.State, committing.AdoptedBuckets = bulkload.Committing, 1
	committed := at(committing, 3*time.Minute)
	committed.State, committed.AdoptedBuckets = bulkload.Committed, committed.Buckets
	committed.ResultExpireMs = committed.UpdatedMs + time.Hour.Milliseconds()
	aborted := at(aborting, 3*time.Minute)
	aborted.State, aborted.AbortMessage = bulkload.Aborted, "aborted by caller <alice>"
	aborted.ResultExpireMs = aborted.UpdatedMs + time.Hour.Milliseconds()
	partition := at(begin("2026-01-01", 2), time.Second)
	partition.SnapshotIDs = []int64{1, 1}
	out := []bulkload.Record{begun, fenced, frozen, aborting, committing, committed, aborted, partition}
	for _, r := range out {
		if err := r.Validate(); err != nil {
			tb.Fatalf("seed record %+v: %v", r, err)
		}
	}
	return out
}

// FuzzRecover feeds what etcd might hold under a transaction's key to the
// decoder and a recovering machine: neither panics; a refused value is an
// error wrapping bulkload.ErrInvalidRecord that says what is wrong; a
// decoded record re-encodes to bytes that decode to an equal record; and
// Recover, under each registration etcd might show, either refuses it
// (invalid, inconsistent, unexpected) or resumes a machine whose every
// write is a valid record with a schema that agrees with it.
func FuzzRecover(f *testing.F) {
	for _, r := range seedRecords(f) {
		b, err := bulkload.EncodeRecord(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, tc := range badRecords(f) {
		f.Add(tc.doc)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := bulkload.DecodeRecord(b)
		if err != nil {
			if !errors.Is(err, bulkload.ErrInvalidRecord) || strings.TrimSpace(strings.TrimPrefix(err.Error(), bulkload.ErrInvalidRecord.Error()+":")) == "" {
				t.Fatalf("error %q: want ErrInvalidRecord naming the problem", err)
			}
			return
		}
		enc, err := bulkload.EncodeRecord(rec)
		if err != nil {
			t.Fatalf("encode of decoded %q: %v", b, err)
		}
		rec2, err := bulkload.DecodeRecord(enc)
		if err != nil {
			t.Fatalf("decode of encoded %q: %v", enc, err)
		}
		if !reflect.DeepEqual(rec, rec2) {
			t.Fatalf("round trip of %q changed %+v into %+v", b, rec, rec2)
		}
		if enc2, err := bulkload.EncodeRecord(rec2); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable: %q then %q (%v)", enc, enc2, err)
		}
		for _, reg := range []Registration{RegActive, RegLoading, RegActiveWithID} {
			m, effs, err := Recover(DefaultConfig(), rec, Observed{
				RecordRev: 5, Registration: reg, RegistrationRev: 4,
				Holders: placement(rec.Buckets, []string{"ts-1", "ts-2"}, 2), Now: timeOf(rec.UpdatedMs).Add(time.Second),
			})
			if err != nil {
				if !errors.Is(err, bulkload.ErrInvalidRecord) && !errors.Is(err, ErrInconsistent) && !errors.Is(err, ErrUnexpected) {
					t.Fatalf("recover of %q under %s: unexpected error %v", b, reg, err)
				}
				continue
			}
			if got := m.Record(); !reflect.DeepEqual(got, rec) {
				t.Fatalf("recover of %q changed the record into %+v", b, got)
			}
			for _, eff := range effs {
				p, ok := eff.(PersistRecord)
				if !ok {
					continue
				}
				if _, err := bulkload.EncodeRecord(p.Record); err != nil {
					t.Fatalf("recover of %q under %s writes an invalid record: %v", b, reg, err)
				}
				if err := checkRecordSchema(&p.Record); err != nil {
					t.Fatalf("recover of %q under %s writes a record whose schema disagrees: %v", b, reg, err)
				}
			}
		}
	})
}
