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
type merger struct {
	items []mergeItem // a binary min-heap
	last  int         // index into srcs of the item returned last; -1 none
	err   error
}

type mergeItem struct {
	pfx      uint64 // prefix(key): most comparisons end here
	src      source
	prio     int
	key, val []byte
}

func newMerger(srcs []source, prios []int) *merger {
	m := &merger{last: -1}
	for i, s := range srcs {
		if s.next() {
			k, v := s.current()
			m.items = append(m.items, mergeItem{pfx: prefix(k), src: s, prio: prios[i], key: k, val: v})
		} else if err := s.error(); err != nil {
			m.err = err
		}
	}
	for i := len(m.items)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return m
}

func (m *merger) less(i, j int) bool {
	a, b := &m.items[i], &m.items[j]
	if a.pfx != b.pfx {
		return a.pfx < b.pfx
	}
	if c := bytes.Compare(a.key, b.key); c != 0 {
		return c < 0
	}
	return a.prio > b.prio
}

func (m *merger) down(i int) {
	n := len(m.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && m.less(r, l) {
			j = r
		}
		if !m.less(j, i) {
			return
		}
		m.items[i], m.items[j] = m.items[j], m.items[i]
		i = j
	}
}

// next returns the smallest remaining pair; for equal keys the one from the
// latest input first. The slices are valid until the following call.
func (m *merger) next() (key, value []byte, ok bool) {
	if m.err != nil {
		return nil, nil, false
	}
	if m.last >= 0 {
		// Advance the source of the pair returned last; it is at the root.
		top := &m.items[0]
		if top.src.next() {
			top.key, top.val = top.src.current()
			top.pfx = prefix(top.key)
			m.down(0)
		} else {
			if err := top.src.error(); err != nil {
				m.err = err
				return nil, nil, false
			}
			n := len(m.items) - 1
			m.items[0] = m.items[n]
			m.items = m.items[:n]
			if n > 0 {
				m.down(0)
			}
		}
	}
	if len(m.items) == 0 {
		return nil, nil, false
	}
	m.last = 0
	return m.items[0].key, m.items[0].val, true
}
