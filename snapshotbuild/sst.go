package snapshotbuild

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/thawdb/thaw/objstore"
)

// fileCacheShards pins a Pebble default that is otherwise GOMAXPROCS and is
// recorded in the OPTIONS file: the snapshot must not depend on the machine
// that built it.
const fileCacheShards = 8

// bloomBitsPerKey is the bloom filter density of every SST.
const bloomBitsPerKey = 10

// PebbleOptions returns the Pebble options the builder uses for its local
// database, and whose level-6 writer options it uses for its SST files:
// FormatNewest, bloom filters, the given compression, a quiet logger. The
// tier's tablet servers should open restored snapshots with compatible
// options (same comparer and merger, which are Pebble's defaults).
func PebbleOptions(c Compression, logger *slog.Logger) *pebble.Options {
	prof := compressionProfile(c)
	o := &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{logger},
	}
	o.Experimental.FileCacheShards = fileCacheShards
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
		o.Levels[i].FilterType = pebble.TableFilter
		o.Levels[i].Compression = func() *sstable.CompressionProfile { return prof }
	}
	o.EnsureDefaults()
	return o
}

// WriterOptions returns the sstable writer options of the builder's SST
// files: what PebbleOptions' database writes at L6, in the newest table
// format that FormatNewest ingests, with data blocks of blockSize bytes
// (Options.BlockSize; 0: Pebble's 4 KiB).
func WriterOptions(c Compression, blockSize int) sstable.WriterOptions {
	o := PebbleOptions(c, nil)
	w := o.MakeWriterOptions(6, pebble.FormatNewest.MaxTableFormat())
	w.BlockSize = blockSize
	return w
}

// localPebbleOptions are PebbleOptions for the builder's own scratch
// database: local files go through LocalFS (no fsync).
func localPebbleOptions(c Compression, logger *slog.Logger) *pebble.Options {
	o := PebbleOptions(c, logger)
	o.FS = LocalFS()
	return o
}

func compressionProfile(c Compression) *sstable.CompressionProfile {
	switch c {
	case CompressionZstd:
		return sstable.ZstdCompression
	case CompressionNone:
		return sstable.NoCompression
	default:
		return sstable.SnappyCompression
	}
}

