package coordinator

import (
	"cmp"
	"slices"
)

// BucketPlacement is where one bucket lives: its replicas (tablet server
// ids, no duplicates; the order is the preference order), its leader (one of
// Replicas, or "" when it has none), the leader's epoch, and the changelog
// its replicas share ("" before the first placement, or from an older
// release: then it is taken from the replicas).
type BucketPlacement struct {
	Replicas    []string
	Leader      string
	LeaderEpoch int32
	Changelog   string
}

// Server is a live tablet server: its id and the identity of its changelog.
// Only servers of one changelog may hold replicas of one bucket: a follower
// replicates by tailing its leader's log, and a replica restores from the
// bucket's last snapshot plus that log. "" is a server of a release that
// does not report its changelog (see Placement).
//
// An Awaited server is not live but expected back (a coordinator's new term
// gives the servers its assignments name time to register): Placement keeps
// its replicas where they are instead of replacing them (see Placement).
type Server struct {
	ID        string
	Changelog string
	Awaited   bool
}

// TargetPlacement is the current placement of one physical target and its
// replication factor. Buckets has one entry per bucket; a target that was
// never placed has entries with no replicas, no leader and epoch 0.
type TargetPlacement struct {
	RF      int
	Buckets []BucketPlacement
	// Pinned targets keep their replicas where they are unless a server
	// dies (a bulk load holds the target, and moving a replica would
	// restart its convergence).
	Pinned bool
}

// PlacementResult is what Placement decided.
type PlacementResult struct {
	// Targets holds the new placement of every input target, in input order
	// and with the input's bucket counts. Slices are fresh: the input is
	// never modified.
	Targets []TargetPlacement
	// Changed[i] reports whether Targets[i] differs from the input.
	Changed []bool
	// Repairs counts replicas added to buckets that had fewer than their
	// replication factor (new targets, replicas on dead servers).
	Repairs int
	// Moves counts replicas moved for balance (at most maxMoves).
	Moves int
	// LeaderChanges counts buckets whose leader changed (each bumped its
	// leader epoch), new buckets' first leaders excluded.
	LeaderChanges int
	// UnderReplicated counts buckets left with fewer replicas than their
	// replication factor because fewer servers are live.
	UnderReplicated int
	// Balanced reports whether, after this round, the replica counts of the
	// live servers differ by at most one, so no further round would move
	// anything.
	Balanced bool
}

