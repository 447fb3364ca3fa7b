package snapshotbuild

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkTableFormatReads reads a bucket built in each candidate table
// format and data block size the way a replica does after a restore:
// point lookups of present
// and absent keys, with the data in the block cache or not, and a full
// scan. The files are ingested into a FormatNewest database, as a restored
// snapshot's are.
func BenchmarkTableFormatReads(b *testing.B) {
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(7, 7))
	keys := make([][]byte, n)
	for i := range keys {
		k := make([]byte, 17)
		binary.BigEndian.PutUint64(k[1:], rng.Uint64())
		binary.BigEndian.PutUint64(k[9:], rng.Uint64())
		keys[i] = k
	}
	slices.SortFunc(keys, bytes.Compare)
	value := make([]byte, 100)
	for i := range value {
		value[i] = byte('a' + i%7)
	}
	for _, tc := range []struct {
		f     sstable.TableFormat
		block int
	}{{sstable.TableFormatPebblev4, 4 << 10}, {sstable.TableFormatPebblev7, 4 << 10}, {sstable.TableFormatPebblev7, 16 << 10}, {sstable.TableFormatPebblev7, 32 << 10}} {
		for _, cache := range []int64{256 << 20, 8 << 20} {
			f := tc.f
			b.Run(fmt.Sprintf("%s/block=%dKiB/cache=%dMiB", f, tc.block>>10, cache>>20), func(b *testing.B) {
				db := formatDB(b, f, tc.block, cache, keys, value)
				defer db.Close()
				b.Run("get", func(b *testing.B) {
					r := rand.New(rand.NewPCG(1, 2))
					for b.Loop() {
						v, closer, err := db.Get(keys[r.IntN(n)])
						if err != nil || len(v) != len(value) {
							b.Fatal(err, len(v))
						}
						closer.Close()
					}
				})
				b.Run("get-absent", func(b *testing.B) {
					r := rand.New(rand.NewPCG(3, 4))
					k := make([]byte, 17)
					for b.Loop() {
						binary.BigEndian.PutUint64(k[1:], r.Uint64())
						binary.BigEndian.PutUint64(k[9:], r.Uint64())
						if _, _, err := db.Get(k); err != pebble.ErrNotFound {
							b.Fatal(err)
						}
					}
				})
				b.Run("scan", func(b *testing.B) {
					for b.Loop() {
						it, err := db.NewIter(nil)
						if err != nil {
							b.Fatal(err)
						}
						rows := 0
						for it.First(); it.Valid(); it.Next() {
							rows += len(it.Value()) / len(value)
						}
						if err := it.Close(); err != nil || rows != n {
							b.Fatal(err, rows)
						}
					}
				})
			})
		}
	}
}

func formatDB(b *testing.B, f sstable.TableFormat, block int, cache int64, keys [][]byte, value []byte) *pebble.DB {
	dir := b.TempDir()
	path := filepath.Join(dir, "in.sst")
	file, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		b.Fatal(err)
	}
	wopts := PebbleOptions(CompressionSnappy, nil).MakeWriterOptions(6, f)
	wopts.BlockSize = block
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(file), wopts)
	for _, k := range keys {
		if err := w.Set(k, value); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	o := PebbleOptions(CompressionSnappy, nil)
	c := pebble.NewCache(cache)
	defer c.Unref()
	o.Cache = c
	db, err := pebble.Open(filepath.Join(dir, "db"), o)
	if err != nil {
		b.Fatal(err)
	}
	if err := db.Ingest(b.Context(), []string{path}); err != nil {
		b.Fatal(err)
	}
	return db
}
