package changelog

import (
	"errors"
	"fmt"
)

// Defaults of the local segment log.
const (
	DefaultSegmentBytes       = 64 << 20
	DefaultMaxBatchBytes      = 8 << 20
	DefaultMaxRecordBytes     = 1 << 20
	DefaultIndexIntervalBytes = 256 << 10
)

// Format limits: a batch frame's length field is a uint32 and segment
// positions must fit in it too.
const (
	maxSegmentBytes = 1 << 31
	minSegmentBytes = segHeaderLen + frameHeaderLen
)

// Option configures a SegmentLog or a LocalProvider. Options are validated
// when the log or provider is created.
type Option func(*options)

type options struct {
	segmentBytes       int64
	maxBatchBytes      int64
	maxRecordBytes     int64
	recordBytesSet     bool // by WithMaxRecordBytes
	indexIntervalBytes int64
	onTailRepair       func(TailRepair)
}

// WithSegmentBytes sets the size at which the log rolls to a new segment.
// No segment grows beyond it: a batch that does not fit starts a new one.
func WithSegmentBytes(n int64) Option { return func(o *options) { o.segmentBytes = n } }

// WithMaxBatchBytes limits the encoded size of one Append (frame header,
// record headers and payloads; see DESIGN.md). It must not exceed the
// segment size minus the segment header. Recovery treats more than this
// many invalid bytes at the tail as corruption, so do not lower it across a
// restart that may follow a crash.
func WithMaxBatchBytes(n int64) Option { return func(o *options) { o.maxBatchBytes = n } }

// WithMaxRecordBytes limits one record's payload. Unset, the limit is
// DefaultMaxRecordBytes, or what a smaller max batch leaves room for.
// RecordRoom(maxBatchBytes) is the largest a batch of that size holds.
func WithMaxRecordBytes(n int64) Option {
	return func(o *options) { o.maxRecordBytes, o.recordBytesSet = n, true }
}

// RecordRoom is the largest record payload a batch of at most
// maxBatchBytes holds (alone).
func RecordRoom(maxBatchBytes int64) int64 {
	return max(0, maxBatchBytes-frameHeaderLen-recordHeaderLen)
}

// WithIndexIntervalBytes sets how densely the in-memory sparse index
// samples batch positions: at most one entry per n bytes of segment, so a
// read scans at most about n bytes of batch headers to find its offset.
func WithIndexIntervalBytes(n int64) Option { return func(o *options) { o.indexIntervalBytes = n } }

// TailRepair describes a torn tail that recovery cut off: bytes written by
// an Append that had not returned when the process or machine stopped.
type TailRepair struct {
	Segment string // path of the segment file
	Pos     int64  // the file now ends here
	Dropped int64  // bytes removed
	Reason  string // what was wrong with the first dropped frame
}

// WithTailRepairHook calls fn, synchronously during open, for every torn
// tail that recovery repairs, so the caller can log it.
func WithTailRepairHook(fn func(TailRepair)) Option {
	return func(o *options) { o.onTailRepair = fn }
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		segmentBytes:       DefaultSegmentBytes,
		maxBatchBytes:      DefaultMaxBatchBytes,
		maxRecordBytes:     DefaultMaxRecordBytes,
		indexIntervalBytes: DefaultIndexIntervalBytes,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if !o.recordBytesSet {
		// (A max batch below 1 MiB took every start: the default record
		// limit did not fit it.)
		o.maxRecordBytes = min(o.maxRecordBytes, RecordRoom(o.maxBatchBytes))
	}
	var errs []error
	if o.segmentBytes < minSegmentBytes || o.segmentBytes > maxSegmentBytes {
		errs = append(errs, fmt.Errorf("segment bytes %d not in [%d, %d]", o.segmentBytes, minSegmentBytes, int64(maxSegmentBytes)))
	}
	if o.maxBatchBytes < frameHeaderLen+recordHeaderLen || o.maxBatchBytes > o.segmentBytes-segHeaderLen {
		errs = append(errs, fmt.Errorf("max batch bytes %d not in [%d, segment bytes - %d]", o.maxBatchBytes, frameHeaderLen+recordHeaderLen, segHeaderLen))
	}
	if o.maxRecordBytes < 0 || o.maxRecordBytes > o.maxBatchBytes-frameHeaderLen-recordHeaderLen {
		errs = append(errs, fmt.Errorf("max record bytes %d not in [0, max batch bytes - %d]", o.maxRecordBytes, frameHeaderLen+recordHeaderLen))
	}
	if o.indexIntervalBytes < 1 {
		errs = append(errs, fmt.Errorf("index interval bytes %d < 1", o.indexIntervalBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return options{}, fmt.Errorf("changelog: invalid options: %w", err)
	}
	return o, nil
}
