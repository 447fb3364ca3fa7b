package replica

import (
	"encoding/binary"
	"fmt"

	"github.com/thawdb/thaw/snapshot"
)

// Op is the kind of a mutation; its value is the record's op byte.
type Op uint8

// The ops of the changelog record format.
const (
	OpUpsert Op = 1
	OpDelete Op = 2
)

func (o Op) String() string {
	switch o {
	case OpUpsert:
		return "upsert"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Mutation is one row mutation of a write batch. Key and Value are kv
// bytes; a delete has no value.
type Mutation struct {
	Op    Op
	Key   []byte
	Value []byte // upsert only
}

// KV is one row read back.
type KV struct {
	Key, Value []byte
}

// encodedLen is the size of m's changelog record.
func encodedLen(m Mutation) int { return RecordLen(len(m.Key), len(m.Value)) }

// RecordLen is the size of the changelog record of a mutation with a key
// of keyLen bytes and a value of valueLen (0 for a delete): what a batch
// of mutations costs the changelog, before the log's own framing.
func RecordLen(keyLen, valueLen int) int {
	return 1 + uvarintLen(uint64(keyLen)) + keyLen + valueLen
}

// appendRecord appends m in the changelog record format
// [op][uvarint len(key)][key][value (upsert only)].
func appendRecord(dst []byte, m Mutation) []byte {
	dst = append(dst, byte(m.Op))
	dst = binary.AppendUvarint(dst, uint64(len(m.Key)))
	dst = append(dst, m.Key...)
	return append(dst, m.Value...)
}

// decodeRecord parses one changelog record. The returned slices alias rec.
// It accepts exactly what appendRecord writes for a valid mutation: a known
// op, a non-empty key and no value bytes after a delete's key.
func decodeRecord(rec []byte) (Mutation, error) {
	if len(rec) == 0 {
		return Mutation{}, fmt.Errorf("%w: empty record", ErrCorruptRecord)
	}
	op := Op(rec[0])
	if op != OpUpsert && op != OpDelete {
		return Mutation{}, fmt.Errorf("%w: unknown op byte %d", ErrCorruptRecord, rec[0])
	}
	n, w := binary.Uvarint(rec[1:])
	rest := rec[1:]
	switch {
	case w <= 0:
		return Mutation{}, fmt.Errorf("%w: bad key length", ErrCorruptRecord)
	case n == 0:
		return Mutation{}, fmt.Errorf("%w: empty key", ErrCorruptRecord)
	case n > uint64(len(rest)-w):
		return Mutation{}, fmt.Errorf("%w: key length %d beyond the record's %d bytes", ErrCorruptRecord, n, len(rec))
	}
	key := rest[w : w+int(n)]
	value := rest[w+int(n):]
	if op == OpDelete {
		if len(value) != 0 {
			return Mutation{}, fmt.Errorf("%w: delete with %d value bytes", ErrCorruptRecord, len(value))
		}
		value = nil
	}
	return Mutation{Op: op, Key: key, Value: value}, nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// metaKey is where a replica keeps its applied state, atomically with the
// data it describes. It lies in the user key space, since any non-empty
// byte string may be a kv key for some schema (the empty key is no way
// out: Pebble's columnar blocks cannot hold a block of only empty keys).
// So Write rejects it, reads skip it, snapshotbuild refuses to build it,
// and a snapshot whose database holds it with other contents fails to
// restore.
var metaKey = []byte(snapshot.StateKey)

const (
	metaVersion = 1
	metaLen     = 1 + 8 + 8
)

// replicaMeta is the state stored under metaKey.
type replicaMeta struct {
	next int64 // the offset of the next record to apply (= last applied + 1)
	rows int64 // user rows in the database
}

func (m replicaMeta) encode() []byte {
	b := make([]byte, 0, metaLen)
	b = append(b, metaVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(m.next))
	return binary.BigEndian.AppendUint64(b, uint64(m.rows))
}

func decodeMeta(b []byte) (replicaMeta, error) {
	if len(b) != metaLen || b[0] != metaVersion {
		return replicaMeta{}, fmt.Errorf("%w: replica state record of %d bytes, version %d", ErrBadSnapshot, len(b), firstByte(b))
	}
	m := replicaMeta{next: int64(binary.BigEndian.Uint64(b[1:])), rows: int64(binary.BigEndian.Uint64(b[9:]))}
	if m.next < 0 || m.rows < 0 {
		return replicaMeta{}, fmt.Errorf("%w: replica state record with next offset %d, %d rows", ErrBadSnapshot, m.next, m.rows)
	}
	return m, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}
