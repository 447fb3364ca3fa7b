package snapshotbuild

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
)

// Duplicates is the policy for a primary key that occurs more than once in
// the input of one build.
type Duplicates uint8

const (
	// DuplicatesLastWins keeps the row that came last in input order (the
	// order of Add/AddPair calls, and row order within a batch) and counts
	// the others in BucketResult.Duplicates.
	DuplicatesLastWins Duplicates = iota
	// DuplicatesError fails the build with a *DuplicateKeyError.
	DuplicatesError
)

func (d Duplicates) String() string {
	switch d {
	case DuplicatesLastWins:
		return "last-wins"
	case DuplicatesError:
		return "error"
	default:
		return fmt.Sprintf("Duplicates(%d)", uint8(d))
	}
}

// OtherBuckets is the policy for a row routed to a bucket that the builder
// does not own (Target.Buckets).
type OtherBuckets uint8

const (
	// OtherBucketsError fails Add with ErrBucketNotOwned.
	OtherBucketsError OtherBuckets = iota
	// OtherBucketsSkip drops the row and counts it in Stats.SkippedRows: for
	// builders that each read the whole input and keep their own buckets.
	OtherBucketsSkip
)

// Compression is the block compression of the SST files.
type Compression uint8

const (
	// CompressionSnappy is the default: on this project's measurements the
	// fastest end to end (fewer bytes than none, far less CPU than zstd).
	CompressionSnappy Compression = iota
	// CompressionZstd trades about 2.5x the write CPU for ~8 % smaller files.
	CompressionZstd
	// CompressionNone writes uncompressed blocks.
	CompressionNone
)

func (c Compression) String() string {
	switch c {
	case CompressionSnappy:
		return "snappy"
	case CompressionZstd:
		return "zstd"
	case CompressionNone:
		return "none"
	default:
		return fmt.Sprintf("Compression(%d)", uint8(c))
	}
}

// Defaults.
const (
	DefaultMemoryBudget   = 256 << 20
	DefaultTargetFileSize = 128 << 20
	// DefaultBlockSize is the uncompressed size of the SST files' data
	// blocks: Pebble's own 4 KiB, what the tier's replicas write too.
	// Larger blocks make the build cheaper and cached reads and scans
	// faster, but a point read that misses the block cache decompresses
	// more (docs/performance.md, "Session 14: SST block size": 16 KiB saves
	// about 0.6 CPU-seconds per 10 M rows built and costs a cache-missing
	// Get 2.3 µs more); the tier serves point reads first, so the default
	// stays.
	DefaultBlockSize = 4 << 10
	// MinBlockSize and MaxBlockSize bound Options.BlockSize.
	MinBlockSize = 1 << 10
	MaxBlockSize = 1 << 20
	// MinMemoryBudget is the smallest accepted budget. Tiny budgets exist for
	// tests that force spilling; real builds want tens of MiB or more.
	MinMemoryBudget = 64 << 10
)

// Phase is a step of one bucket's build, reported through Options.Progress.
type Phase string

// Phases in order.
const (
	PhaseMerge    Phase = "merge"    // merging sorted runs into SST files
	PhaseIngest   Phase = "ingest"   // ingesting into the local DB and checkpointing
	PhaseUpload   Phase = "upload"   // uploading data files
	PhaseMetadata Phase = "metadata" // writing _METADATA (after every owned bucket's data files)
	PhaseDone     Phase = "done"
)

// BucketProgress is one progress event of one bucket.
type BucketProgress struct {
	Bucket int
	Phase  Phase
	Rows   int64 // rows written so far (merge) or in total (later phases)
	Bytes  int64 // SST bytes written so far (merge), uploaded so far (upload)
}

// Options tune a build. The zero value is usable.
type Options struct {
	// Workers bounds the goroutines doing CPU work: the number of buckets
	// built concurrently in Finish and, during input, whether chunks are
	// sorted and spilled in the background (Workers > 1, runs written by up
	// to two goroutines) or on the goroutine calling Add (Workers == 1, so a
	// one-worker build uses about one core). Uploads, which mostly wait for
	// the store, overlap with the next buckets either way.
	// Default: GOMAXPROCS.
	Workers int
	// MemoryBudget bounds, in bytes, the memory of buffered input and merge
	// buffers for the whole build (all buckets together). Input beyond half of
	// it is sorted and spilled to TempDir. Default DefaultMemoryBudget.
	MemoryBudget int64
	// TempDir is where the build's private temporary directory is created.
	// Default os.TempDir(). Spill runs and SST files must fit there, and the
	// SST files are hard-linked, so keep it on one filesystem.
	TempDir string
	// TargetFileSize is the size at which an SST file is closed and the next
	// one started. Default DefaultTargetFileSize.
	TargetFileSize int64
	// Duplicates is the duplicate primary key policy.
	Duplicates Duplicates
	// OtherBuckets is the policy for rows of buckets the builder does not own.
	OtherBuckets OtherBuckets
	// Compression of SST blocks. Default snappy.
	Compression Compression
	// BlockSize is the uncompressed size of an SST data block, in
	// MinBlockSize..MaxBlockSize. Default DefaultBlockSize.
	BlockSize int
	// Logger receives debug and info logs. Default: discard.
	Logger *slog.Logger
	// Progress, if set, is called from worker goroutines (concurrently for
	// different buckets) as buckets advance. It must be fast and safe for
	// concurrent use.
	Progress func(BucketProgress)
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.MemoryBudget == 0 {
		o.MemoryBudget = DefaultMemoryBudget
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	if o.TargetFileSize == 0 {
		o.TargetFileSize = DefaultTargetFileSize
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) validate() error {
	if o.MemoryBudget < MinMemoryBudget {
		return fmt.Errorf("%w: memory budget %d below the minimum %d", ErrInvalidOptions, o.MemoryBudget, MinMemoryBudget)
	}
	if o.TargetFileSize < 4<<10 {
		return fmt.Errorf("%w: target file size %d below 4096", ErrInvalidOptions, o.TargetFileSize)
	}
	if o.Duplicates > DuplicatesError {
		return fmt.Errorf("%w: unknown duplicates policy %d", ErrInvalidOptions, o.Duplicates)
	}
	if o.OtherBuckets > OtherBucketsSkip {
		return fmt.Errorf("%w: unknown other-buckets policy %d", ErrInvalidOptions, o.OtherBuckets)
	}
	if o.Compression > CompressionNone {
		return fmt.Errorf("%w: unknown compression %d", ErrInvalidOptions, o.Compression)
	}
	if o.BlockSize < MinBlockSize || o.BlockSize > MaxBlockSize {
		return fmt.Errorf("%w: block size %d not in %d..%d", ErrInvalidOptions, o.BlockSize, MinBlockSize, MaxBlockSize)
	}
	return nil
}