type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l != nil {
		p.l.Debug("pebble", "msg", fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	if p.l != nil {
		p.l.Warn("pebble", "msg", fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

// hashingWritable computes the SHA-256 and size of an object as the sstable
// writer writes it, so no second pass over the file is needed. Write may be
// called from the writer's background goroutine; calls never overlap.
type hashingWritable struct {
	inner objstorage.Writable
	h     hash.Hash
	n     int64
}

func (w *hashingWritable) Write(p []byte) error {
	// Hash first: the inner writable is allowed to modify p.
	w.h.Write(p)
	w.n += int64(len(p))
	return w.inner.Write(p)
}

func (w *hashingWritable) Finish() error { return w.inner.Finish() }
func (w *hashingWritable) Abort()        { w.inner.Abort() }

var _ objstorage.Writable = (*hashingWritable)(nil)

// NewFileWritable returns the objstorage.Writable the builder writes its
// SST files through: writes of a MiB, and Finish closes the file without
// syncing it. Pebble's own file writable writes through a 4 KiB buffer, a
// write(2) per data block, and syncs the file on Finish; neither suits a
// build: the system calls cost more CPU than the copy, and a local SST
// needs no sync of its own (a linking upload syncs it, a copying one only
// reads it).
//
// It starts the kernel's writeback of every writebackStep bytes it wrote
// without waiting for it, so that the upload's fsync of the finished file
// finds little left to write: the disk works while the build computes,
// not after it.
func NewFileWritable(f vfs.File) objstorage.Writable {
	return &fileWritable{f: f, buf: make([]byte, 0, fileWriteBuf), writeback: f.Fd() != vfs.InvalidFd}
}

// fileWriteBuf is the size of fileWritable's writes.
const fileWriteBuf = 1 << 20

// writebackStep is how many written bytes fileWritable lets accumulate
// before it starts their writeback.
const writebackStep = 4 << 20

// startWriteback starts the writeback of bytes [off, off+n) of the file
// fd, best effort; false when the system cannot (tests wrap it).
var startWriteback = startWritebackOS

type fileWritable struct {
	f         vfs.File
	buf       []byte
	written   int64 // bytes written to f
	started   int64 // writeback started for f's bytes before this offset
	writeback bool  // keep starting writeback (false once it failed)
}

func (w *fileWritable) Write(p []byte) error {
	if len(w.buf)+len(p) > cap(w.buf) {
		if err := w.flush(); err != nil {
			return err
		}
		if len(p) >= cap(w.buf) {
			_, err := w.f.Write(p)
			w.written += int64(len(p))
			return err
		}
	}
	w.buf = append(w.buf, p...)
	return nil
}

func (w *fileWritable) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.f.Write(w.buf)
	w.written += int64(len(w.buf))
	w.buf = w.buf[:0]
	if err == nil && w.writeback && w.written-w.started >= writebackStep {
		w.writeback = startWriteback(w.f.Fd(), w.started, w.written-w.started)
		w.started = w.written
	}
	return err
}

func (w *fileWritable) Finish() error { return errors.Join(w.flush(), w.f.Close()) }
func (w *fileWritable) Abort()        { _ = w.f.Close() }

const sizeCheckEvery = 16

// sstFile is one finished SST file.
type sstFile struct {
	path     string
	size     int64
	sha256   [32]byte
	stamp    objstore.FileStamp // taken after the last write
	smallest []byte
	largest  []byte
	rows     int64
}

// sstSink writes a sorted stream of unique keys into SST files of about
// targetSize bytes each. File boundaries depend only on the stream, so the
// same stream yields the same files.
type sstSink struct {
	dir    string
	wopts  sstable.WriterOptions
	target uint64

	w     *sstable.Writer
	hw    *hashingWritable
	cur   sstFile
	files []sstFile
	rows  int64
	bytes int64 // bytes of finished files
}

func newSSTSink(dir string, wopts sstable.WriterOptions, target int64) *sstSink {
	return &sstSink{dir: dir, wopts: wopts, target: uint64(target)}
}

func (s *sstSink) add(key, value []byte) error {
	if s.w == nil {
		if err := s.open(key); err != nil {
			return err
		}
	}
	if err := s.w.Set(key, value); err != nil {
		return fmt.Errorf("write sst %s: %w", s.cur.path, err)
	}
	s.cur.rows++
	s.rows++
	s.cur.largest = append(s.cur.largest[:0], key...)
	// Checking the size every sizeCheckEvery keys is deterministic too
	// (it depends only on the stream) and much cheaper; a file overshoots
	// its target by at most that many pairs.
	if s.cur.rows%sizeCheckEvery == 0 && s.w.Raw().EstimatedSize() >= s.target {
		return s.closeFile()
	}
	return nil
}

func (s *sstSink) open(first []byte) error {
	path := filepath.Join(s.dir, fmt.Sprintf("build-%06d.sst", len(s.files)+1))
	f, err := LocalFS().Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create sst: %w", err)
	}
	s.hw = &hashingWritable{inner: NewFileWritable(f), h: sha256.New()}
	s.w = sstable.NewWriter(s.hw, s.wopts)
	s.cur = sstFile{path: path, smallest: bytes.Clone(first)}
	return nil
}

func (s *sstSink) closeFile() error {
	w := s.w
	s.w = nil
	if err := w.Close(); err != nil {
		return fmt.Errorf("finish sst %s: %w", s.cur.path, err)
	}
	s.cur.size = s.hw.n
	copy(s.cur.sha256[:], s.hw.h.Sum(nil))
	// The digest is of the bytes handed to the file; the stamp lets the
	// upload trust it for this file as long as nothing writes to it.
	stamp, err := objstore.StampFile(s.cur.path)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("finish sst %s: %w", s.cur.path, err)
	}
	s.cur.stamp = stamp
	s.files = append(s.files, s.cur)
	s.bytes += s.cur.size
	s.cur = sstFile{}
	s.hw = nil
	return nil
}

// finish closes the open file, if any.
func (s *sstSink) finish() error {
	if s.w == nil {
		return nil
	}
	return s.closeFile()
}

// abort releases the open writer. Its file, like the finished ones, is
// removed with the bucket's temporary directory.
func (s *sstSink) abort() {
	if s.w == nil {
		return
	}
	w := s.w
	s.w = nil
	// Close is the only way to release the writer; the build already failed,
	// so its error adds nothing.
	_ = w.Close()
}
