package kafkalog

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/thawdb/thaw/tier/changelog"
)

// Kafka record layout of a bucket log (one Kafka record per Append):
//
//	key:   8 bytes, big-endian: a batch's first logical offset, or a
//	       marker's next logical offset
//	value: version (1), kind (kindBatch, kindMarker or kindReset), then
//	       for a batch uvarint count (>= 1) and count × (uvarint length,
//	       bytes); for a reset marker the end it moves up from (8 bytes,
//	       big-endian, below the key)
//
// Kafka's record batch CRC covers both; decode is strict all the same.
const (
	frameVersion = 1
	kindBatch    = 0
	kindMarker   = 1
	kindReset    = 2
	keyLen       = 8
)

// entry is one decoded Kafka record of a bucket log.
type entry struct {
	k      int64 // Kafka offset
	marker bool  // a marker or a reset marker: no records
	reset  bool
	first  int64    // batch: logical offset of its first record; marker: the next logical offset
	from   int64    // reset marker: the end it moves up from
	recs   [][]byte // batch only: at least one record
}

// size returns the payload bytes of e's records.
func (e *entry) size() int {
	n := 0
	for _, r := range e.recs {
		n += len(r)
	}
	return n
}

// encodeBatch returns the key and value of a batch of records starting at
// logical offset first.
func encodeBatch(first int64, recs [][]byte) (key, value []byte) {
	key = binary.BigEndian.AppendUint64(make([]byte, 0, keyLen), uint64(first))
	n := 2 + binary.MaxVarintLen64
	for _, r := range recs {
		n += binary.MaxVarintLen64 + len(r)
	}
	value = append(make([]byte, 0, n), frameVersion, kindBatch)
	value = binary.AppendUvarint(value, uint64(len(recs)))
	for _, r := range recs {
		value = binary.AppendUvarint(value, uint64(len(r)))
		value = append(value, r...)
	}
	return key, value
}

// encodeMarker returns the key and value of a marker that makes next the
// log's next logical offset.
func encodeMarker(next int64) (key, value []byte) {
	return binary.BigEndian.AppendUint64(make([]byte, 0, keyLen), uint64(next)), []byte{frameVersion, kindMarker}
}

// encodeReset returns the key and value of a reset marker that makes next
// the next logical offset of a log that ends at from (and only of such a
// log: see cursor.step).
func encodeReset(next, from int64) (key, value []byte) {
	key = binary.BigEndian.AppendUint64(make([]byte, 0, keyLen), uint64(next))
	return key, binary.BigEndian.AppendUint64([]byte{frameVersion, kindReset}, uint64(from))
}

// decodeEntry parses the Kafka record at offset k. Records alias value.
func decodeEntry(k int64, key, value []byte) (entry, error) {
	bad := func(format string, args ...any) (entry, error) {
		return entry{}, fmt.Errorf("%w: Kafka offset %d: %s", changelog.ErrCorrupt, k, fmt.Sprintf(format, args...))
	}
	if len(key) != keyLen {
		return bad("key of %d bytes, want %d", len(key), keyLen)
	}
	first := binary.BigEndian.Uint64(key)
	if first > math.MaxInt64 {
		return bad("negative logical offset")
	}
	e := entry{k: k, first: int64(first)}
	if len(value) < 2 {
		return bad("value of %d bytes", len(value))
	}
	if value[0] != frameVersion {
		return bad("unknown version %d", value[0])
	}
	switch value[1] {
	case kindMarker:
		if len(value) != 2 {
			return bad("marker with %d trailing bytes", len(value)-2)
		}
		e.marker = true
		return e, nil
	case kindReset:
		if len(value) != 2+keyLen {
			return bad("reset marker of %d bytes", len(value))
		}
		from := binary.BigEndian.Uint64(value[2:])
		if from >= first {
			return bad("reset marker from %d to %d does not move up", from, first)
		}
		e.marker, e.reset, e.from = true, true, int64(from)
		return e, nil
	case kindBatch:
	default:
		return bad("unknown kind %d", value[1])
	}
	rest := value[2:]
	count, n := uvarint(rest)
	if n <= 0 || count == 0 || count > uint64(len(rest)) {
		return bad("bad record count")
	}
	if uint64(e.first) > math.MaxInt64-count {
		return bad("logical offsets overflow")
	}
	rest = rest[n:]
	e.recs = make([][]byte, 0, count)
	for i := range count {
		l, n := uvarint(rest)
		if n <= 0 || l > uint64(len(rest)-n) {
			return bad("record %d: bad length", i)
		}
		e.recs = append(e.recs, rest[n:n+int(l):n+int(l)])
		rest = rest[n+int(l):]
	}
	if len(rest) != 0 {
		return bad("%d trailing bytes", len(rest))
	}
	return e, nil
}

// uvarint is binary.Uvarint refusing overlong encodings (n <= 0), so
// that every record has one encoding.
func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n > 1 && b[n-1] == 0 {
		return 0, -1
	}
	return v, n
}

// cursor is a position in a bucket log's chain of Kafka records: k is the
// next Kafka offset to look at, x the logical offset the next batch must
// start at.
//
// The chain rule decides, the same way for every reader, which Kafka
// records belong to the log: a batch is valid when its first logical
// offset is exactly x, a marker when its next offset is at least x, a
// reset marker when it moves up from exactly x. Any
// other record was written by a writer with an outdated view of the log (a
// deposed leader) and is skipped. A writer learns from the offset Kafka
// gave its record whether it was valid (see Log.Append): this is what
// makes an append conditional without Kafka transactions.
type cursor struct{ k, x int64 }

// anchor starts a chain at the log's first retained record e, which is
// valid by construction: records are deleted only up to a valid one.
func anchor(e entry) cursor {
	c := cursor{k: e.k, x: e.first}
	if e.reset {
		c.x = e.from
	}
	c.step(e)
	return c
}

// step moves c past e (e.k >= c.k) and reports whether e is valid.
func (c *cursor) step(e entry) bool {
	c.k = e.k + 1
	if e.reset {
		// Conditional on the exact end, unlike a plain marker: a batch
		// that another writer appended after the resetting writer saw the
		// log empty makes the reset lose, never the batch.
		if e.from == c.x {
			c.x = e.first
			return true
		}
		return false
	}
	if e.marker {
		if e.first >= c.x {
			c.x = e.first
			return true
		}
		return false
	}
	if e.first == c.x {
		c.x += int64(len(e.recs))
		return true
	}
	return false
}