// Placement computes a new assignment of every target's buckets to the live
// tablet servers. It is pure and deterministic: the same input gives the
// same output.
//
// Every bucket belongs to one changelog (BucketPlacement.Changelog): that
// of its first replica when it is first placed, and for a bucket placed by
// an older release that of its leader (else its first live replica that
// reports one). Its replicas are only ever servers of that changelog; every
// rule below speaks of those servers only. When none of them is live the
// bucket keeps its placement as it is, dead replicas and leader included,
// and waits for them: a server of another changelog would serve the
// bucket's last snapshot without the writes since, which are in the
// changelog it cannot read.
//
// While a server of an older release (changelog "") is live — a rolling
// upgrade — that server may hold a replica of any bucket (as before), a
// bucket whose changelog is unknown may go to any server, new buckets are
// placed as before, the servers are balanced as one group, and the result
// records no changelog the input did not hold (older tablet servers could
// not read an assignment that did); replicas of two different reported
// changelogs still never share a bucket. Once no such server is live, a
// bucket whose changelog is still unknown (no live replica reports one)
// waits like any other whose changelog has no live server.
//
// The rules, applied in this order:
//
//  1. Repair, target by target and bucket by bucket in input order: drop
//     replicas on servers that are not live (unless the bucket waits, see
//     above), replicas of other changelogs, and duplicates; drop replicas
//     beyond the replication factor (never the leader); then add replicas
//     until the bucket has min(RF, live servers of its changelog) of them,
//     each time choosing the live server that holds the fewest replicas
//     overall (ties: the smallest id) and does not hold the bucket yet. A
//     bucket placed for the first time chooses its first replica among the
//     changelogs with the most live servers, up to RF. An RF below one counts
//     as one. A bucket left with fewer live replicas than RF is
//     under-replicated; that is reported, not an error, and repaired as soon
//     as servers join.
//  2. Leaders: a bucket keeps its leader while the leader is one of its
//     replicas. Otherwise its leader becomes its first replica (for a bucket
//     placed for the first time: the new replica that leads the fewest
//     buckets, moved to the front, which spreads leaders), or "" if it has
//     none. Every change of leader increments the leader epoch, so a deposed
//     bucket leader is fenced; the first leader of a never-placed bucket
//     (no replicas, no leader, epoch 0) keeps epoch 0.
//  3. Rebalance, at most maxMoves times, changelog by changelog: while the
//     most loaded live server of a changelog holds at least two replicas
//     more than its least loaded one, move one replica from the former to
//     the latter, preferring a follower (the
//     first in target and bucket order whose bucket the least loaded server
//     does not hold yet); the new replica goes to the end of the replica
//     list, so a failover prefers replicas that held the bucket before it.
//     A leader is moved only if no follower can be: it goes to the end of
//     the list and the first remaining replica leads, with the epoch
//     incremented. Such a move always exists while the loads differ by two
//     or more, so repeated rounds reach a spread of at most one. Replicas of
//     pinned targets are never moved for balance (they still count in the
//     loads, and are still repaired): when the most loaded server can give
//     up only pinned replicas, the next pair of servers whose loads differ
//     by two or more is tried, so with pinned targets only their servers'
//     spread may stay wider until they are unpinned.
//
// Loads count replicas, not leaders; leaders are spread only when buckets
// are first placed.
//
// Awaited servers (Server.Awaited) are not live, but their replicas are not
// dead either: rule 1 keeps them in place and does not replace them (they
// count towards the replication factor, not towards the live replicas, so
// their buckets are under-replicated until the servers return), rule 2
// keeps an awaited leader leading, epoch unchanged (its bucket has no
// serving leader until it returns or is no longer awaited, as after a
// crash until the lease expires; a restarted tier so comes back with the
// leaders it had instead of every bucket led by the first server back), and
// rule 3 moves nothing while any server is awaited.
func Placement(servers []Server, targets []TargetPlacement, maxMoves int) PlacementResult {
	p := newPlacer(servers)
	res := PlacementResult{
		Targets: make([]TargetPlacement, len(targets)),
		Changed: make([]bool, len(targets)),
	}
	// Count the load of what survives before placing anything, so that
	// repairs see every surviving replica, not just those of earlier
	// targets.
	for i, t := range targets {
		out := TargetPlacement{RF: t.RF, Buckets: make([]BucketPlacement, len(t.Buckets)), Pinned: t.Pinned}
		for b, bp := range t.Buckets {
			out.Buckets[b] = p.survivors(bp, max(t.RF, 1))
		}
		res.Targets[i] = out
	}
	for i, t := range targets {
		rf := max(t.RF, 1)
		for b := range res.Targets[i].Buckets {
			cur := &res.Targets[i].Buckets[b]
			res.Repairs += p.fill(cur, rf, t.Buckets[b])
			if p.liveCount(cur.Replicas) < rf {
				res.UnderReplicated++
			}
		}
	}
	if len(p.awaited) == 0 {
		res.Moves = p.rebalance(res.Targets, maxMoves)
	}
	res.Balanced = p.balanced()
	if p.legacy {
		for i, t := range targets {
			for b, old := range t.Buckets {
				res.Targets[i].Buckets[b].Changelog = old.Changelog
			}
		}
	}
	for i, t := range targets {
		for b, old := range t.Buckets {
			nb := res.Targets[i].Buckets[b]
			if !samePlacement(old, nb) {
				res.Changed[i] = true
			}
			if old.Leader != nb.Leader && !neverPlaced(old) {
				res.LeaderChanges++
			}
		}
	}
	return res
}

