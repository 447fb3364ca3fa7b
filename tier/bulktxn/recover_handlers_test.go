package bulktxn

import (
	"fmt"

	"github.com/cockroachdb/datadriven"
)

func init() {
	register("recover", recoverCmd)
	register("status", statusCmd)
}

// recover [now=...] [registration=LOADING|ACTIVE|ACTIVE(id)]: the
// coordinator crashed (or the machine halted); a new machine resumes from
// what etcd holds. Pending requests of the old machine are lost with it.
// registration= overrides what etcd shows, to test inconsistencies.
func recoverCmd(e *env, d *datadriven.TestData) {
	if e.db.rec == nil {
		fmt.Fprintln(e.out, "no record in etcd")
		return
	}
	obs := e.db.observed(e.holders, e.now)
	obs.Now = e.setNow(d)
	if s := e.arg(d, "registration", ""); s != "" {
		for _, r := range []Registration{RegActive, RegLoading, RegActiveWithID} {
			if r.String() == s {
				obs.Registration = r
			}
		}
	}
	m, effs, err := Recover(e.cfg, *e.db.rec, obs)
	if err != nil {
		fmt.Fprintf(e.out, "error: %v\n", err)
		return
	}
	e.m = m
	e.print(effs)
	e.state()
}

// status prints Machine.Status.
func statusCmd(e *env, d *datadriven.TestData) {
	s := e.m.Status()
	fmt.Fprintf(e.out, "%s txn=%s %s", s.Handle.Target, s.Handle.TxnID, e.fmtStatus(s))
	if s.AbortMessage != "" {
		fmt.Fprintf(e.out, ": %s", s.AbortMessage)
	}
	fmt.Fprintln(e.out)
}
