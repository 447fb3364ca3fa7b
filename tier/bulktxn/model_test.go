package bulktxn

import (
	"errors"
	"fmt"

	"github.com/thawdb/thaw/bulkload"
)

// etcdModel is what etcd holds for one target: the transaction record, the
// registration and the snapshot registry, with etcd's revision rules. It
// answers a write effect as the driver would, comparing revisions.
type etcdModel struct {
	rev      int64
	rec      *bulkload.Record
	recRev   int64
	reg      Registration
	regRev   int64
	registry map[int]Adoption // bucket → adopted snapshot
	writes   int              // applied writes (for the random test)
}

var errPrecondition = errors.New("etcd: compare failed")

func newEtcdModel() *etcdModel {
	return &etcdModel{rev: 5, regRev: 5, registry: map[int]Adoption{}}
}

// apply performs a write effect. It returns the revision, or an error
// wrapping errPrecondition when a comparison fails, or another error when
// the registry holds a different snapshot.
func (db *etcdModel) apply(e Effect) (int64, error) {
	switch w := e.(type) {
	case PersistRecord:
		if db.recRev != w.ExpectRecordRev || (w.ExpectRecordRev == 0) != (db.rec == nil) {
			return 0, fmt.Errorf("%w: record at revision %d, expected %d", errPrecondition, db.recRev, w.ExpectRecordRev)
		}
		if w.Registration != nil && db.regRev != w.Registration.ExpectRev {
			return 0, fmt.Errorf("%w: registration at revision %d, expected %d", errPrecondition, db.regRev, w.Registration.ExpectRev)
		}
		for _, a := range w.Adopt {
			if old, ok := db.registry[a.Bucket]; ok && old != a {
				return 0, fmt.Errorf("registry: bucket %d holds another snapshot", a.Bucket)
			}
		}
		if _, err := bulkload.EncodeRecord(w.Record); err != nil {
			return 0, err
		}
		db.rev++
		db.writes++
		for _, a := range w.Adopt {
			db.registry[a.Bucket] = a
		}
		rec := w.Record.Clone()
		db.rec, db.recRev = &rec, db.rev
		if w.Registration != nil {
			db.reg, db.regRev = w.Registration.To, db.rev
		}
		return db.rev, nil
	case DeleteRecord:
		if db.rec == nil || db.recRev != w.ExpectRecordRev {
			return 0, fmt.Errorf("%w: record at revision %d, expected %d", errPrecondition, db.recRev, w.ExpectRecordRev)
		}
		db.rev++
		db.writes++
		db.rec, db.recRev = nil, 0
		return db.rev, nil
	}
	return 0, fmt.Errorf("not a write: %T", e)
}

// result turns the outcome of apply into the input the driver delivers.
func result(op Op, rev int64, err error) Input {
	if err != nil {
		return Failed{Op: op, Err: err, Precondition: errors.Is(err, errPrecondition)}
	}
	return Persisted{Op: op, Rev: rev}
}

// observed is what a recovering coordinator reads.
func (db *etcdModel) observed(h Holders, now int64) Observed {
	return Observed{RecordRev: db.recRev, Registration: db.reg, RegistrationRev: db.regRev, Holders: h, Now: timeOf(now)}
}

// placement assigns rf of the servers to each of n buckets, round robin.
func placement(n int, servers []string, rf int) Holders {
	h := Holders{Replicas: make([][]string, n), Incarnations: map[string]int64{}}
	for _, s := range servers {
		h.Incarnations[s] = 1
	}
	for b := range n {
		for i := range min(rf, len(servers)) {
			h.Replicas[b] = append(h.Replicas[b], servers[(b+i)%len(servers)])
		}
	}
	return h
}

func testSchema(buckets int, partitioned bool) []byte {
	if partitioned {
		return fmt.Appendf(nil, `{"schema_id":1,"columns":[{"name":"id","type":"INT","nullable":false},{"name":"dt","type":"STRING","nullable":false},{"name":"v","type":"STRING","nullable":true}],"primary_key":["id","dt"],"partition_keys":["dt"],"buckets":%d,"bucketing":"fluss"}`, buckets)
	}
	return fmt.Appendf(nil, `{"schema_id":1,"columns":[{"name":"id","type":"INT","nullable":false},{"name":"v","type":"STRING","nullable":true}],"primary_key":["id"],"buckets":%d,"bucketing":"fluss"}`, buckets)
}
