package replica

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestMemTableSize(t *testing.T) {
	for _, tc := range []struct {
		budget   int64
		replicas int
		want     uint64
	}{
		{256 << 20, 0, 64 << 20},     // capped
		{256 << 20, 1, 64 << 20},     // capped
		{192 << 20, 1, 64 << 20},     // exactly the cap
		{256 << 20, 4, 22369621},     // 256 MiB / (4 × 3)
		{256 << 20, 200, 447392},     // 256 MiB / 600 ≈ 437 KiB
		{384 << 20, 512, 256 << 10},  // exactly the floor
		{256 << 20, 2000, 256 << 10}, // floored: the budget is exceeded
		{1 << 20, 1, 349525},
	} {
		if got := MemTableSize(tc.budget, tc.replicas); got != tc.want {
			t.Errorf("MemTableSize(%d, %d) = %d, want %d", tc.budget, tc.replicas, got, tc.want)
		}
	}
}

// Pebble reserves its memtables in the block cache. When the replicas'
// memtables together reach the configured cache size, blocks must still
// be cached: reading the same keys twice is served from the cache the
// second time.
func TestBlockCacheBesideMemTables(t *testing.T) {
	const cacheSize = 2 << 20
	e := newEnv(t)
	h := e.hostOnly(t, WithCacheSize(cacheSize), WithMemTableBudget(12<<20), WithExpectedReplicas(2))
	value := bytes.Repeat([]byte("v"), 1000)
	replicas := []*Replica{open(t, h, e.id(0), nil), open(t, h, e.id(1), nil)}
	var keys [][]byte
	for i := range 10_000 {
		keys = append(keys, key(i))
	}
	var reserved uint64
	for _, r := range replicas {
		for from := 0; from < len(keys); from += 2000 {
			ms := make([]Mutation, 2000)
			for j := range ms {
				ms[j] = Mutation{Op: OpUpsert, Key: keys[from+j], Value: value}
			}
			write(t, r, ms)
		}
		if err := r.db.Flush(); err != nil {
			t.Fatal(err)
		}
		reserved += r.db.Metrics().MemTable.Size
	}
	if reserved < cacheSize {
		t.Fatalf("precondition: memtables hold %d bytes, want at least the cache size %d", reserved, cacheSize)
	}
	read := func() (hits int64) {
		before := replicas[0].db.Metrics().BlockCache.Hits
		for _, r := range replicas {
			for from := 0; from < len(keys); from += 1000 {
				vals, err := r.Lookup(t.Context(), keys[from:from+1000])
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range vals {
					if !bytes.Equal(v, value) {
						t.Fatalf("key %s: got %d bytes, want the value written", keys[from+i], len(v))
					}
				}
			}
		}
		return replicas[0].db.Metrics().BlockCache.Hits - before
	}
	read()
	bc := replicas[0].db.Metrics().BlockCache
	if hits := read(); hits == 0 || bc.Size == 0 {
		t.Fatalf("block cache holds %d bytes in %d blocks and served %d reads of the second pass; memtables hold %d bytes",
			bc.Size, bc.Count, hits, reserved)
	}
}

// rssBytes reads VmRSS from /proc/self/status.
func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS line")
	return 0
}

// Many empty replicas fit in one host: 200 replicas cost well under the
// bound documented in doc.go (rssPerReplica each, raceFactor× under -race).
func TestHostManyReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 200 databases")
	}
	const n = 200
	e := newEnv(t)
	h, _ := e.host(t, WithExpectedReplicas(n))
	runtime.GC()
	before := rssBytes(t)
	goroutines, fds := runtime.NumGoroutine(), openFDs()
	replicas := make([]*Replica, n)
	for i := range replicas {
		replicas[i] = open(t, h, e.id(int32(i)), nil)
	}
	write(t, replicas[0], upserts(0, 10, "x"))
	runtime.GC()
	after := rssBytes(t)
	per := (after - before) / n
	t.Logf("%d replicas: VmRSS %d MiB -> %d MiB (%d KiB per replica), %d goroutines and %d fds per replica, memtable %d KiB each",
		n, before>>20, after>>20, per>>10, (runtime.NumGoroutine()-goroutines)/n, (openFDs()-fds)/n, replicas[0].MemTableSize()>>10)
	for _, r := range replicas {
		if r.MemTableSize() != MemTableSize(DefaultMemTableBudget, n) {
			t.Fatalf("replica %v memtable %d, want %d", r.ID(), r.MemTableSize(), MemTableSize(DefaultMemTableBudget, n))
		}
	}
	if bound := int64(rssPerReplica * raceFactor); per > bound {
		t.Fatalf("RSS grew %d bytes per replica, bound %d", per, bound)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if h.Replicas() != 0 {
		t.Fatalf("%d replicas left after Close", h.Replicas())
	}
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// rssPerReplica is the documented bound on the resident memory of one
// idle replica (doc.go, "Memory").
const rssPerReplica = 1 << 20
