package benchutil

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/thawdb/thaw/kv"
)

// RowGenConfig sizes the rows of RowGen.
type RowGenConfig struct {
	Buckets    int
	KeyBytes   int // 8 means a BIGINT key, anything else a BYTES key of that length
	ValueBytes int
	Seed       uint64
}

// The generator of `thaw bench write` and `thaw bench load`, so both
// benchmarks load the same rows for the same flags.

// RowGen makes row i deterministically: a unique key (the BIGINT or
// the first 8 key bytes are a bijection of i, so keys arrive in random
// order as real ones do) and a STRING payload of value-bytes ASCII
// characters, 16 pseudo-random then a pattern, from a pool of distinct
// values.
type RowGen struct {
	cfg  RowGenConfig
	pool []string
}

const poolSize = 4096

// Config returns the generator's configuration.
func (g *RowGen) Config() RowGenConfig { return g.cfg }

func NewRowGen(cfg RowGenConfig) *RowGen {
	g := &RowGen{cfg: cfg, pool: make([]string, poolSize)}
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	pattern := "thaw-bench-write-payload-"
	b := make([]byte, cfg.ValueBytes)
	for i := range g.pool {
		x := SplitMix(cfg.Seed ^ uint64(i)*0x9e3779b97f4a7c15)
		for j := range b {
			if j < 16 {
				x = SplitMix(x)
				b[j] = alphabet[x%uint64(len(alphabet))]
			} else {
				b[j] = pattern[j%len(pattern)]
			}
		}
		g.pool[i] = string(b)
	}
	return g
}

// scramble is a bijection of uint64: every step is invertible.
func scramble(x, seed uint64) uint64 {
	x ^= seed * 0xd1342543de82ef95
	x *= 0x9e3779b97f4a7c15
	x ^= x >> 29
	x *= 0xbf58476d1ce4e5b9
	return x ^ x>>32
}

// Schema is the table the rows fit.
func (g *RowGen) Schema() kv.TableSchema {
	key := kv.Column{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}}
	if g.cfg.KeyBytes != 8 {
		key = kv.Column{Name: "k", Type: kv.Type{Kind: kv.KindBytes}}
	}
	return kv.TableSchema{
		Columns:    []kv.Column{key, {Name: "payload", Type: kv.Type{Kind: kv.KindString}, Nullable: true}},
		PrimaryKey: []string{key.Name},
		Buckets:    g.cfg.Buckets,
	}
}

// Describe says what a row holds.
func (g *RowGen) Describe() string {
	if g.cfg.KeyBytes == 8 {
		return fmt.Sprintf("(id BIGINT primary key, payload STRING of %d bytes)", g.cfg.ValueBytes)
	}
	return fmt.Sprintf("(k BYTES of %d bytes primary key, payload STRING of %d bytes)", g.cfg.KeyBytes, g.cfg.ValueBytes)
}

// ID is row i's BIGINT key (KeyBytes 8).
func (g *RowGen) ID(i int64) int64 { return int64(scramble(uint64(i), g.cfg.Seed)) }

// Payload is row i's payload column.
func (g *RowGen) Payload(i int64) string { return g.pool[i%poolSize] }

// Row sets r (two columns) to row i.
func (g *RowGen) Row(r kv.Row, i int64) {
	x := scramble(uint64(i), g.cfg.Seed)
	if g.cfg.KeyBytes == 8 {
		r[0] = int64(x)
	} else {
		k := make([]byte, g.cfg.KeyBytes)
		var w [8]byte
		binary.BigEndian.PutUint64(w[:], x)
		if g.cfg.KeyBytes < 8 {
			binary.BigEndian.PutUint64(w[:], shortKey(uint64(i), g.cfg.KeyBytes))
			copy(k, w[8-g.cfg.KeyBytes:])
		} else {
			copy(k, w[:])
			for j := 8; j < len(k); j += 8 {
				x = SplitMix(x)
				binary.BigEndian.PutUint64(w[:], x)
				copy(k[j:], w[:])
			}
		}
		r[0] = k
	}
	r[1] = g.Payload(i)
}

// EncodedSizes returns the encoded key and value sizes of row 0 (the same
// for every row but for a BIGINT key, whose encoding has a variable
// length: then the average over a sample).
func (g *RowGen) EncodedSizes(t *kv.Table) (int, int, error) {
	enc := t.NewEncoder()
	row := make(kv.Row, 2)
	const n = 4096
	var ks, vs int
	for i := range int64(n) {
		g.Row(row, i)
		k, v, _, err := enc.Encode(kv.RowFields(row))
		if err != nil {
			return 0, 0, err
		}
		ks += len(k)
		vs += len(v)
	}
	return (ks + n/2) / n, (vs + n/2) / n, nil
}

// Validate checks that c can make rows distinct rows; errors name the
// harness's flags (--rows, --buckets, --key-bytes, --value-bytes).
func (c RowGenConfig) Validate(rows int64) error {
	switch {
	case rows < 1:
		return errors.New("--rows must be at least 1")
	case c.Buckets < 1 || c.Buckets > kv.MaxBuckets:
		return fmt.Errorf("--buckets must be in [1, %d]", kv.MaxBuckets)
	case c.KeyBytes < 1 || c.KeyBytes > 1<<16:
		return errors.New("--key-bytes must be in [1, 65536]")
	case c.KeyBytes < 8 && rows > 1<<(8*c.KeyBytes):
		return fmt.Errorf("%d rows need keys of more than %d bytes", rows, c.KeyBytes)
	case c.ValueBytes < 0 || c.ValueBytes > 1<<20:
		return errors.New("--value-bytes must be in [0, 1MiB]")
	}
	return nil
}

// shortKey maps i < 2^(8n) to a key of n < 8 bytes one to one, in a
// scattered order (a counter would load every bucket in ascending key
// order, which is cheaper for both paths than the random order promised):
// an odd multiplier and an xorshift, each a bijection modulo 2^(8n).
func shortKey(i uint64, n int) uint64 {
	bits := uint(8 * n)
	mask := uint64(1)<<bits - 1
	x := (i * 0x9E3779B97F4A7C15) & mask
	x ^= x >> (bits/2 + 1)
	return (x * 0xBF58476D1CE4E5B9) & mask
}