// placer holds the loads of the live servers while Placement runs.
type placer struct {
	servers []string          // live, sorted, unique
	logOf   map[string]string // changelog of each live server
	logs    []string          // the live servers' changelogs, sorted, unique
	legacy  bool              // a live server reports no changelog
	load    map[string]int    // replicas per live server
	leads   map[string]int    // leaders per live server
	awaited map[string]bool   // servers expected back, not live
}

func newPlacer(servers []Server) *placer {
	p := &placer{logOf: make(map[string]string, len(servers)), load: make(map[string]int, len(servers)), leads: make(map[string]int, len(servers))}
	for _, s := range servers {
		if s.Awaited {
			if p.awaited == nil {
				p.awaited = make(map[string]bool)
			}
			p.awaited[s.ID] = true
			continue
		}
		if _, dup := p.logOf[s.ID]; dup {
			continue // the first registration of an id wins
		}
		p.logOf[s.ID] = s.Changelog
		p.servers = append(p.servers, s.ID)
		p.load[s.ID] = 0
		if !slices.Contains(p.logs, s.Changelog) {
			p.logs = append(p.logs, s.Changelog)
		}
	}
	for id := range p.awaited {
		if p.live(id) {
			delete(p.awaited, id) // live after all
		}
	}
	slices.Sort(p.servers)
	slices.Sort(p.logs)
	p.legacy = slices.Contains(p.logs, "")
	return p
}

// fits reports whether live server s may hold a replica of a bucket of
// changelog log: its own changelog, or either is unknown ("").
func (p *placer) fits(s, log string) bool {
	l := p.logOf[s]
	return p.live(s) && (l == log || l == "" || log == "")
}

// group returns the live servers balanced together as changelog log's
// group: those of that changelog, or all of them while a server reports
// none.
func (p *placer) group(log string) []string {
	if p.legacy {
		return p.servers
	}
	var out []string
	for _, s := range p.servers {
		if p.logOf[s] == log {
			out = append(out, s)
		}
	}
	return out
}

// groups returns the changelogs balanced one by one ("" alone while a
// server reports none).
func (p *placer) groups() []string {
	if p.legacy {
		return []string{""}
	}
	return p.logs
}

func (p *placer) live(id string) bool {
	_, ok := p.load[id]
	return ok
}

// liveIn reports whether a live server may hold a replica of changelog
// log. A bucket of unknown changelog ("") fits any server only while a
// server of an older release is live; after that it waits for one of its
// replicas to report.
func (p *placer) liveIn(log string) bool {
	return p.legacy || log != "" && slices.Contains(p.logs, log)
}

func (p *placer) liveCount(ids []string) int {
	n := 0
	for _, id := range ids {
		if p.live(id) {
			n++
		}
	}
	return n
}

// changelogOf returns the changelog of a bucket placed before: its own, or
// (placed by an older release) its leader's, else its first live
// replica's that reports one, else "".
func (p *placer) changelogOf(bp BucketPlacement) string {
	if bp.Changelog != "" {
		return bp.Changelog
	}
	if l := p.logOf[bp.Leader]; l != "" {
		return l
	}
	for _, r := range bp.Replicas {
		if l := p.logOf[r]; l != "" {
			return l
		}
	}
	return ""
}

