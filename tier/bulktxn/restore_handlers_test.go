package bulktxn

import "github.com/cockroachdb/datadriven"

func init() {
	register("restore", restoreCmd)
	register("restore-all", restoreAllCmd)
	register("active", activeCmd)
	register("active-all", activeAllCmd)
}

// restore server=ts-1 [buckets=...] [round=N] [fail=msg]: a restore report.
func restoreCmd(e *env, d *datadriven.TestData) {
	s := e.arg(d, "server", "ts-1")
	e.step(RestoreReport{Round: e.roundID(d), Server: s, Buckets: e.buckets(d, e.roundMembers(s)), Err: e.arg(d, "fail", "")})
	e.state()
}

// restore-all: every server with unconfirmed members reports ready.
func restoreAllCmd(e *env, d *datadriven.TestData) {
	for _, s := range e.roundServers() {
		e.step(RestoreReport{Round: e.m.round.id, Server: s, Buckets: e.roundMembers(s)})
	}
	e.state()
}

// active server=ts-1 [buckets=...] [round=N]: a publish or unfence
// confirmation.
func activeCmd(e *env, d *datadriven.TestData) {
	s := e.arg(d, "server", "ts-1")
	e.step(ActiveReport{Round: e.roundID(d), Server: s, Buckets: e.buckets(d, e.roundMembers(s))})
	e.state()
}

// active-all: every server with unconfirmed members confirms ACTIVE.
func activeAllCmd(e *env, d *datadriven.TestData) {
	for _, s := range e.roundServers() {
		e.step(ActiveReport{Round: e.m.round.id, Server: s, Buckets: e.roundMembers(s)})
	}
	e.state()
}
