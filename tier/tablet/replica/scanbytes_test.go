package replica

import (
	"bytes"
	"testing"
)

// TestScanPageByteLimit: beyond its first row a scan page holds at most
// the host's byte limit of keys and values (it took the row that crossed
// the limit: a small first row and two large ones made a page of
// almost twice the limit), and paging on returns every row once.
func TestScanPageByteLimit(t *testing.T) {
	const limit = 1000
	e := newEnv(t)
	h := e.hostOnly(t, WithRequestLimits(100, limit))
	r := open(t, h, e.id(0), nil)
	write(t, r, []Mutation{{Op: OpUpsert, Key: key(1), Value: []byte("s")}})
	write(t, r, []Mutation{{Op: OpUpsert, Key: key(2), Value: bytes.Repeat([]byte("x"), limit-40)}})
	write(t, r, []Mutation{{Op: OpUpsert, Key: key(3), Value: bytes.Repeat([]byte("y"), limit-40)}})
	write(t, r, []Mutation{{Op: OpUpsert, Key: key(4), Value: []byte("z")}})

	check := func(name string, rows []KV) {
		t.Helper()
		size := 0
		for _, kv := range rows {
			size += len(kv.Key) + len(kv.Value)
		}
		if len(rows) > 1 && size > limit {
			t.Errorf("%s: page of %d rows holds %d bytes, above the byte limit %d", name, len(rows), size, limit)
		}
	}
	rows, _, err := r.Scan(t.Context(), nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	check("Scan", rows)
	var got [][]byte
	var after []byte
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		p, err := r.ScanPage(t.Context(), ScanOptions{Limit: 100, StartAfter: after})
		if err != nil {
			t.Fatal(err)
		}
		check("ScanPage", p.Rows)
		for _, kv := range p.Rows {
			got = append(got, kv.Key)
		}
		if p.Next == nil {
			break
		}
		after = p.Next
	}
	if want := [][]byte{key(1), key(2), key(3), key(4)}; len(got) != len(want) || !bytes.Equal(bytes.Join(got, nil), bytes.Join(want, nil)) {
		t.Fatalf("paged keys %q, want %q", got, want)
	}
}
