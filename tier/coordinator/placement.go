package coordinator

import "slices"

// BucketPlacement is where one bucket lives: its replicas (tablet server
// ids, no duplicates; the order is the preference order), its leader (one of
// Replicas, or "" when it has none) and the leader's epoch.
type BucketPlacement struct {
	Replicas    []string
	Leader      string
	LeaderEpoch int32
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
// The rules, applied in this order:
//
//  1. Repair, target by target and bucket by bucket in input order: drop
//     replicas on servers that are not live and duplicates; drop replicas
//     beyond the replication factor (never the leader); then add replicas
//     until the bucket has min(RF, live servers) of them, each time choosing
//     the live server that holds the fewest replicas overall (ties: the
//     smallest id) and does not hold the bucket yet. An RF below one counts
//     as one. A bucket left with fewer than RF replicas is under-replicated;
//     that is reported, not an error, and repaired as soon as servers join.
//  2. Leaders: a bucket keeps its leader while the leader is one of its
//     replicas. Otherwise its leader becomes its first replica (for a bucket
//     placed for the first time: the new replica that leads the fewest
//     buckets, moved to the front, which spreads leaders), or "" if it has
//     none. Every change of leader increments the leader epoch, so a deposed
//     bucket leader is fenced; the first leader of a never-placed bucket
//     (no replicas, no leader, epoch 0) keeps epoch 0.
//  3. Rebalance, at most maxMoves times: while the most loaded live server
//     holds at least two replicas more than the least loaded one, move one
//     replica from the former to the latter, preferring a follower (the
//     first in target and bucket order whose bucket the least loaded server
//     does not hold yet), which keeps its position in the replica list. A
//     leader is moved only if no follower can be: it goes to the end of the
//     list and the first remaining replica leads, with the epoch
//     incremented. Such a move always exists while the loads differ by two
//     or more, so repeated rounds reach a spread of at most one. Replicas of
//     pinned targets are never moved for balance (they still count in the
//     loads, and are still repaired), so with pinned targets the spread may
//     stay wider until they are unpinned.
//
// Loads count replicas, not leaders; leaders are spread only when buckets
// are first placed.
func Placement(servers []string, targets []TargetPlacement, maxMoves int) PlacementResult {
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
			if len(cur.Replicas) < rf {
				res.UnderReplicated++
			}
		}
	}
	res.Moves = p.rebalance(res.Targets, maxMoves)
	res.Balanced = p.balanced()
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
	servers []string       // live, sorted, unique
	load    map[string]int // replicas per live server
	leads   map[string]int // leaders per live server
}

func newPlacer(servers []string) *placer {
	s := slices.Clone(servers)
	slices.Sort(s)
	s = slices.Compact(s)
	p := &placer{servers: s, load: make(map[string]int, len(s)), leads: make(map[string]int, len(s))}
	for _, id := range s {
		p.load[id] = 0
	}
	return p
}

func (p *placer) live(id string) bool {
	_, ok := p.load[id]
	return ok
}

// survivors returns bp without replicas on dead servers, duplicates and
// replicas beyond rf (never the leader), and counts what it keeps. The
// leader is kept only if it survives; fill settles it and the epoch.
func (p *placer) survivors(bp BucketPlacement, rf int) BucketPlacement {
	out := BucketPlacement{LeaderEpoch: bp.LeaderEpoch}
	for _, r := range bp.Replicas {
		if p.live(r) && !slices.Contains(out.Replicas, r) {
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
	if slices.Contains(out.Replicas, bp.Leader) {
		out.Leader = bp.Leader
		p.leads[bp.Leader]++
	}
	for _, r := range out.Replicas {
		p.load[r]++
	}
	return out
}

// fill adds replicas to cur up to rf (or every live server) and settles the
// leader and its epoch against old; it returns how many replicas it added.
func (p *placer) fill(cur *BucketPlacement, rf int, old BucketPlacement) int {
	first := neverPlaced(old)
	start := len(cur.Replicas)
	for len(cur.Replicas) < rf {
		s, ok := p.leastLoaded(cur.Replicas)
		if !ok {
			break
		}
		cur.Replicas = append(cur.Replicas, s)
		p.load[s]++
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
		cur.Leader = cur.Replicas[0]
		p.leads[cur.Leader]++
	}
	if cur.Leader != old.Leader && !first {
		cur.LeaderEpoch = old.LeaderEpoch + 1
	}
	return added
}

// leastLoaded returns the live server with the fewest replicas (ties: the
// smallest id) that is not in exclude.
func (p *placer) leastLoaded(exclude []string) (string, bool) {
	best, found := "", false
	for _, s := range p.servers {
		if slices.Contains(exclude, s) {
			continue
		}
		if !found || p.load[s] < p.load[best] {
			best, found = s, true
		}
	}
	return best, found
}

// extremes returns the most loaded live server (ties: the smallest id) and
// the least loaded one (ties: the smallest id).
func (p *placer) extremes() (most, least string) {
	for i, s := range p.servers {
		if i == 0 || p.load[s] > p.load[most] {
			most = s
		}
		if i == 0 || p.load[s] < p.load[least] {
			least = s
		}
	}
	return most, least
}

func (p *placer) balanced() bool {
	if len(p.servers) == 0 {
		return true
	}
	most, least := p.extremes()
	return p.load[most]-p.load[least] <= 1
}

// rebalance makes at most maxMoves moves and returns how many it made.
func (p *placer) rebalance(targets []TargetPlacement, maxMoves int) int {
	moves := 0
	for moves < maxMoves && !p.balanced() {
		from, to := p.extremes()
		if !p.moveOne(targets, from, to) {
			break // only pinned replicas could move
		}
		moves++
	}
	return moves
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
				if j < 0 || slices.Contains(bp.Replicas, to) || (bp.Leader == from) != leaders {
					continue
				}
				p.load[from]--
				p.load[to]++
				if !leaders {
					bp.Replicas[j] = to
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
	return a.Leader == b.Leader && a.LeaderEpoch == b.LeaderEpoch && slices.Equal(a.Replicas, b.Replicas)
}
