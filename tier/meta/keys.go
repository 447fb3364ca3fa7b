package meta

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultPrefix is the key prefix used when New is given none.
const DefaultPrefix = "/thaw"

// keys builds the key space under one prefix (see the package doc).
type keys struct{ p string }

func (k keys) election() string     { return k.p + "/coordinator/election" }
func (k keys) seqTable() string     { return k.p + "/seq/table" }
func (k keys) seqPartition() string { return k.p + "/seq/partition" }

// seqSnapshots is the prefix of a target's snapshot id sequences.
func (k keys) seqSnapshots(t Target) string { return k.p + "/seq/snapshot/" + t.path() + "/" }
func (k keys) seqSnapshot(t Target, bucket int) string {
	return k.seqSnapshots(t) + strconv.Itoa(bucket)
}

func (k keys) databases() string         { return k.p + "/databases/" }
func (k keys) database(db string) string { return k.databases() + db }

// tables is the prefix of one database's tables, or of all with db "".
func (k keys) tables(db string) string {
	if db == "" {
		return k.p + "/tables/"
	}
	return k.p + "/tables/" + db + "/"
}
func (k keys) table(db, name string) string { return k.tables(db) + name }

func (k keys) partitions(tableID int64) string {
	return k.p + "/partitions/" + strconv.FormatInt(tableID, 10) + "/"
}
func (k keys) partition(tableID int64, name string) string { return k.partitions(tableID) + name }

func (k keys) assignments() string             { return k.p + "/assignment/" }
func (k keys) assignment(t Target) string      { return k.assignments() + t.path() }
func (k keys) servers() string                 { return k.p + "/servers/" }
func (k keys) server(id string) string         { return k.servers() + id }
func (k keys) snapshotTargets(t Target) string { return k.p + "/snapshots/" + t.path() + "/" }
func (k keys) snapshots(t Target, bucket int) string {
	return k.snapshotTargets(t) + strconv.Itoa(bucket) + "/"
}
func (k keys) snapshot(t Target, bucket int, id int64) string {
	return k.snapshots(t, bucket) + seqValue(id)
}

func (k keys) bulkLoads() string { return k.p + "/bulkload/txn/" }

func (k keys) dataAccess() string { return k.p + "/access/data" }

func (k keys) droppedAll() string      { return k.p + "/dropped/" }
func (k keys) dropped(t Target) string { return k.droppedAll() + t.path() }

// bulkLoadTarget is the prefix of one target's transaction records.
func (k keys) bulkLoadTarget(t Target) string      { return k.bulkLoads() + t.path() + "/" }
func (k keys) bulkLoad(t Target, id string) string { return k.bulkLoadTarget(t) + id }

// tableChildren are the prefixes of everything kept by table id, swept by
// DropTable: assignments (of the table's partitions; the table's own is the
// key without the slash), snapshots, snapshot id sequences, partitions.
func (k keys) tableChildren(tableID int64) []string {
	t := Target{TableID: tableID}
	return []string{
		k.assignment(t) + "/",
		k.snapshotTargets(t),
		k.seqSnapshots(t),
		k.partitions(tableID),
	}
}

// parseAssignmentKey returns the target an assignment key names.
func (k keys) parseAssignmentKey(key string) (Target, error) {
	rest, ok := strings.CutPrefix(key, k.assignments())
	if !ok {
		return Target{}, fmt.Errorf("%w: key %q is not an assignment key", ErrCorrupt, key)
	}
	tid, pid, partitioned := strings.Cut(rest, "/p")
	var t Target
	var err error
	if t.TableID, err = strconv.ParseInt(tid, 10, 64); err == nil && partitioned {
		t.PartitionID, err = strconv.ParseInt(pid, 10, 64)
	}
	if err == nil {
		err = t.Validate()
	}
	if err != nil || t.path() != rest {
		return Target{}, fmt.Errorf("%w: assignment key %q", ErrCorrupt, key)
	}
	return t, nil
}

// seqValue is the stored form of a sequence value and of a snapshot id in
// a key: 20 decimal digits, so that etcd's byte-wise comparison of two
// values is their numeric comparison.
func seqValue(v int64) string { return fmt.Sprintf("%020d", v) }

func parseSeqValue(key string, b []byte) (int64, error) {
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || v < 1 || len(b) != 20 {
		return 0, fmt.Errorf("%w: sequence %s holds %q", ErrCorrupt, key, b)
	}
	return v, nil
}