// survivors returns bp without replicas on dead servers (unless no server
// of its changelog is live: then it waits for them, as it is; replicas on
// awaited servers stay too), replicas of other changelogs, duplicates and
// replicas beyond rf (never the leader), and counts the live replicas it
// keeps. The leader is kept only if it survives and is live or awaited (or
// the bucket waits); fill settles it and the epoch.
func (p *placer) survivors(bp BucketPlacement, rf int) BucketPlacement {
	out := BucketPlacement{LeaderEpoch: bp.LeaderEpoch}
	if neverPlaced(bp) {
		return out
	}
	out.Changelog = p.changelogOf(bp)
	wait := !p.liveIn(out.Changelog)
	for _, r := range bp.Replicas {
		keep := (wait || p.awaited[r]) && !p.live(r) || p.fits(r, out.Changelog)
		if keep && !slices.Contains(out.Replicas, r) {
			out.Replicas = append(out.Replicas, r)
		}
	}
	for len(out.Replicas) > rf {
		// Drop the last replica that is not the leader.
		for j := len(out.Replicas) - 1; j >= 0; j-- {
			if out.Replicas[j] != bp.Leader {
				out.Replicas = slices.Delete(out.Replicas, j, j+1)
				break
			}
		}
	}
	if slices.Contains(out.Replicas, bp.Leader) && (wait || p.live(bp.Leader) || p.awaited[bp.Leader]) {
		out.Leader = bp.Leader
		if p.live(bp.Leader) {
			p.leads[bp.Leader]++
		}
	}
	for _, r := range out.Replicas {
		if p.live(r) {
			p.load[r]++
		}
	}
	return out
}

// fill adds replicas to cur up to rf (or every live server) and settles the
// leader and its epoch against old; it returns how many replicas it added.
func (p *placer) fill(cur *BucketPlacement, rf int, old BucketPlacement) int {
	first := neverPlaced(old)
	if first && len(p.servers) > 0 && !p.legacy {
		cur.Changelog = p.roomiest(rf)
	}
	if !p.liveIn(cur.Changelog) {
		return 0 // it waits for its servers, as it is
	}
	start := len(cur.Replicas)
	for len(cur.Replicas) < rf {
		s, ok := p.leastLoaded(cur.Changelog, cur.Replicas)
		if !ok {
			break
		}
		cur.Replicas = append(cur.Replicas, s)
		p.load[s]++
		if cur.Changelog == "" {
			cur.Changelog = p.logOf[s] // the first that reports one decides
		}
	}
	added := len(cur.Replicas) - start
	if cur.Leader != "" {
		return added
	}
	if len(cur.Replicas) > 0 {
		if first {
			// Spread leaders: the replica leading the fewest buckets
			// (ties: the earliest chosen) goes first and leads.
			j := 0
			for k, r := range cur.Replicas {
				if p.leads[r] < p.leads[cur.Replicas[j]] {
					j = k
				}
			}
			lead := cur.Replicas[j]
			copy(cur.Replicas[1:j+1], cur.Replicas[:j])
			cur.Replicas[0] = lead
		}
		cur.Leader = p.firstLive(cur.Replicas)
		p.leads[cur.Leader]++
	}
	if cur.Leader != old.Leader && !first {
		cur.LeaderEpoch = old.LeaderEpoch + 1
	}
	return added
}

// firstLive returns the first live server of replicas, or the first
// replica when none is live (they are awaited).
func (p *placer) firstLive(replicas []string) string {
	for _, r := range replicas {
		if p.live(r) {
			return r
		}
	}
	return replicas[0]
}

// roomiest returns the changelog for a new bucket of rf replicas: of those
// whose live servers can hold the most of them (up to rf), the one of the
// least loaded such server (ties: the smallest id).
func (p *placer) roomiest(rf int) string {
	room := make(map[string]int, len(p.logs))
	best := 0
	for _, s := range p.servers {
		l := p.logOf[s]
		room[l] = min(room[l]+1, rf)
		best = max(best, room[l])
	}
	pick := ""
	for _, s := range p.servers {
		if l := p.logOf[s]; room[l] == best && (pick == "" || p.load[s] < p.load[pick]) {
			pick = s
		}
	}
	return p.logOf[pick]
}

// leastLoaded returns the live server of changelog log with the fewest
// replicas (ties: the smallest id) that is not in exclude.
func (p *placer) leastLoaded(log string, exclude []string) (string, bool) {
	best, found := "", false
	for _, s := range p.servers {
		if !p.fits(s, log) || slices.Contains(exclude, s) {
			continue
		}
		if !found || p.load[s] < p.load[best] {
			best, found = s, true
		}
	}
	return best, found
}

