package replica

import (
	"bytes"
	"errors"
	"testing"
)

// TestLookupAnswerBounded: a Lookup's answer is bounded by the host's byte
// limit like a write or a scan page. One row near the limit asked for
// maxRows times in one request made the replica copy it maxRows times
// (with the defaults, 10,000 keys and 4 MiB: 40 GiB from a 100 KB
// request); distinct large rows did the same. One value alone is always
// answered, however large.
func TestLookupAnswerBounded(t *testing.T) {
	const rows, limit = 100, 64 << 10
	e := newEnv(t)
	h := e.hostOnly(t, WithRequestLimits(rows, limit))
	r := open(t, h, e.id(0), nil)
	big := bytes.Repeat([]byte("x"), limit-64)
	write(t, r, []Mutation{{Op: OpUpsert, Key: key(1), Value: big}})
	write(t, r, []Mutation{{Op: OpUpsert, Key: key(2), Value: big}})
	write(t, r, []Mutation{{Op: OpUpsert, Key: key(3), Value: []byte("small")}})

	repeated := make([][]byte, rows)
	for i := range repeated {
		repeated[i] = key(1)
	}
	for name, keys := range map[string][][]byte{
		"one key repeated":  repeated,
		"two distinct rows": {key(2), key(3), key(1)},
	} {
		if out, err := r.Lookup(t.Context(), keys); !errors.Is(err, ErrTooLarge) {
			total := 0
			for _, v := range out {
				total += len(v)
			}
			t.Errorf("%s: %d value bytes, err %v; want ErrTooLarge (limit %d)", name, total, err, limit)
		}
	}
	// Within the limit: one large value, alone or with misses and small
	// ones; and a small value asked for many times.
	for name, c := range map[string]struct {
		keys [][]byte
		want [][]byte
	}{
		"one large value":        {[][]byte{key(9), key(1), key(3), key(8)}, [][]byte{nil, big, []byte("small"), nil}},
		"a small value repeated": {[][]byte{key(3), key(3), key(3)}, [][]byte{[]byte("small"), []byte("small"), []byte("small")}},
		"a miss repeated":        {[][]byte{key(7), key(7)}, [][]byte{nil, nil}},
	} {
		out, err := r.Lookup(t.Context(), c.keys)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range c.want {
			if !bytes.Equal(out[i], c.want[i]) || (out[i] == nil) != (c.want[i] == nil) {
				t.Errorf("%s: value %d is %d bytes, want %d", name, i, len(out[i]), len(c.want[i]))
			}
		}
	}
}
