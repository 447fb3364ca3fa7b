package bulktxn

import (
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"
)

func init() {
	register("fence", fenceCmd)
	register("fence-all", fenceAllCmd)
	register("prove-empty", proveEmptyCmd)
	register("allocate", allocateCmd)
	register("holders", holdersCmd)
}

// fence server=ts-1 [buckets=...] [round=N] [not-empty] [log-end=5]
// reports a server's fence confirmation (default: all its unconfirmed
// buckets of the current round, empty).
func fenceCmd(e *env, d *datadriven.TestData) {
	s := e.arg(d, "server", "ts-1")
	e.step(FenceReport{
		Round: e.roundID(d), Server: s, Buckets: e.buckets(d, e.roundMembers(s)),
		Empty: !d.HasArg("not-empty"), LogEnd: int64(e.intArg(d, "log-end", 0)),
	})
	e.state()
}

// fence-all: every server with unconfirmed members confirms, empty.
func fenceAllCmd(e *env, d *datadriven.TestData) {
	for _, s := range e.roundServers() {
		e.step(FenceReport{Round: e.m.round.id, Server: s, Buckets: e.roundMembers(s), Empty: true})
	}
	e.state()
}

// prove-empty [not-empty=detail] answers ProveEmpty.
func proveEmptyCmd(e *env, d *datadriven.TestData) {
	detail := e.arg(d, "not-empty", "")
	e.step(EmptinessChecked{Empty: detail == "", Detail: detail})
	e.state()
}

// allocate [first=101] answers AllocateSnapshotIDs with consecutive ids.
func allocateCmd(e *env, d *datadriven.TestData) {
	first := int64(e.intArg(d, "first", 101))
	ids := make([]int64, e.intArg(d, "count", e.m.rec.Buckets))
	for i := range ids {
		ids[i] = first + int64(i)
	}
	e.step(SnapshotIDsAllocated{IDs: ids})
	e.state()
}

// holders [servers=ts-1,ts-2 rf=2 [count=N]] [restart=ts-2] [drop=3]: the
// assignment moves (new placement of N buckets, default all), a server
// restarts (new incarnation), or bucket 3 loses its replicas; the machine
// learns it.
func holdersCmd(e *env, d *datadriven.TestData) {
	h := e.holders.Clone()
	if s := e.arg(d, "servers", ""); s != "" {
		h = placement(e.intArg(d, "count", e.m.rec.Buckets), strings.Split(s, ","), e.intArg(d, "rf", 2))
	}
	if s := e.arg(d, "restart", ""); s != "" {
		h.Incarnations[s]++
	}
	if s := e.arg(d, "drop", ""); s != "" {
		b, _ := strconv.Atoi(s)
		h.Replicas[b] = nil
	}
	e.holders = h
	e.step(HoldersChanged{Holders: h})
	e.state()
}
