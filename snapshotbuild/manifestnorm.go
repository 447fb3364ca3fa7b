package snapshotbuild

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/record"
)

// Pebble's ingestion stamps each ingested table's MANIFEST entry with
// time.Now().Unix() (ingest.go, ingestLoad1) and offers no hook to fix the
// clock. That timestamp is the only byte of a fresh checkpoint that differs
// between two builds of the same input, so the builder rewrites it to a fixed
// value (0, "unknown", which Pebble itself writes for tables of unknown age;
// table creation times feed no compaction heuristic, only blob files use
// theirs). Everything else is copied record by record, the way
// DB.Checkpoint copies a MANIFEST itself.
//
// The rewrite is deliberately narrow: it understands only the version-edit
// tags a fresh database with ingested tables writes. On anything else it
// reports errManifestUnknown and the caller keeps the original file (the
// build stays correct, only not byte-reproducible), and the normalized file is
// verified by opening the checkpoint with Pebble.

// Version-edit tags (pebble internal/manifest/version_edit.go, v2.1.7).
const (
	veComparator     = 1
	veLogNumber      = 2
	veNextFileNumber = 3
	veLastSequence   = 4
	veDeletedFile    = 6
	vePrevLogNumber  = 9
	veNewFile2       = 100
	veNewFile4       = 103

	veCustomTerminate       = 1
	veCustomNeedsCompaction = 2
	veCustomCreationTime    = 6
)

var errManifestUnknown = errors.New("manifest uses version-edit fields the normalizer does not know")

// normalizeManifest returns the MANIFEST with every table creation time set
// to 0, and whether anything changed.
func normalizeManifest(data []byte) ([]byte, bool, error) {
	r := record.NewReader(bytes.NewReader(data), 0)
	var out, same bytes.Buffer
	w := record.NewWriter(&out)
	// sw re-frames the unmodified records: if that does not reproduce data,
	// the framing is not what this code assumes and nothing is rewritten.
	sw := record.NewWriter(&same)
	changed := false
	for {
		rr, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("read manifest record: %w", err)
		}
		edit, err := io.ReadAll(rr)
		if err != nil {
			return nil, false, fmt.Errorf("read manifest record: %w", err)
		}
		fixed, c, err := normalizeVersionEdit(edit)
		if err != nil {
			return nil, false, err
		}
		changed = changed || c
		if _, err := w.WriteRecord(fixed); err != nil {
			return nil, false, fmt.Errorf("write manifest record: %w", err)
		}
		if _, err := sw.WriteRecord(edit); err != nil {
			return nil, false, fmt.Errorf("write manifest record: %w", err)
		}
	}
	if err := errors.Join(w.Close(), sw.Close()); err != nil {
		return nil, false, fmt.Errorf("write manifest: %w", err)
	}
	if !bytes.Equal(same.Bytes(), data) {
		return nil, false, fmt.Errorf("%w: record framing does not round-trip", errManifestUnknown)
	}
	if !changed {
		return data, false, nil
	}
	return out.Bytes(), true, nil
}

type veReader struct {
	b   []byte
	pos int
}

func (d *veReader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(d.b[d.pos:])
	if n <= 0 {
		return 0, fmt.Errorf("%w: bad varint at %d", errManifestUnknown, d.pos)
	}
	d.pos += n
	return v, nil
}

func (d *veReader) bytesField() error {
	n, err := d.uvarint()
	if err != nil {
		return err
	}
	if uint64(len(d.b)-d.pos) < n {
		return fmt.Errorf("%w: truncated field at %d", errManifestUnknown, d.pos)
	}
	d.pos += int(n)
	return nil
}

func (d *veReader) uvarints(k int) error {
	for range k {
		if _, err := d.uvarint(); err != nil {
			return err
		}
	}
	return nil
}

// normalizeVersionEdit walks one version edit and rewrites the value of
// every creation-time custom field to 0.
func normalizeVersionEdit(b []byte) ([]byte, bool, error) {
	d := &veReader{b: b}
	var out []byte
	copied := 0
	changed := false
	for d.pos < len(b) {
		tag, err := d.uvarint()
		if err != nil {
			return nil, false, err
		}
		switch tag {
		case veComparator:
			err = d.bytesField()
		case veLogNumber, veNextFileNumber, veLastSequence, vePrevLogNumber:
			err = d.uvarints(1)
		case veDeletedFile:
			err = d.uvarints(2) // level, file number
		case veNewFile2, veNewFile4:
			// level, file number, size, smallest, largest, smallest seq, largest seq
			if err = d.uvarints(3); err != nil {
				break
			}
			if err = d.bytesField(); err != nil {
				break
			}
			if err = d.bytesField(); err != nil {
				break
			}
			if err = d.uvarints(2); err != nil || tag != veNewFile4 {
				break
			}
			for {
				custom, cerr := d.uvarint()
				if cerr != nil {
					err = cerr
					break
				}
				if custom == veCustomTerminate {
					break
				}
				switch custom {
				case veCustomNeedsCompaction:
					err = d.bytesField()
				case veCustomCreationTime:
					start := d.pos
					if err = d.bytesField(); err != nil {
						break
					}
					// Replace the length-prefixed uvarint with length 1, value 0.
					if !bytes.Equal(b[start:d.pos], []byte{1, 0}) {
						out = append(out, b[copied:start]...)
						out = append(out, 1, 0)
						copied = d.pos
						changed = true
					}
				default:
					err = fmt.Errorf("%w: custom field %d", errManifestUnknown, custom)
				}
				if err != nil {
					break
				}
			}
		default:
			err = fmt.Errorf("%w: tag %d", errManifestUnknown, tag)
		}
		if err != nil {
			return nil, false, err
		}
	}
	if !changed {
		return b, false, nil
	}
	out = append(out, b[copied:]...)
	return out, true, nil
}
