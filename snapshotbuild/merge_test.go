package snapshotbuild

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// sliceSource is a source over sorted pairs, failing with err at the end
// when err is set.
type sliceSource struct {
	keys, vals [][]byte
	i          int
	err        error
}

func (s *sliceSource) next() bool {
	if s.i >= len(s.keys) {
		return false
	}
	s.i++
	return true
}
func (s *sliceSource) current() ([]byte, []byte) { return s.keys[s.i-1], s.vals[s.i-1] }
func (s *sliceSource) error() error {
	if s.i >= len(s.keys) {
		return s.err
	}
	return nil
}

// TestMerger merges random sources whose keys overlap (shared 8-byte
// prefixes included, so that ties go to the full key and then to the
// priority) and compares with a map of the last input's value per key.
func TestMerger(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		nsrc := 1 + rng.IntN(20)
		prios := rng.Perm(nsrc)
		var srcs []source
		want := map[string]struct {
			prio int
			val  string
		}{}
		for s := range nsrc {
			set := map[string]bool{}
			for range rng.IntN(300) {
				// 8 shared bytes and a short tail, or a short key.
				k := fmt.Sprintf("prefix%02d%d", rng.IntN(3), rng.IntN(50))
				if rng.IntN(4) == 0 {
					k = k[:rng.IntN(len(k)+1)]
				}
				set[k] = true
			}
			keys := make([][]byte, 0, len(set))
			for k := range set {
				keys = append(keys, []byte(k))
			}
			slices.SortFunc(keys, bytes.Compare)
			src := &sliceSource{keys: keys}
			for _, k := range keys {
				v := fmt.Sprintf("src%d", s)
				src.vals = append(src.vals, []byte(v))
				if w, ok := want[string(k)]; !ok || prios[s] > w.prio {
					want[string(k)] = struct {
						prio int
						val  string
					}{prios[s], v}
				}
			}
			srcs = append(srcs, src)
		}
		m := newMerger(srcs, prios)
		var prev []byte
		got := map[string]string{}
		for {
			k, v, ok := m.next()
			if !ok {
				break
			}
			c := bytes.Compare(prev, k)
			if prev != nil && c > 0 {
				t.Fatalf("seed %d: %q after %q", seed, k, prev)
			}
			if prev == nil || c != 0 {
				got[string(k)] = string(v) // the first of equal keys wins
			}
			prev = append(prev[:0], k...)
			if prev == nil {
				prev = []byte{}
			}
		}
		if m.err != nil {
			t.Fatal(m.err)
		}
		if len(got) != len(want) {
			t.Fatalf("seed %d: %d keys, want %d", seed, len(got), len(want))
		}
		for k, w := range want {
			if got[k] != w.val {
				t.Fatalf("seed %d: key %q = %s, want %s", seed, k, got[k], w.val)
			}
		}
		if _, _, ok := m.next(); ok {
			t.Fatalf("seed %d: a pair after the end", seed)
		}
	}
}

// TestMergerSourceError: a source that fails ends the merge with its error.
func TestMergerSourceError(t *testing.T) {
	boom := errors.New("boom")
	a := &sliceSource{keys: [][]byte{[]byte("a"), []byte("c")}, vals: [][]byte{{1}, {2}}}
	b := &sliceSource{keys: [][]byte{[]byte("b")}, vals: [][]byte{{3}}, err: boom}
	m := newMerger([]source{a, b}, []int{0, 1})
	var keys []string
	for {
		k, _, ok := m.next()
		if !ok {
			break
		}
		keys = append(keys, string(k))
	}
	if !errors.Is(m.err, boom) || !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("keys %q, err %v; want [a b] and boom", keys, m.err)
	}
}
