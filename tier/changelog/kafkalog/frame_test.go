package kafkalog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/thawdb/thaw/tier/changelog"
)

func TestFrameRoundTrip(t *testing.T) {
	recs := [][]byte{[]byte("a"), {}, bytes.Repeat([]byte{7}, 300)}
	key, value := encodeBatch(42, recs)
	e, err := decodeEntry(9, key, value)
	if err != nil || e.marker || e.first != 42 || e.k != 9 || len(e.recs) != 3 {
		t.Fatalf("batch: %+v, %v", e, err)
	}
	for i := range recs {
		if !bytes.Equal(e.recs[i], recs[i]) {
			t.Fatalf("record %d: %q", i, e.recs[i])
		}
	}
	key, value = encodeMarker(1 << 40)
	if e, err := decodeEntry(3, key, value); err != nil || !e.marker || e.reset || e.first != 1<<40 {
		t.Fatalf("marker: %+v, %v", e, err)
	}
	key, value = encodeReset(1<<40, 12)
	if e, err := decodeEntry(4, key, value); err != nil || !e.marker || !e.reset || e.first != 1<<40 || e.from != 12 {
		t.Fatalf("reset marker: %+v, %v", e, err)
	}
}

// TestFrameRejects: every malformed record is corruption, not a guess.
func TestFrameRejects(t *testing.T) {
	key, batch := encodeBatch(5, [][]byte{[]byte("xy")})
	neg := binary.BigEndian.AppendUint64(nil, 1<<63)
	near := binary.BigEndian.AppendUint64(nil, 1<<63-1)
	for name, c := range map[string]struct{ key, value []byte }{
		"short key":        {key[:7], batch},
		"long key":         {append(key, 0), batch},
		"negative offset":  {neg, batch},
		"overflow":         {near, batch},
		"empty value":      {key, nil},
		"one byte":         {key, []byte{frameVersion}},
		"version":          {key, []byte{2, kindBatch, 1, 0}},
		"kind":             {key, []byte{frameVersion, 9, 1, 0}},
		"marker trailing":  {key, []byte{frameVersion, kindMarker, 0}},
		"reset short":      {key, []byte{frameVersion, kindReset, 0, 0, 0, 0, 0, 0, 0}},
		"reset trailing":   {key, append(binary.BigEndian.AppendUint64([]byte{frameVersion, kindReset}, 1), 0)},
		"reset not up":     {key, binary.BigEndian.AppendUint64([]byte{frameVersion, kindReset}, 5)},
		"reset down":       {key, binary.BigEndian.AppendUint64([]byte{frameVersion, kindReset}, 6)},
		"reset negative":   {neg, binary.BigEndian.AppendUint64([]byte{frameVersion, kindReset}, 1)},
		"reset from neg":   {near, binary.BigEndian.AppendUint64([]byte{frameVersion, kindReset}, 1<<63)},
		"no count":         {key, []byte{frameVersion, kindBatch}},
		"zero count":       {key, []byte{frameVersion, kindBatch, 0}},
		"count too large":  {key, []byte{frameVersion, kindBatch, 5, 0}},
		"length past end":  {key, []byte{frameVersion, kindBatch, 1, 3, 'a'}},
		"trailing bytes":   {key, append(bytes.Clone(batch), 0)},
		"truncated record": {key, batch[:len(batch)-1]},
		"overlong count":   {key, []byte{frameVersion, kindBatch, 0x81, 0x00, 0}},
		"overlong length":  {key, []byte{frameVersion, kindBatch, 1, 0x80, 0x00}},
	} {
		if _, err := decodeEntry(0, c.key, c.value); !errors.Is(err, changelog.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzDecodeEntry(f *testing.F) {
	k, v := encodeBatch(3, [][]byte{[]byte("abc"), nil})
	f.Add(k, v)
	k, v = encodeMarker(10)
	f.Add(k, v)
	k, v = encodeReset(10, 4)
	f.Add(k, v)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		e, err := decodeEntry(0, key, value)
		if err != nil {
			return
		}
		var k2, v2 []byte
		switch {
		case e.reset:
			k2, v2 = encodeReset(e.first, e.from)
		case e.marker:
			k2, v2 = encodeMarker(e.first)
		default:
			k2, v2 = encodeBatch(e.first, e.recs)
		}
		if !bytes.Equal(k2, key) || !bytes.Equal(v2, value) {
			t.Fatalf("not canonical: %x %x -> %x %x", key, value, k2, v2)
		}
	})
}

// TestChain: the chain rule as every reader applies it.
func TestChain(t *testing.T) {
	b := func(k, first int64, n int) entry { return entry{k: k, first: first, recs: make([][]byte, n)} }
	m := func(k, next int64) entry { return entry{k: k, marker: true, first: next} }
	r := func(k, next, from int64) entry {
		return entry{k: k, marker: true, reset: true, first: next, from: from}
	}
	for name, c := range map[string]struct {
		ents  []entry
		valid []bool
		end   int64
	}{
		"batches":               {[]entry{b(0, 0, 2), b(1, 2, 3)}, []bool{true, true}, 5},
		"stale batch skipped":   {[]entry{b(0, 0, 2), b(1, 2, 1), b(2, 2, 4), b(3, 3, 1)}, []bool{true, true, false, true}, 4},
		"batch from the future": {[]entry{b(0, 0, 2), b(1, 5, 1)}, []bool{true, false}, 2},
		"marker moves up":       {[]entry{b(0, 0, 2), m(1, 10), b(2, 10, 1)}, []bool{true, true, true}, 11},
		"marker at the end":     {[]entry{b(0, 0, 2), m(1, 2), b(2, 2, 1)}, []bool{true, true, true}, 3},
		"stale marker":          {[]entry{b(0, 0, 2), m(1, 1), b(2, 2, 1)}, []bool{true, false, true}, 3},
		"anchored on a marker":  {[]entry{m(7, 100), b(8, 100, 1), b(9, 100, 1)}, []bool{true, true, false}, 101},
		"anchored past start":   {[]entry{b(4, 40, 2), b(6, 42, 1)}, []bool{true, true}, 43},
		"reset from the end":    {[]entry{m(0, 2), r(1, 10, 2), b(2, 10, 1)}, []bool{true, true, true}, 11},
		"reset lost to a batch": {[]entry{m(0, 2), b(1, 2, 1), r(2, 10, 2), b(3, 3, 1)}, []bool{true, true, false, true}, 4},
		"reset from below":      {[]entry{b(0, 0, 4), r(1, 10, 2)}, []bool{true, false}, 4},
		"anchored on a reset":   {[]entry{r(5, 10, 2), b(6, 10, 1), b(7, 2, 1)}, []bool{true, true, false}, 11},
	} {
		c0 := anchor(c.ents[0])
		got := []bool{true}
		for _, e := range c.ents[1:] {
			got = append(got, c0.step(e))
		}
		for i := range got {
			if got[i] != c.valid[i] {
				t.Errorf("%s: entry %d valid %v, want %v", name, i, got[i], c.valid[i])
			}
		}
		if c0.x != c.end || c0.k != c.ents[len(c.ents)-1].k+1 {
			t.Errorf("%s: cursor %+v, want end %d", name, c0, c.end)
		}
	}
}
