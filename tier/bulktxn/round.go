package bulktxn

import (
	"fmt"
	"maps"
	"slices"

	"github.com/thawdb/thaw/bulkload"
)

// roundKind names a convergence round: a command every replica holder of
// the target must confirm.
type roundKind uint8

const (
	fenceRound   roundKind = iota // SendFence → FenceReport
	restoreRound                  // SendRestore → RestoreReport
	publishRound                  // SendPublish → ActiveReport
	unfenceRound                  // SendUnfence → ActiveReport
)

var roundNames = [...]string{"fence", "restore", "publish", "unfence"}

func (k roundKind) String() string { return roundNames[k] }

type replica struct {
	bucket int
	server string
}

// round is one convergence round over the holders as they were when it
// started. It completes when every member confirmed and every bucket has
// a holder; a change of holders starts a new round with a new id.
type round struct {
	kind    roundKind
	id      uint64
	members map[replica]bool // true once confirmed
	left    int              // members not confirmed
	covered bool             // every bucket has at least one holder
	sentAt  int64
}

func (m *Machine) startRound(kind roundKind) {
	m.lastRound++
	r := &round{kind: kind, id: m.lastRound, members: make(map[replica]bool), covered: true}
	for b := range m.rec.Buckets {
		servers := m.holders.Replicas[b]
		if len(servers) == 0 {
			r.covered = false
		}
		for _, s := range servers {
			r.members[replica{b, s}] = false
		}
	}
	r.left = len(r.members)
	m.round = r
	m.send(r)
}

// send emits the round's command to every unconfirmed member, one effect
// per server, servers and buckets in ascending order.
func (m *Machine) send(r *round) {
	byServer := make(map[string][]int)
	for k, done := range r.members {
		if !done {
			byServer[k.server] = append(byServer[k.server], k.bucket)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(byServer)) {
		bs := byServer[s]
		slices.Sort(bs)
		switch r.kind {
		case fenceRound:
			m.emit(SendFence{Round: r.id, Server: s, Buckets: bs})
		case restoreRound:
			m.emit(SendRestore{Round: r.id, Server: s, Buckets: bs})
		case publishRound:
			m.emit(SendPublish{Round: r.id, Server: s, Buckets: bs})
		case unfenceRound:
			m.emit(SendUnfence{Round: r.id, Server: s, Buckets: bs})
		}
	}
	r.sentAt = m.now
}

// checkReport checks that a report answers the running round of kind and
// names only replicas of that round.
func (m *Machine) checkReport(kind roundKind, id uint64, server string, buckets []int) error {
	r := m.round
	if r == nil || r.id != id || r.kind != kind {
		return fmt.Errorf("%w: %s report of round %d from %s", ErrStaleReport, kind, id, server)
	}
	if len(buckets) == 0 {
		return fmt.Errorf("%w: %s report from %s names no bucket", ErrUnexpected, kind, server)
	}
	for _, b := range buckets {
		if _, ok := r.members[replica{b, server}]; !ok {
			return fmt.Errorf("%w: %s report: %s holds no replica of bucket %d in round %d", ErrUnexpected, kind, server, b, id)
		}
	}
	return nil
}

// confirm marks replicas confirmed and reports whether the round is
// complete, which ends it.
func (m *Machine) confirm(server string, buckets []int) bool {
	r := m.round
	for _, b := range buckets {
		if k := (replica{b, server}); !r.members[k] {
			r.members[k] = true
			r.left--
		}
	}
	if r.left > 0 || !r.covered {
		return false
	}
	m.round = nil
	return true
}

func (m *Machine) onFenceReport(in FenceReport) error {
	if err := m.checkReport(fenceRound, in.Round, in.Server, in.Buckets); err != nil {
		return err
	}
	if !in.Empty {
		buckets := in.Buckets
		if len(in.NotEmpty) > 0 {
			buckets = in.NotEmpty
		}
		m.wantAbort(bulkload.TargetNotEmpty, fmt.Sprintf("replicas of buckets %v on %s are not empty (log end %d)", buckets, in.Server, in.LogEnd))
		return nil
	}
	if m.confirm(in.Server, in.Buckets) {
		m.fenced = true
	}
	return nil
}

func (m *Machine) onRestoreReport(in RestoreReport) error {
	if err := m.checkReport(restoreRound, in.Round, in.Server, in.Buckets); err != nil {
		return err
	}
	if in.Err != "" {
		return nil // sent again after the resend interval
	}
	if m.confirm(in.Server, in.Buckets) {
		m.restored = true
	}
	return nil
}

func (m *Machine) onActiveReport(in ActiveReport) error {
	kind := publishRound
	if m.round != nil && m.round.kind == unfenceRound {
		kind = unfenceRound
	}
	if err := m.checkReport(kind, in.Round, in.Server, in.Buckets); err != nil {
		return err
	}
	if m.confirm(in.Server, in.Buckets) {
		if kind == publishRound {
			m.published = true
		} else {
			m.unfenced = true
		}
	}
	return nil
}