// extremes returns the most loaded live server of changelog log's group
// (ties: the smallest id) and the least loaded one (ties: the smallest id).
func (p *placer) extremes(log string) (most, least string) {
	for _, s := range p.group(log) {
		if most == "" || p.load[s] > p.load[most] {
			most = s
		}
		if least == "" || p.load[s] < p.load[least] {
			least = s
		}
	}
	return most, least
}

// balancedIn reports whether the loads of changelog log's live servers
// differ by at most one.
func (p *placer) balancedIn(log string) bool {
	most, least := p.extremes(log)
	return most == "" || p.load[most]-p.load[least] <= 1
}

func (p *placer) balanced() bool {
	for _, l := range p.groups() {
		if !p.balancedIn(l) {
			return false
		}
	}
	return true
}

// rebalance makes at most maxMoves moves, changelog by changelog, and
// returns how many it made.
func (p *placer) rebalance(targets []TargetPlacement, maxMoves int) int {
	moves := 0
	for _, l := range p.groups() {
		for moves < maxMoves && !p.balancedIn(l) && p.moveAny(targets, l) {
			moves++
		}
	}
	return moves
}

// moveAny moves one replica between two live servers of changelog log's
// group whose loads differ by at least two, trying the most loaded source
// and the least loaded destination first (ties: the smallest id); it
// reports whether it moved one. Each move narrows the spread of loads.
// Only the most and the least loaded were tried: when all the most loaded
// one could give up belonged to a pinned target (a bulk load holds it),
// no other server was balanced either, for as long as the load ran.
func (p *placer) moveAny(targets []TargetPlacement, log string) bool {
	byLoad := func(desc bool) []string {
		s := slices.Clone(p.group(log))
		slices.SortFunc(s, func(a, b string) int {
			c := cmp.Compare(p.load[a], p.load[b])
			if desc {
				c = -c
			}
			return cmp.Or(c, cmp.Compare(a, b))
		})
		return s
	}
	sources, dests := byLoad(true), byLoad(false)
	for _, from := range sources {
		for _, to := range dests {
			if p.load[from]-p.load[to] < 2 {
				break
			}
			if p.moveOne(targets, from, to) {
				return true
			}
		}
	}
	return false
}

// moveOne moves one replica from server from to server to, preferring a
// follower; it reports whether it found one to move.
func (p *placer) moveOne(targets []TargetPlacement, from, to string) bool {
	for _, leaders := range []bool{false, true} {
		for i := range targets {
			if targets[i].Pinned {
				continue
			}
			for b := range targets[i].Buckets {
				bp := &targets[i].Buckets[b]
				j := slices.Index(bp.Replicas, from)
				if j < 0 || slices.Contains(bp.Replicas, to) || (bp.Leader == from) != leaders || !p.fits(to, bp.Changelog) {
					continue
				}
				p.load[from]--
				p.load[to]++
				if !leaders {
					// Last in the preference order: a failover picks a
					// replica that held the bucket before this one, which
					// restores first.
					bp.Replicas = append(slices.Delete(bp.Replicas, j, j+1), to)
					return true
				}
				bp.Replicas = append(slices.Delete(bp.Replicas, j, j+1), to)
				p.leads[from]--
				bp.Leader = bp.Replicas[0]
				p.leads[bp.Leader]++
				bp.LeaderEpoch++
				return true
			}
		}
	}
	return false
}

// neverPlaced reports whether bp is a bucket that never had a replica or a
// leader: its first leader keeps epoch 0.
func neverPlaced(bp BucketPlacement) bool {
	return len(bp.Replicas) == 0 && bp.Leader == "" && bp.LeaderEpoch == 0
}

func samePlacement(a, b BucketPlacement) bool {
	return a.Leader == b.Leader && a.LeaderEpoch == b.LeaderEpoch && a.Changelog == b.Changelog && slices.Equal(a.Replicas, b.Replicas)
}
