package changelog

import (
	"bytes"
	"strings"
	"testing"
)

func TestSegmentName(t *testing.T) {
	for _, tc := range []struct {
		name string
		base int64
		ok   bool
	}{
		{"00000000000000000000.log", 0, true},
		{"00000000000000001000.log", 1000, true},
		{"09223372036854775807.log", 1<<63 - 1, true},
		{"09223372036854775808.log", 0, false}, // overflows int64
		{"0000000000000001000.log", 0, false},  // 19 digits
		{"00000000000000001000.idx", 0, false},
		{"0000000000000000100a.log", 0, false},
		{"-0000000000000000100.log", 0, false},
		{"LOCK", 0, false},
	} {
		base, ok := parseSegmentName(tc.name)
		if ok != tc.ok || base != tc.base {
			t.Fatalf("%s: %d %v, want %d %v", tc.name, base, ok, tc.base, tc.ok)
		}
		if ok && segmentName(base) != tc.name {
			t.Fatalf("segmentName(%d) = %s", base, segmentName(base))
		}
	}
}

func TestSegmentHeader(t *testing.T) {
	h := encodeSegmentHeader(42)
	if len(h) != segHeaderLen || !bytes.HasPrefix(h, []byte("thawclog")) {
		t.Fatalf("header %x", h)
	}
	if r := checkSegmentHeader(h, 42); r != "" {
		t.Fatal(r)
	}
	for _, tc := range []struct {
		name   string
		mutate func([]byte) []byte
		base   int64
		reason string
	}{
		{"short", func(b []byte) []byte { return b[:10] }, 42, "truncated"},
		{"magic", func(b []byte) []byte { b[0] = 'T'; return b }, 42, "magic"},
		{"crc", func(b []byte) []byte { b[13] ^= 1; return b }, 42, "checksum"},
		{"other base", func(b []byte) []byte { return b }, 43, "file name says 43"},
	} {
		b := tc.mutate(bytes.Clone(h))
		if r := checkSegmentHeader(b, tc.base); !strings.Contains(r, tc.reason) {
			t.Fatalf("%s: reason %q, want %q", tc.name, r, tc.reason)
		}
	}
}

func TestBatchFrame(t *testing.T) {
	records := [][]byte{[]byte("alpha"), {}, []byte("gamma-gamma")}
	frame := appendBatchFrame([]byte("xx"), 1000, records)[2:]
	if int64(len(frame)) != batchFrameLen(records) {
		t.Fatalf("frame %d bytes, batchFrameLen %d", len(frame), batchFrameLen(records))
	}
	h := parseBatchHeader(frame)
	if h.base != 1000 || h.count != 3 || h.frameLen() != int64(len(frame)) || h.payloadLen() != 16 || h.next() != 1003 {
		t.Fatalf("header %+v", h)
	}
	if r := h.check(100, 100+h.frameLen()); r != "" {
		t.Fatal(r)
	}
	body := frame[framePrefixLen:]
	if r := checkBody(h, body); r != "" {
		t.Fatal(r)
	}
	recs, n := decodeRecords(nil, h, body, 1001)
	if n != 11 || len(recs) != 2 || recs[0].Offset != 1001 || len(recs[0].Data) != 0 || string(recs[1].Data) != "gamma-gamma" {
		t.Fatalf("decoded %v, %d bytes", recs, n)
	}

	for _, tc := range []struct {
		name   string
		mutate func([]byte)
		reason string
	}{
		{"flipped payload", func(b []byte) { b[frameHeaderLen+6] ^= 1 }, "checksum"},
		{"flipped count", func(b []byte) { b[16] ^= 1 }, "checksum"},
	} {
		b := bytes.Clone(frame)
		tc.mutate(b)
		if r := checkBody(parseBatchHeader(b), b[framePrefixLen:]); !strings.Contains(r, tc.reason) {
			t.Fatalf("%s: reason %q", tc.name, r)
		}
	}
	for _, tc := range []struct {
		name   string
		h      batchHeader
		limit  int64
		reason string
	}{
		{"zero length", batchHeader{}, 1 << 20, "too small"},
		{"past the end", batchHeader{bodyLen: 100, count: 1}, 50, "past the end"},
		{"no records", batchHeader{bodyLen: 100}, 1 << 20, "no records"},
		{"count overflows", batchHeader{bodyLen: 20, count: 3}, 1 << 20, "does not fit"},
		{"negative base", batchHeader{bodyLen: 20, count: 1, base: -5}, 1 << 20, "negative"},
	} {
		if r := tc.h.check(0, tc.limit); !strings.Contains(r, tc.reason) {
			t.Fatalf("%s: reason %q, want %q", tc.name, r, tc.reason)
		}
	}
}

func TestFindBatch(t *testing.T) {
	frame := appendBatchFrame(nil, 77, [][]byte{[]byte("hello")})
	junk := bytes.Repeat([]byte{0xAB}, 1000)
	file := append(append(bytes.Clone(junk), frame...), junk[:10]...)
	r := bytes.NewReader(file)
	for _, tc := range []struct {
		from, minBase int64
		found         bool
	}{
		{0, 0, true},
		{0, 77, true},
		{0, 78, false},   // base too low
		{1001, 0, false}, // starts after it
	} {
		pos, found, err := findBatch(r, tc.from, int64(len(file)), tc.minBase)
		if err != nil || found != tc.found || (found && pos != 1000) {
			t.Fatalf("%+v: %d %v %v", tc, pos, found, err)
		}
	}
}
