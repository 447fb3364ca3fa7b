// Package bulktxn is the pure state machine of one bulk-load transaction
// (ARCHITECTURE.md "The bulk-load transaction"), in the style of
// etcd-io/raft: it never performs I/O, never reads the clock and never
// starts a goroutine. A driver in the coordinator feeds it inputs —
// requests, results of the work it asked for, replica reports, holder
// changes, ticks — and performs the effects it returns: etcd writes,
// checks, commands to tablet servers, replies, timers. Given the same
// inputs it returns the same effects.
//
// # Lifecycle
//
// Admit decides, from what the driver read in etcd, whether a Begin that
// names no existing transaction may start one. New starts it; Recover
// resumes one from its persisted record and registration (coordinator
// failover, or after a halt). Step applies one input and returns the
// effects, in order. See DESIGN.md for the states, the persisted points and
// the meaning of each effect.
//
//	m, effs, err := bulktxn.New(cfg, begin)   // or bulktxn.Recover(cfg, rec, observed)
//	for {
//		perform(effs)                         // results come back as inputs
//		effs, err = m.Step(<-inputs)          // err: log the input and drop it
//	}
//
// # Contract with the driver
//
//   - At most one operation (Op: an etcd write, the emptiness proof, the
//     snapshot id allocation, the manifest validation) is outstanding; its
//     result is exactly one Persisted, EmptinessChecked,
//     SnapshotIDsAllocated, ValidationFinished or Failed naming it.
//     Replica commands (SendFence, SendRestore, SendPublish, SendUnfence)
//     are fire-and-forget: answers come back as reports carrying the
//     command's round; the machine sends again what stays unconfirmed.
//   - Every request (New's Begin, BeginRequested, CommitRequested,
//     AbortRequested) gets exactly one Reply, in the same Step or a later
//     one, as long as the machine lives. A machine that halts answers its
//     pending requests with bulkload.ErrUnavailable; a driver that loses the
//     machine (process crash) loses them, and callers retry.
//   - Step refuses an input that is invalid in the current state (a late or
//     repeated result, a stale report, a result for the wrong operation)
//     with an error wrapping ErrUnexpected, ErrStaleReport or ErrHalted, and
//     changes nothing. Requests are never refused this way.
//   - A Failed with Precondition (lost leadership, a revision that moved)
//     halts the machine: it emits Halt and accepts nothing but requests
//     (answered ErrUnavailable). The driver re-reads the record and the
//     registration and calls Recover; the record in etcd is the only truth.
//     A Failed without Precondition means the outcome is unknown: the
//     machine re-issues the same effect after Config.RetryInterval, and a
//     write that did land makes the retry's comparison fail, which halts
//     and recovers.
//   - Results and reports go to the machine whose effect asked for them:
//     round numbers and operations restart with each machine, so a driver
//     that replaces a machine drops what the old one's effects return.
//   - Time comes only from inputs (Now fields and Tick); the driver ticks at
//     least at each ScheduleTick.At. Effects are read-only for the driver.
//
// # Concurrency
//
// A Machine is not safe for concurrent use; one driver goroutine owns it.
// Admit and the Config methods are pure.
package bulktxn
