package changelog

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Record is one changelog record: its offset and its payload.
type Record struct {
	Offset int64
	Data   []byte
}

// Appender is the bucket leader's view of a log.
type Appender interface {
	// Append writes records as one batch and returns the offset assigned to
	// the first; the batch gets offsets first..first+len(records)-1. It
	// returns only after the batch is durable, and a batch is all or
	// nothing. Appending no records writes nothing and returns the end
	// offset.
	Append(ctx context.Context, records [][]byte) (first int64, err error)
}

// Reader is the view of a follower tailing the log and of a replica
// replaying it after a restore.
type Reader interface {
	// Read returns the records from offset from onward: the rest of the
	// batch that holds from, then whole batches while their payloads keep
	// the total within maxBytes. So at least one record comes back when
	// from < end, whatever maxBytes is. from == end returns no records and no
	// error; from outside [start, end] is ErrOutOfRange.
	Read(ctx context.Context, from int64, maxBytes int) ([]Record, error)
	// Wait blocks until the record at offset is readable (end > offset) and
	// returns the end offset, or returns ctx's error or ErrClosed. If a
	// ResetTo moves the end back while it waits, it returns ErrOutOfRange:
	// the records that come next are another history's.
	Wait(ctx context.Context, offset int64) (end int64, err error)
	// Offsets returns the first retained offset and the end offset (the
	// offset the next appended record gets). start == end: no records.
	Offsets(ctx context.Context) (start, end int64, err error)
}

// SeenWaiter is a Reader whose end a ResetTo can move back (the local
// segment log; a Kafka log's never moves back). WaitSeen is Wait that also
// returns ErrOutOfRange when the end is below seen, an end the caller saw
// earlier (a follower that applied up to offset n saw an end of n+1 or
// more): a reset that happened before the wait began is found too.
type SeenWaiter interface {
	WaitSeen(ctx context.Context, offset, seen int64) (end int64, err error)
}

// Log is one bucket's changelog as its replica holds it.
type Log interface {
	Appender
	Reader
	// TruncateBefore drops records below offset that the log no longer
	// needs to keep. Every record at or above offset stays; records below
	// it may stay too (the local log drops whole segments only, Kafka's
	// DeleteRecords drops exactly). offset <= start does nothing; offset >
	// end is ErrOutOfRange; offset == end empties the log.
	TruncateBefore(ctx context.Context, offset int64) error
	// ResetTo makes an empty log (start == end) start at offset: the next
	// record appended gets offset. A bulk-loaded bucket calls it with its
	// snapshot's log_offset before it takes writes. offset may lie below
	// the current end of a log that was emptied; offsets between are then
	// reused, so every reader must restart from the new snapshot. A log
	// that holds records is ErrNotEmpty.
	ResetTo(ctx context.Context, offset int64) error
	// Close releases this handle; further calls return ErrClosed.
	Close() error
}

// Provider opens bucket logs; one serves a whole host.
type Provider interface {
	// Open opens the log of id, creating an empty one (start = end = 0)
	// if it does not exist.
	Open(ctx context.Context, id BucketLogID) (Log, error)
	// Delete removes the log of id and its records, for a dropped table or
	// partition, and reports whether this call removed it. Deleting a log
	// that does not exist (never created, or already deleted by another
	// caller) succeeds with false.
	Delete(ctx context.Context, id BucketLogID) (bool, error)
	// List returns the ids of the logs the provider holds (open or not),
	// sorted (CompareIDs), so that logs whose table or partition is gone
	// can be found and deleted. Names that are not a log's are left out.
	List(ctx context.Context) ([]BucketLogID, error)
}

// CompareIDs orders log ids by table, then unpartitioned before
// partitioned, then partition, then bucket.
func CompareIDs(a, b BucketLogID) int {
	if c := cmp.Compare(a.TableID, b.TableID); c != 0 {
		return c
	}
	if a.Partitioned != b.Partitioned {
		if a.Partitioned {
			return 1
		}
		return -1
	}
	if c := cmp.Compare(a.PartitionID, b.PartitionID); c != 0 {
		return c
	}
	return cmp.Compare(a.Bucket, b.Bucket)
}

// BucketLogID names one bucket's log: a bucket of a non-partitioned table,
// or a bucket of one partition of a partitioned table. The zero
// Partitioned/PartitionID pair means "not partitioned", so a partitioned
// table's partition 0 must say Partitioned: true.
type BucketLogID struct {
	TableID     int64
	Partitioned bool
	PartitionID int64 // only with Partitioned
	Bucket      int32
}

// Validate checks that the ids are non-negative and that PartitionID is set
// only with Partitioned.
func (id BucketLogID) Validate() error {
	switch {
	case id.TableID < 0:
		return fmt.Errorf("changelog: invalid bucket log id %v: negative table id", id)
	case id.PartitionID < 0:
		return fmt.Errorf("changelog: invalid bucket log id %v: negative partition id", id)
	case !id.Partitioned && id.PartitionID != 0:
		return fmt.Errorf("changelog: invalid bucket log id %v: partition id without Partitioned", id)
	case id.Bucket < 0:
		return fmt.Errorf("changelog: invalid bucket log id %v: negative bucket", id)
	}
	return nil
}

// String is "table 7 bucket 3" or "table 7 partition 12 bucket 3".
func (id BucketLogID) String() string {
	if id.Partitioned {
		return fmt.Sprintf("table %d partition %d bucket %d", id.TableID, id.PartitionID, id.Bucket)
	}
	if id.PartitionID != 0 {
		return fmt.Sprintf("table %d bucket %d (stray partition id %d)", id.TableID, id.Bucket, id.PartitionID)
	}
	return fmt.Sprintf("table %d bucket %d", id.TableID, id.Bucket)
}

// Name is the log's name with sep between its parts: t7{sep}b3 or
// t7{sep}p12{sep}b3. The local provider names directories with "-" (t7-b3),
// the Kafka changelog topics with "." after its prefix. The id must be valid.
func (id BucketLogID) Name(sep string) string {
	if id.Partitioned {
		return fmt.Sprintf("t%d%sp%d%sb%d", id.TableID, sep, id.PartitionID, sep, id.Bucket)
	}
	return fmt.Sprintf("t%d%sb%d", id.TableID, sep, id.Bucket)
}

// ParseName parses what Name(sep) returns. Only the canonical form is
// accepted (decimal ids without sign or leading zeros), so that a name and
// an id map one to one; anything else returns false.
func ParseName(name, sep string) (BucketLogID, bool) {
	parts := strings.Split(name, sep)
	var id BucketLogID
	field := func(s string, tag byte, bits int) (int64, bool) {
		if len(s) < 2 || s[0] != tag {
			return 0, false
		}
		v, err := strconv.ParseInt(s[1:], 10, bits)
		return v, err == nil
	}
	var ok bool
	switch len(parts) {
	case 2:
	case 3:
		id.Partitioned = true
		if id.PartitionID, ok = field(parts[1], 'p', 64); !ok {
			return BucketLogID{}, false
		}
	default:
		return BucketLogID{}, false
	}
	if id.TableID, ok = field(parts[0], 't', 64); !ok {
		return BucketLogID{}, false
	}
	b, ok := field(parts[len(parts)-1], 'b', 32)
	if !ok {
		return BucketLogID{}, false
	}
	id.Bucket = int32(b)
	if id.Validate() != nil || id.Name(sep) != name {
		return BucketLogID{}, false
	}
	return id, true
}

// dirName is the log's directory under the provider's root: t7-b3 or
// t7-p12-b3. The id must be valid.
func (id BucketLogID) dirName() string { return id.Name("-") }
