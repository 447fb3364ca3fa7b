package bulktxn

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/datadriven"
)

func init() {
	register("persist", persistCmd)
	register("etcd", etcdCmd)
	register("fail", failCmd)
}

// fail [precondition]: the outstanding operation (a check or a write)
// failed: an I/O error (unknown outcome), or lost leadership.
func failCmd(e *env, d *datadriven.TestData) {
	err := errors.New("storage: request timed out")
	if d.HasArg("precondition") {
		err = fmt.Errorf("%w: lost leadership", errPrecondition)
	}
	e.step(Failed{Op: e.m.op, Err: err, Precondition: d.HasArg("precondition")})
	e.state()
}

// persist [lost|fail|precondition]: the driver performs the outstanding
// write (record, registration, adoptions) against etcd and reports:
//
//	persist               applied, or Failed{Precondition} if a revision moved
//	persist lost          applied, but the response was lost: Failed (unknown outcome)
//	persist fail          not applied: Failed (unknown outcome)
//	persist partial       only the adoptions applied (one etcd transaction each), not the record: Failed
//	persist precondition  not applied: the coordinator lost leadership
func persistCmd(e *env, d *datadriven.TestData) {
	op, w := e.m.op, e.m.opEff
	if op == OpNone || e.m.retryAt != 0 {
		fmt.Fprintf(e.out, "(no write in flight)\n")
	}
	var in Input
	switch {
	case d.HasArg("precondition"):
		in = Failed{Op: op, Err: fmt.Errorf("%w: lost leadership", errPrecondition), Precondition: true}
	case d.HasArg("fail"):
		in = Failed{Op: op, Err: errors.New("etcd: request timed out")}
	case d.HasArg("partial"):
		w := w.(PersistRecord)
		for _, a := range w.Adopt {
			e.db.registry[a.Bucket] = a
		}
		in = Failed{Op: op, Err: errors.New("etcd: request timed out")}
	default:
		rev, err := e.db.apply(w)
		in = result(op, rev, err)
		if d.HasArg("lost") && err == nil {
			in = Failed{Op: op, Err: errors.New("etcd: request timed out")}
		}
	}
	e.step(in)
	e.state()
}

// etcd prints what etcd holds.
func etcdCmd(e *env, d *datadriven.TestData) {
	db := e.db
	if db.rec == nil {
		fmt.Fprintf(e.out, "record: none\n")
	} else {
		fmt.Fprintf(e.out, "record@%d: %s\n", db.recRev, fmtRecord(db.rec, true))
	}
	fmt.Fprintf(e.out, "registration@%d: %s\nregistry: %d bucket snapshots\n", db.regRev, db.reg, len(db.registry))
}
