package kv

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"testing"
)

// benchSchema is a typical promoted table: a two-column key and a mix of value types.
func benchSchema(t testing.TB, bucketing Bucketing, bucketKey ...string) TableSchema {
	return TableSchema{
		SchemaID: 2,
		Columns: []Column{
			col(t, "id", "BIGINT", false),
			col(t, "region", "STRING", false),
			col(t, "qty", "INT", false),
			col(t, "price", "DECIMAL(12,2)", false),
			col(t, "updated", "TIMESTAMP_LTZ(6)", false),
			col(t, "note", "STRING", true),
			col(t, "score", "DOUBLE", false),
			col(t, "ok", "BOOLEAN", false),
			col(t, "day", "DATE", false),
		},
		PrimaryKey:    []string{"id", "region", "day"},
		PartitionKeys: []string{"day"},
		BucketKey:     bucketKey,
		Buckets:       64,
		Bucketing:     bucketing,
	}
}

func benchRows(n int) []Row {
	rows := make([]Row, n)
	for i := range rows {
		var note any
		if i%3 != 0 {
			note = fmt.Sprintf("note number %d", i)
		}
		rows[i] = Row{int64(i) * 7919, fmt.Sprintf("region-%d", i%11), int32(i % 1000),
			DecimalFromInt64(int64(i) * 101), Timestamp{Millis: 1700000000000 + int64(i), NanoOfMilli: int32(i%1000) * 1000},
			note, float64(i) / 3, i%2 == 0, Date(19723)}
	}
	return rows
}

// structFields is a typed, non-boxing Fields over benchRows' values, shaped like the
// snapshot builder's Arrow adapter.
type structFields struct {
	id       int64
	region   []byte
	qty      int32
	price    Decimal
	updated  Timestamp
	note     []byte
	noteNull bool
	score    float64
	ok       bool
	day      int32
}

func toStructFields(r Row) *structFields {
	f := &structFields{id: r[0].(int64), region: []byte(r[1].(string)), qty: r[2].(int32), price: r[3].(Decimal),
		updated: r[4].(Timestamp), noteNull: r[5] == nil, score: r[6].(float64), ok: r[7].(bool), day: int32(r[8].(Date))}
	if !f.noteNull {
		f.note = []byte(r[5].(string))
	}
	return f
}

func (f *structFields) IsNull(i int) bool       { return i == 5 && f.noteNull }
func (f *structFields) Bool(int) bool           { return f.ok }
func (f *structFields) Int8(int) int8           { panic("unused") }
func (f *structFields) Int16(int) int16         { panic("unused") }
func (f *structFields) Float32(int) float32     { panic("unused") }
func (f *structFields) Float64(int) float64     { return f.score }
func (f *structFields) Decimal(int) Decimal     { return f.price }
func (f *structFields) Timestamp(int) Timestamp { return f.updated }
func (f *structFields) Int64(int) int64         { return f.id }
func (f *structFields) Int32(i int) int32 {
	if i == 2 {
		return f.qty
	}
	return f.day
}

func (f *structFields) Bytes(i int) []byte {
	if i == 1 {
		return f.region
	}
	return f.note
}

func TestEncoderMatchesConvenienceForms(t *testing.T) {
	for _, tc := range []struct {
		name      string
		bucketing Bucketing
		bucketKey []string
	}{
		{"fluss default", BucketingFluss, nil},
		{"paimon default", BucketingPaimon, nil},
		{"fluss custom", BucketingFluss, []string{"region"}},
		{"iceberg", BucketingIceberg, []string{"id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl := mustTable(t, benchSchema(t, tc.bucketing, tc.bucketKey...))
			enc := tbl.NewEncoder()
			for _, row := range benchRows(200) {
				for _, f := range []Fields{RowFields(row), toStructFields(row)} {
					key, value, bucket, err := enc.Encode(f)
					if err != nil {
						t.Fatal(err)
					}
					wantKey, err1 := tbl.EncodeKey(row)
					wantValue, err2 := tbl.EncodeValue(row)
					wantBucket, err3 := tbl.Bucket(row)
					if err := errors.Join(err1, err2, err3); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(key, wantKey) || !bytes.Equal(value, wantValue) || bucket != wantBucket {
						t.Fatalf("Encode(%v) = % x, % x, %d; want % x, % x, %d", row, key, value, bucket, wantKey, wantValue, wantBucket)
					}
					if bucket < 0 || bucket >= 64 {
						t.Fatalf("bucket %d out of range", bucket)
					}
					if tc.bucketKey == nil || tc.bucketing == BucketingIceberg && len(tbl.physKey) == 1 {
						if b, err := tbl.BucketOfKey(key); err != nil || b != bucket {
							t.Fatalf("BucketOfKey = %d, %v; want %d", b, err, bucket)
						}
					}
				}
			}
		})
	}
}

