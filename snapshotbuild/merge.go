package snapshotbuild

import "bytes"

// source is a sorted stream of unique keys of one bucket. key and value are
// valid until the next call to next.
type source interface {
	next() bool
	current() (key, value []byte)
	error() error
}

func (s *runSource) current() ([]byte, []byte) { return s.key, s.val }
func (s *runSource) error() error              { return s.err }
func (s *memSource) current() ([]byte, []byte) { return s.key, s.val }
func (s *memSource) error() error              { return nil }

// merger is a k-way merge over sources ordered by input age: among equal
// keys, the source with the higher prio (later input) comes first, so the
// first pair of each key is the one that wins under last-wins.
//
// The heap holds 16-byte entries (a key prefix and a source index); each
// source's current pair and priority live in slices indexed by source. A
// heap of whole items (prefix, source, priority, key and value: 80 bytes)
// spent a third of its sifting time swapping them (BenchmarkMergeRuns).
type merger struct {
	heap  []heapEntry // a binary min-heap
	srcs  []source
	keys  [][]byte // keys[s], vals[s]: the current pair of source s
	vals  [][]byte
	prios []int
	last  bool // the root's pair was returned and its source not advanced
	err   error
}

type heapEntry struct {
	pfx uint64 // prefix of the source's current key: most comparisons end here
	src int
}

func newMerger(srcs []source, prios []int) *merger {
	m := &merger{
		srcs:  srcs,
		keys:  make([][]byte, len(srcs)),
		vals:  make([][]byte, len(srcs)),
		prios: prios,
	}
	for i, s := range srcs {
		if s.next() {
			m.keys[i], m.vals[i] = s.current()
			m.heap = append(m.heap, heapEntry{pfx: prefix(m.keys[i]), src: i})
		} else if err := s.error(); err != nil {
			m.err = err
		}
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.sift(i, m.heap[i])
	}
	return m
}

// before reports whether a's pair sorts before b's: a smaller key, or the
// same key from later input.
func (m *merger) before(a, b heapEntry) bool {
	if a.pfx != b.pfx {
		return a.pfx < b.pfx
	}
	if c := bytes.Compare(m.keys[a.src], m.keys[b.src]); c != 0 {
		return c < 0
	}
	return m.prios[a.src] > m.prios[b.src]
}

// sift places x at hole i or below it, moving smaller children up.
func (m *merger) sift(i int, x heapEntry) {
	h := m.heap
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && m.before(h[r], h[l]) {
			j = r
		}
		if !m.before(h[j], x) {
			break
		}
		h[i] = h[j]
		i = j
	}
	h[i] = x
}

// next returns the smallest remaining pair; for equal keys the one from the
// latest input first. The slices are valid until the following call.
func (m *merger) next() (key, value []byte, ok bool) {
	if m.err != nil {
		return nil, nil, false
	}
	if m.last {
		// Advance the source of the pair returned last; it is at the root.
		i := m.heap[0].src
		if s := m.srcs[i]; s.next() {
			m.keys[i], m.vals[i] = s.current()
			m.sift(0, heapEntry{pfx: prefix(m.keys[i]), src: i})
		} else {
			if err := s.error(); err != nil {
				m.err = err
				return nil, nil, false
			}
			n := len(m.heap) - 1
			x := m.heap[n]
			m.heap = m.heap[:n]
			if n > 0 {
				m.sift(0, x)
			}
		}
	}
	if len(m.heap) == 0 {
		m.last = false
		return nil, nil, false
	}
	m.last = true
	i := m.heap[0].src
	return m.keys[i], m.vals[i], true
}