func TestIcebergBucketing(t *testing.T) {
	tbl := mustTable(t, TableSchema{
		Columns:    []Column{col(t, "name", "STRING", false)},
		PrimaryKey: []string{"name"},
		Buckets:    16,
		Bucketing:  BucketingIceberg,
	})
	key, _, bucket, err := tbl.NewEncoder().Encode(RowFields(Row{"iceberg"}))
	if err != nil {
		t.Fatal(err)
	}
	// The key is compacted; the bucket hashes the raw UTF-8 (Iceberg's encoding).
	if !bytes.Equal(key, []byte("\x07iceberg")) || bucket != 1210000089%16 {
		t.Fatalf("key % x bucket %d", key, bucket)
	}
	if b, err := tbl.BucketOfKey(key); err != nil || b != bucket {
		t.Fatalf("BucketOfKey = %d, %v", b, err)
	}
	_, _, _, err = tbl.NewEncoder().Encode(RowFields(Row{""}))
	wantErr(t, err, `column "name": an empty value cannot be a bucket key`)
	if _, err := tbl.Bucket(Row{""}); err == nil {
		t.Fatal("Bucket accepted an empty iceberg bucket key")
	}
	if _, err := tbl.BucketOfKey([]byte{0}); err == nil {
		t.Fatal("BucketOfKey accepted an empty iceberg bucket key")
	}

	_, err = AppendIcebergKey(nil, mustType(t, "BOOLEAN"), RowFields(Row{true}), 0)
	wantErr(t, err, "type BOOLEAN cannot be an iceberg bucket key")
	_, err = AppendIcebergKey(nil, mustType(t, "INT"), RowFields(Row{int64(1)}), 0)
	wantErr(t, err, "Go type int64 does not match INT")
	_, err = AppendIcebergKey(nil, mustType(t, "INT"), RowFields(Row{nil}), 0)
	wantErr(t, err, "a null value cannot be a bucket key")
	if !errors.Is(err, ErrInvalidRow) {
		t.Fatal("AppendIcebergKey error does not wrap ErrInvalidRow")
	}
}

func TestPaimonNegativeRemainder(t *testing.T) {
	// Find a key whose hash is negative: Paimon takes abs of Java's signed remainder.
	for i := range 1000 {
		key := []byte{byte(i), byte(i >> 8)}
		h := HashUnsafeBytes(key, 42)
		if h >= 0 {
			continue
		}
		if got, want := PaimonBucket(key, 10), int(-(h % 10)); got != want {
			t.Fatalf("PaimonBucket(% x) = %d, want %d", key, got, want)
		}
		return
	}
	t.Fatal("no key with a negative hash")
}

func TestEncoderAllocations(t *testing.T) {
	rows := benchRows(64)
	for _, tc := range []struct {
		name      string
		bucketing Bucketing
		bucketKey []string
	}{
		{"fluss", BucketingFluss, nil},
		{"custom bucket key", BucketingPaimon, []string{"region"}},
		{"iceberg", BucketingIceberg, []string{"region"}},
	} {
		tbl := mustTable(t, benchSchema(t, tc.bucketing, tc.bucketKey...))
		enc := tbl.NewEncoder()
		fields := make([]Fields, len(rows))
		structs := make([]Fields, len(rows))
		for i, r := range rows {
			fields[i], structs[i] = RowFields(r), toStructFields(r)
		}
		for name, fs := range map[string][]Fields{"RowFields": fields, "struct": structs} {
			i := 0
			allocs := testing.AllocsPerRun(1000, func() {
				f := fs[i%len(fs)]
				i++
				if _, _, _, err := enc.Encode(f); err != nil {
					t.Fatal(err)
				}
				if _, err := enc.PartitionName(f); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s/%s: %v allocations per row, want 0", tc.name, name, allocs)
			}
		}
	}

	// Negative decimals beyond int64 need big.Int scratch space, which is reused too.
	tbl := mustTable(t, TableSchema{
		Columns:    []Column{col(t, "d", "DECIMAL(38,0)", false)},
		PrimaryKey: []string{"d"},
		Buckets:    1,
		Bucketing:  BucketingIceberg,
	})
	enc := tbl.NewEncoder()
	row := RowFields(Row{DecimalFromBig(new(big.Int).Neg(bigPow10[30]))})
	if allocs := testing.AllocsPerRun(100, func() { _, _, _, _ = enc.Encode(row) }); allocs != 0 {
		t.Errorf("negative big decimal: %v allocations per row, want 0 once warm", allocs)
	}
}

func BenchmarkEncode(b *testing.B) {
	rows := benchRows(1024)
	for _, bucketing := range []Bucketing{BucketingFluss, BucketingIceberg} {
		var bucketKey []string
		if bucketing == BucketingIceberg {
			bucketKey = []string{"id"}
		}
		tbl := mustTable(b, benchSchema(b, bucketing, bucketKey...))
		fields := make([]Fields, len(rows))
		for i, r := range rows {
			fields[i] = toStructFields(r)
		}
		b.Run(bucketing.String(), func(b *testing.B) {
			enc := tbl.NewEncoder()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, _, _, err := enc.Encode(fields[i&1023]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkDecodeValue(b *testing.B) {
	tbl := mustTable(b, benchSchema(b, BucketingFluss))
	value, err := tbl.EncodeValue(benchRows(2)[1])
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := tbl.DecodeValue(value); err != nil {
			b.Fatal(err)
		}
	}
}
