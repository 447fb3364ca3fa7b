package coordinator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// bp parses "a,b,c@a#3/x": replicas a, b, c, leader a, leader epoch 3,
// changelog x (no "/x": ""). "" is a never-placed bucket; "@#2" has no
// replicas, no leader and epoch 2.
func bp(s string) BucketPlacement {
	if s == "" {
		return BucketPlacement{}
	}
	s, log, _ := strings.Cut(s, "/")
	reps, rest, _ := strings.Cut(s, "@")
	leader, epoch, _ := strings.Cut(rest, "#")
	e, err := strconv.Atoi(epoch)
	if err != nil {
		panic(fmt.Sprintf("bad bucket %q", s))
	}
	var r []string
	if reps != "" {
		r = strings.Split(reps, ",")
	}
	return BucketPlacement{Replicas: r, Leader: leader, LeaderEpoch: int32(e), Changelog: log}
}

func (b BucketPlacement) String() string {
	if neverPlaced(b) && b.Changelog == "" {
		return ""
	}
	out := fmt.Sprintf("%s@%s#%d", strings.Join(b.Replicas, ","), b.Leader, b.LeaderEpoch)
	if b.Changelog != "" {
		out += "/" + b.Changelog
	}
	return out
}

// servers parses "a" (server a, changelog "") and "a/x" (changelog x).
func servers(ss ...string) []Server {
	out := make([]Server, len(ss))
	for i, s := range ss {
		id, log, _ := strings.Cut(s, "/")
		out[i] = Server{ID: id, Changelog: log}
	}
	return out
}

func target(rf int, buckets ...string) TargetPlacement {
	t := TargetPlacement{RF: rf}
	for _, b := range buckets {
		t.Buckets = append(t.Buckets, bp(b))
	}
	return t
}

// newTarget is a target of n never-placed buckets.
func newTarget(rf, n int) TargetPlacement {
	return TargetPlacement{RF: rf, Buckets: make([]BucketPlacement, n)}
}

func pinned(t TargetPlacement) TargetPlacement {
	t.Pinned = true
	return t
}

func render(ts []TargetPlacement) []string {
	var out []string
	for _, t := range ts {
		var bs []string
		for _, b := range t.Buckets {
			bs = append(bs, b.String())
		}
		out = append(out, strings.Join(bs, " "))
	}
	return out
}

func TestPlacement(t *testing.T) {
	tests := []struct {
		name     string
		servers  []string
		targets  []TargetPlacement
		maxMoves int

		want            []string // one line per target: buckets separated by spaces
		changed         []bool
		repairs, moves  int
		leaderChanges   int
		underReplicated int
		balanced        bool
	}{
		{
			name:    "new target spreads replicas and leaders",
			servers: []string{"a", "b", "c"},
			targets: []TargetPlacement{newTarget(3, 3)},
			want:    []string{"a,b,c@a#0 b,a,c@b#0 c,a,b@c#0"},
			changed: []bool{true}, repairs: 9, balanced: true,
		},
		{
			name:    "new target on more servers than rf is even",
			servers: []string{"a", "b", "c", "d"},
			targets: []TargetPlacement{newTarget(2, 4)},
			want:    []string{"a,b@a#0 c,d@c#0 b,a@b#0 d,c@d#0"},
			changed: []bool{true}, repairs: 8, balanced: true,
		},
		{
			name:    "servers are sorted and deduplicated",
			servers: []string{"c", "a", "b", "a"},
			targets: []TargetPlacement{newTarget(1, 3)},
			want:    []string{"a@a#0 b@b#0 c@c#0"},
			changed: []bool{true}, repairs: 3, balanced: true,
		},
		{
			name:    "new target goes to the least loaded servers",
			servers: []string{"a", "b", "c"},
			targets: []TargetPlacement{target(1, "a@a#0", "a@a#0", "b@b#0"), newTarget(1, 2)},
			want:    []string{"a@a#0 a@a#0 b@b#0", "c@c#0 b@b#0"},
			changed: []bool{false, true}, repairs: 2, balanced: true,
		},
		{
			name:    "follower on a dead server is replaced, leader and epoch stay",
			servers: []string{"a", "b", "d"},
			targets: []TargetPlacement{target(3, "a,b,c@a#4")},
			want:    []string{"a,b,d@a#4"},
			changed: []bool{true}, repairs: 1, balanced: true,
		},
		{
			name:    "leader on a dead server: first surviving replica leads with epoch+1",
			servers: []string{"b", "c", "d"},
			targets: []TargetPlacement{target(3, "a,c,b@a#4")},
			want:    []string{"c,b,d@c#5"},
			changed: []bool{true}, repairs: 1, leaderChanges: 1, balanced: true,
		},
		{
			name:    "every replica dead and no other server: leaderless with epoch+1",
			servers: []string{"z"},
			targets: []TargetPlacement{target(1, "a@a#2")},
			want:    []string{"z@z#3"},
			changed: []bool{true}, repairs: 1, leaderChanges: 1, balanced: true,
		},
		{
			name:    "no live server at all: placed buckets wait as they are",
			servers: nil,
			targets: []TargetPlacement{target(2, "a,b@a#2"), newTarget(2, 1)},
			want:    []string{"a,b@a#2", ""},
			changed: []bool{false, false}, underReplicated: 2, balanced: true,
		},
		{
			name:    "a new bucket takes the changelog with room for rf replicas",
			servers: []string{"a/x", "b/y", "c/y", "d/z"},
			targets: []TargetPlacement{newTarget(2, 2)},
			want:    []string{"b,c@b#0/y c,b@c#0/y"},
			changed: []bool{true}, repairs: 4, balanced: true,
		},
		{
			name:    "new buckets of rf 1 spread over every changelog",
			servers: []string{"a/x", "b/y", "c/y"},
			targets: []TargetPlacement{newTarget(1, 3)},
			want:    []string{"a@a#0/x b@b#0/y c@c#0/y"},
			changed: []bool{true}, repairs: 3, balanced: true,
		},
		{
			name:    "rf above every changelog's servers: under-replicated, never across changelogs",
			servers: []string{"a/x", "b/y"},
			targets: []TargetPlacement{newTarget(2, 2)},
			want:    []string{"a@a#0/x b@b#0/y"},
			changed: []bool{true}, repairs: 2, underReplicated: 2, balanced: true,
		},
		{
			name:    "a dead server's bucket waits when its changelog has no live server",
			servers: []string{"a/x", "c/x"},
			targets: []TargetPlacement{target(1, "b@b#4/y", "a@a#0/x")},
			want:    []string{"b@b#4/y a@a#0/x"},
			changed: []bool{false}, underReplicated: 1, balanced: true,
		},
		{
			name:    "a dead leader is replaced within its changelog only",
			servers: []string{"b/x", "c/y", "d/x"},
			targets: []TargetPlacement{target(2, "a,b@a#1/x")},
			want:    []string{"b,d@b#2/x"},
			changed: []bool{true}, repairs: 1, leaderChanges: 1, balanced: true,
		},
		{
			name:    "an older release's bucket takes its leader's changelog and drops replicas of others",
			servers: []string{"a/x", "b/y", "c/x"},
			targets: []TargetPlacement{target(2, "a,b@a#3")},
			want:    []string{"a,c@a#3/x"},
			changed: []bool{true}, repairs: 1, balanced: true,
		},
		{
			name:    "an older release's bucket whose replicas are all dead waits",
			servers: []string{"c/x"},
			targets: []TargetPlacement{target(1, "a@a#3")},
			want:    []string{"a@a#3"},
			changed: []bool{false}, underReplicated: 1, balanced: true,
		},
		{
			name:    "rolling upgrade: a server without a changelog takes any bucket, and nothing is recorded",
			servers: []string{"a", "b/x", "c/y"},
			targets: []TargetPlacement{target(2, "b,d@b#1"), target(2, "c,d@c#0"), newTarget(2, 1)},
			want:    []string{"b,a@b#1", "c,a@c#0", "a,b@a#0"},
			changed: []bool{true, true, true}, repairs: 4, balanced: false,
		},
		{
			name:    "rolling upgrade: replicas of two reported changelogs still never meet",
			servers: []string{"b/x", "c/y", "z"},
			targets: []TargetPlacement{target(2, "b,c@b#1")},
			want:    []string{"b,z@b#1"},
			changed: []bool{true}, repairs: 1, balanced: true,
		},
		{
			name:     "rebalancing moves replicas within a changelog, never across",
			servers:  []string{"a/x", "b/x", "c/y"},
			targets:  []TargetPlacement{target(1, "a@a#0/x", "a@a#0/x", "a@a#0/x", "c@c#0/y")},
			maxMoves: 10,
			want:     []string{"b@b#1/x a@a#0/x a@a#0/x c@c#0/y"},
			changed:  []bool{true}, moves: 1, leaderChanges: 1, balanced: true,
		},
		{
			name:    "rf above live servers places on all and reports under-replication",
			servers: []string{"a", "b"},
			targets: []TargetPlacement{newTarget(3, 2)},
			want:    []string{"a,b@a#0 b,a@b#0"},
			changed: []bool{true}, repairs: 4, underReplicated: 2, balanced: true,
		},
		{
			name:    "under-replicated bucket is repaired when a server joins",
			servers: []string{"a", "b", "c"},
			targets: []TargetPlacement{target(3, "a,b@a#0", "b,a@b#1")},
			want:    []string{"a,b,c@a#0 b,a,c@b#1"},
			changed: []bool{true}, repairs: 2, balanced: true,
		},
		{
			name:    "rf below one counts as one",
			servers: []string{"a", "b"},
			targets: []TargetPlacement{newTarget(0, 1)},
			want:    []string{"a@a#0"},
			changed: []bool{true}, repairs: 1, balanced: true,
		},
		{
			name:    "duplicates and replicas beyond rf are dropped, never the leader",
			servers: []string{"a", "b", "c"},
			targets: []TargetPlacement{target(2, "a,a,b,c@c#1")},
			want:    []string{"a,c@c#1"},
			changed: []bool{true}, balanced: true,
		},
		{
			name:    "leader not among replicas is replaced",
			servers: []string{"a", "b"},
			targets: []TargetPlacement{target(2, "a,b@x#7")},
			want:    []string{"a,b@a#8"},
			changed: []bool{true}, leaderChanges: 1, balanced: true,
		},
		{
			name:     "join moves followers, at most maxMoves",
			servers:  []string{"a", "b", "c", "d"},
			targets:  []TargetPlacement{target(3, "a,b,c@a#0", "b,c,a@b#0", "c,a,b@c#0", "a,c,b@a#1")},
			maxMoves: 1,
			want:     []string{"a,b,c@a#0 b,c,d@b#0 c,a,b@c#0 a,c,b@a#1"},
			changed:  []bool{true}, moves: 1, balanced: false,
		},
		{
			name:     "join balances within one given enough moves",
			servers:  []string{"a", "b", "c", "d"},
			targets:  []TargetPlacement{target(3, "a,b,c@a#0", "b,c,a@b#0", "c,a,b@c#0", "a,c,b@a#1")},
			maxMoves: 10,
			want:     []string{"a,c,d@a#0 b,c,d@b#0 c,a,b@c#0 a,b,d@a#1"},
			changed:  []bool{true}, moves: 3, balanced: true,
		},
		{
			name:     "join with only leaders to move moves a leader with epoch+1",
			servers:  []string{"a", "b"},
			targets:  []TargetPlacement{target(1, "a@a#0", "a@a#5")},
			maxMoves: 5,
			want:     []string{"b@b#1 a@a#5"},
			changed:  []bool{true}, moves: 1, leaderChanges: 1, balanced: true,
		},
		{
			name:     "a moved leader hands over to the next replica",
			servers:  []string{"a", "b", "c"},
			targets:  []TargetPlacement{target(2, "a,b@a#0", "a,c@a#2", "a,b@a#0")},
			maxMoves: 1,
			want:     []string{"b,c@b#1 a,c@a#2 a,b@a#0"},
			changed:  []bool{true}, moves: 1, leaderChanges: 1, balanced: true,
		},
		{
			name:     "pinned targets are repaired but never moved for balance",
			servers:  []string{"a", "b", "c"},
			targets:  []TargetPlacement{pinned(target(1, "a@a#0", "a@a#0", "a@a#0", "x@x#2")), target(1, "c@c#0")},
			maxMoves: 10,
			want:     []string{"a@a#0 a@a#0 a@a#0 b@b#3", "c@c#0"},
			changed:  []bool{true, false}, repairs: 1, leaderChanges: 1, balanced: false,
		},
		{
			// Only the most and the least loaded server were tried: a
			// bulk load on the most loaded one stopped every move.
			name:     "a pinned target on the most loaded server leaves the others to balance",
			servers:  []string{"a", "b", "c"},
			targets:  []TargetPlacement{pinned(target(1, "a@a#0", "a@a#0", "a@a#0", "a@a#0", "a@a#0", "a@a#0")), target(1, "b@b#0", "b@b#0", "b@b#0", "b@b#0", "b@b#0", "b@b#0")},
			maxMoves: 16,
			want:     []string{"a@a#0 a@a#0 a@a#0 a@a#0 a@a#0 a@a#0", "c@c#1 c@c#1 c@c#1 b@b#0 b@b#0 b@b#0"},
			changed:  []bool{false, true}, moves: 3, leaderChanges: 3, balanced: false,
		},
		{
			name:     "zero maxMoves repairs but never rebalances",
			servers:  []string{"a", "b", "c"},
			targets:  []TargetPlacement{target(1, "a@a#0", "a@a#0", "a@a#0")},
			maxMoves: 0,
			want:     []string{"a@a#0 a@a#0 a@a#0"},
			changed:  []bool{false}, balanced: false,
		},
		{
			name:     "balanced input is left alone",
			servers:  []string{"a", "b", "c"},
			targets:  []TargetPlacement{target(2, "a,b@a#0", "b,c@b#0", "c,a@c#3")},
			maxMoves: 10,
			want:     []string{"a,b@a#0 b,c@b#0 c,a@c#3"},
			changed:  []bool{false}, balanced: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := render(tt.targets)
			live := servers(tt.servers...)
			res := Placement(live, tt.targets, tt.maxMoves)
			if got := render(res.Targets); !slices.Equal(got, tt.want) {
				t.Errorf("targets:\n got %q\nwant %q", got, tt.want)
			}
			if !slices.Equal(res.Changed, tt.changed) {
				t.Errorf("changed = %v, want %v", res.Changed, tt.changed)
			}
			if res.Repairs != tt.repairs || res.Moves != tt.moves || res.LeaderChanges != tt.leaderChanges ||
				res.UnderReplicated != tt.underReplicated || res.Balanced != tt.balanced {
				t.Errorf("repairs %d moves %d leader changes %d under-replicated %d balanced %v; want %d %d %d %d %v",
					res.Repairs, res.Moves, res.LeaderChanges, res.UnderReplicated, res.Balanced,
					tt.repairs, tt.moves, tt.leaderChanges, tt.underReplicated, tt.balanced)
			}
			if got := render(tt.targets); !slices.Equal(got, in) {
				t.Errorf("input modified: %q, was %q", got, in)
			}
			checkPlacement(t, live, tt.targets, res)
			// Placement of its own balanced output is a fixed point.
			if res.Balanced && res.UnderReplicated == 0 {
				again := Placement(live, res.Targets, tt.maxMoves)
				if slices.Contains(again.Changed, true) {
					t.Errorf("not a fixed point: %q -> %q", render(res.Targets), render(again.Targets))
				}
			}
		})
	}
}

// checkPlacement checks the invariants of one Placement round. While a
// server reports no changelog (a rolling upgrade) it checks what holds
// then: no two replicas of one bucket on servers of different reported
// changelogs, nothing recorded that the input did not hold.
func checkPlacement(t *testing.T, servers []Server, in []TargetPlacement, res PlacementResult) {
	t.Helper()
	logOf := make(map[string]string)
	perLog := make(map[string]int) // live servers per changelog
	for _, s := range servers {
		if _, dup := logOf[s.ID]; !dup {
			logOf[s.ID] = s.Changelog
			perLog[s.Changelog]++
		}
	}
	legacy := perLog[""] > 0
	if len(res.Targets) != len(in) || len(res.Changed) != len(in) {
		t.Fatalf("%d targets and %d changed flags for %d targets", len(res.Targets), len(res.Changed), len(in))
	}
	under := 0
	for i, tp := range res.Targets {
		if len(tp.Buckets) != len(in[i].Buckets) || tp.RF != in[i].RF {
			t.Fatalf("target %d: %d buckets rf %d, want %d rf %d", i, len(tp.Buckets), tp.RF, len(in[i].Buckets), in[i].RF)
		}
		rf := max(tp.RF, 1)
		for b, nb := range tp.Buckets {
			ob := in[i].Buckets[b]
			if ob.Changelog != "" && nb.Changelog != ob.Changelog || legacy && nb.Changelog != ob.Changelog {
				t.Errorf("target %d bucket %d: changelog %q became %q", i, b, ob.Changelog, nb.Changelog)
			}
			waits := !neverPlaced(ob) && !legacy && perLog[nb.Changelog] == 0
			seen := make(map[string]bool)
			liveReplicas, reported := 0, ""
			for _, r := range nb.Replicas {
				if seen[r] {
					t.Errorf("target %d bucket %d: duplicate replica %s in %v", i, b, r, nb)
				}
				seen[r] = true
				log, live := logOf[r]
				switch {
				case live && log != "" && reported != "" && log != reported:
					t.Errorf("target %d bucket %d: replicas of changelogs %q and %q: %v", i, b, reported, log, nb)
				case live && !legacy && log != nb.Changelog:
					t.Errorf("target %d bucket %d: replica %s has changelog %q, the bucket %q: %v", i, b, r, log, nb.Changelog, nb)
				case !live && !waits:
					t.Errorf("target %d bucket %d: replica %s is not live: %v", i, b, r, nb)
				case !live && !slices.Contains(ob.Replicas, r):
					t.Errorf("target %d bucket %d: dead replica %s added: %v", i, b, r, nb)
				}
				if live {
					liveReplicas++
					if log != "" {
						reported = log
					}
				}
			}
			if liveReplicas < rf {
				under++
			}
			if waits {
				if nb.Leader != ob.Leader || nb.LeaderEpoch != ob.LeaderEpoch {
					t.Errorf("target %d bucket %d waits, but its leader changed: %v -> %v", i, b, ob, nb)
				}
				continue
			}
			if len(nb.Replicas) > rf || !legacy && len(nb.Replicas) != min(rf, perLog[nb.Changelog]) {
				t.Errorf("target %d bucket %d: %d replicas of rf %d with %d live servers of its changelog: %v", i, b, len(nb.Replicas), rf, perLog[nb.Changelog], nb)
			}
			if (nb.Leader == "") != (len(nb.Replicas) == 0) || (nb.Leader != "" && !seen[nb.Leader]) {
				t.Errorf("target %d bucket %d: leader %q not one of the replicas %v", i, b, nb.Leader, nb.Replicas)
			}
			if nb.LeaderEpoch < ob.LeaderEpoch {
				t.Errorf("target %d bucket %d: epoch went down from %d to %d", i, b, ob.LeaderEpoch, nb.LeaderEpoch)
			}
			if nb.Leader != ob.Leader && !neverPlaced(ob) && nb.LeaderEpoch <= ob.LeaderEpoch {
				t.Errorf("target %d bucket %d: leader %q -> %q without a new epoch (%d -> %d)", i, b, ob.Leader, nb.Leader, ob.LeaderEpoch, nb.LeaderEpoch)
			}
			if ob.Leader == nb.Leader && ob.LeaderEpoch != nb.LeaderEpoch {
				t.Errorf("target %d bucket %d: epoch changed %d -> %d with the same leader %q", i, b, ob.LeaderEpoch, nb.LeaderEpoch, nb.Leader)
			}
			if log, live := logOf[ob.Leader]; live && (legacy || log == nb.Changelog) && slices.Contains(ob.Replicas, ob.Leader) && nb.Leader != ob.Leader && res.Moves == 0 {
				t.Errorf("target %d bucket %d: live leader %s replaced without a move", i, b, ob.Leader)
			}
		}
	}
	if under != res.UnderReplicated {
		t.Errorf("under-replicated = %d, counted %d", res.UnderReplicated, under)
	}
	load := make(map[string]int)
	for id := range logOf {
		load[id] = 0
	}
	for _, tp := range res.Targets {
		for _, b := range tp.Buckets {
			for _, r := range b.Replicas {
				if _, live := logOf[r]; live {
					load[r]++
				}
			}
		}
	}
	balanced := true
	for log := range perLog {
		lo, hi := -1, -1
		for id, n := range load {
			if !legacy && logOf[id] != log {
				continue
			}
			if lo < 0 || n < lo {
				lo = n
			}
			if hi < 0 || n > hi {
				hi = n
			}
		}
		balanced = balanced && hi-lo <= 1
	}
	if balanced != res.Balanced {
		t.Errorf("balanced = %v, loads %v of changelogs %v", res.Balanced, load, logOf)
	}
}

// TestPlacementProperties runs random clusters through many rounds of
// servers dying and joining and targets appearing, checking the invariants
// after every round, and that rounds without changes reach balance.
func TestPlacementProperties(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x7468617721))
			var (
				pool    []Server
				targets []TargetPlacement
			)
			// By seed mod 4: servers of a release that reports no
			// changelog, one changelog, two, and a rolling upgrade (some
			// servers reporting none), where balance may be out of reach.
			logs := [][]string{{""}, {"x"}, {"x", "y"}, {"", "x", "y"}}[seed%4]
			upgrading := seed%4 == 3
			for i := range 12 {
				pool = append(pool, Server{ID: fmt.Sprintf("ts-%02d", i), Changelog: logs[rng.IntN(len(logs))]})
			}
			live := slices.Clone(pool[:1+rng.IntN(6)])
			maxMoves := rng.IntN(4)
			for round := range 30 {
				switch rng.IntN(5) {
				case 0: // a server dies
					if len(live) > 0 {
						i := rng.IntN(len(live))
						live = slices.Delete(live, i, i+1)
					}
				case 1: // a server joins
					if s := pool[rng.IntN(len(pool))]; !slices.Contains(live, s) {
						live = append(live, s)
						slices.SortFunc(live, func(a, b Server) int { return strings.Compare(a.ID, b.ID) })
					}
				case 2: // a target is created
					targets = append(targets, newTarget(1+rng.IntN(4), 1+rng.IntN(8)))
				case 3: // a target is dropped
					if len(targets) > 0 {
						i := rng.IntN(len(targets))
						targets = slices.Delete(targets, i, i+1)
					}
				}
				if rng.IntN(4) == 0 {
					// A new term: some dead servers are awaited.
					res, awaited := placeAwaited(rng, live, pool, targets, maxMoves)
					checkAwaited(t, live, awaited, targets, res)
					if t.Failed() {
						t.Fatalf("round %d, live %v, awaited %v", round, live, awaited)
					}
					targets = res.Targets
					continue
				}
				res := Placement(live, targets, maxMoves)
				checkPlacement(t, live, targets, res)
				if t.Failed() {
					t.Fatalf("round %d, live %v, max moves %d", round, live, maxMoves)
				}
				targets = res.Targets
			}
			// Quiet cluster: rounds with moves reach balance and then a
			// fixed point.
			total := 0
			for _, tp := range targets {
				total += len(tp.Buckets) * max(tp.RF, 1)
			}
			maxMoves = max(maxMoves, 1)
			for range total + 1 {
				res := Placement(live, targets, maxMoves)
				checkPlacement(t, live, targets, res)
				targets = res.Targets
				if res.Balanced {
					break
				}
			}
			res := Placement(live, targets, maxMoves)
			if !res.Balanced && !upgrading || slices.Contains(res.Changed, true) || res.Moves != 0 {
				t.Fatalf("not balanced after %d rounds: live %v, %q", total+1, live, render(targets))
			}
		})
	}
}

// TestPlacementAwaited: replicas on awaited servers (a new term's servers
// that have not registered again yet) stay where they are, unreplaced; a
// bucket they lead is led by a live replica; nothing moves for balance.
// Each case also runs with the awaited servers simply dead, which replaces
// their replicas as before.
func TestPlacementAwaited(t *testing.T) {
	for _, tt := range []struct {
		name            string
		servers         []string // "~b": b is awaited
		targets         []TargetPlacement
		want, wantDead  []string
		underReplicated int
		leaderChanges   int
		moves           int
	}{
		{
			name:    "awaited follower stays, a dead one is replaced",
			servers: []string{"a", "~c", "d"},
			targets: []TargetPlacement{target(3, "a,b,c@a#4")},
			want:    []string{"a,c,d@a#4"}, underReplicated: 1,
			wantDead: []string{"a,d@a#4"},
		},
		{
			name:    "awaited leader keeps leading, epoch unchanged",
			servers: []string{"b", "~a"},
			targets: []TargetPlacement{target(3, "a,b,c@a#4")},
			want:    []string{"a,b@a#4"}, underReplicated: 1,
			wantDead: []string{"b@b#5"},
		},
		{
			name:    "a dead leader's bucket is led by a live replica, not an awaited one",
			servers: []string{"~a", "c"},
			targets: []TargetPlacement{target(3, "b,a,c@b#2")},
			want:    []string{"a,c@c#3"}, underReplicated: 1, leaderChanges: 1,
			wantDead: []string{"c@c#3"},
		},
		{
			name:    "a dead leader's bucket with only awaited replicas is led by the first",
			servers: []string{"~a", "~c", "d"},
			targets: []TargetPlacement{target(2, "b,c,a@b#7"), target(1, "d@d#0")},
			want:    []string{"c,a@c#8", "d@d#0"}, underReplicated: 1, leaderChanges: 1,
			wantDead: []string{"d@d#8", "d@d#0"},
		},
		{
			name:    "awaited only replica: the bucket keeps it, leader and epoch unchanged",
			servers: []string{"~a", "b"},
			targets: []TargetPlacement{target(1, "a@a#2"), target(1, "b@b#0")},
			want:    []string{"a@a#2", "b@b#0"}, underReplicated: 1,
			wantDead: []string{"b@b#3", "b@b#0"},
		},
		{
			name:    "every server awaited: nothing changes",
			servers: []string{"~a", "~b", "~c"},
			targets: []TargetPlacement{target(3, "a,b,c@b#1", "c,a,b@c#1")},
			want:    []string{"a,b,c@b#1 c,a,b@c#1"}, underReplicated: 2,
			wantDead: []string{"a,b,c@b#1 c,a,b@c#1"},
		},
		{
			name:    "nothing moves for balance while a server is awaited",
			servers: []string{"a", "b", "~c"},
			targets: []TargetPlacement{target(1, "a@a#0", "a@a#0", "a@a#0", "c@c#0")},
			want:    []string{"a@a#0 a@a#0 a@a#0 c@c#0"}, underReplicated: 1,
			wantDead: []string{"b@b#1 a@a#0 a@a#0 b@b#1"}, moves: 1,
		},
		{
			name:     "an awaited server that is live is live",
			servers:  []string{"~a", "a", "b"},
			targets:  []TargetPlacement{target(2, "a,c@a#1")},
			want:     []string{"a,b@a#1"},
			wantDead: []string{"a,b@a#1"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var withAwaited, dead []Server
			for _, s := range tt.servers {
				id, awaited := strings.CutPrefix(s, "~")
				withAwaited = append(withAwaited, Server{ID: id, Awaited: awaited})
				if !awaited {
					dead = append(dead, Server{ID: id})
				}
			}
			res := Placement(withAwaited, tt.targets, 4)
			if got := render(res.Targets); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if res.UnderReplicated != tt.underReplicated || res.LeaderChanges != tt.leaderChanges || res.Moves != 0 {
				t.Errorf("under-replicated %d, leader changes %d, moves %d; want %d, %d, 0",
					res.UnderReplicated, res.LeaderChanges, res.Moves, tt.underReplicated, tt.leaderChanges)
			}
			if again := Placement(withAwaited, res.Targets, 4); slices.Contains(again.Changed, true) {
				t.Errorf("not a fixed point: %q -> %q", render(res.Targets), render(again.Targets))
			}
			resDead := Placement(dead, tt.targets, 4)
			if got := render(resDead.Targets); !slices.Equal(got, tt.wantDead) || resDead.Moves != tt.moves {
				t.Errorf("with the awaited servers dead: %q (%d moves), want %q (%d)", got, resDead.Moves, tt.wantDead, tt.moves)
			}
		})
	}
}

// placeAwaited runs Placement with a random subset of the dead servers of
// pool awaited.
func placeAwaited(rng *rand.Rand, live, pool []Server, targets []TargetPlacement, maxMoves int) (PlacementResult, []string) {
	servers := slices.Clone(live)
	var awaited []string
	for _, s := range pool {
		if slices.ContainsFunc(live, func(l Server) bool { return l.ID == s.ID }) || rng.IntN(2) == 0 {
			continue
		}
		awaited = append(awaited, s.ID)
		servers = append(servers, Server{ID: s.ID, Changelog: s.Changelog, Awaited: true})
	}
	return Placement(servers, targets, maxMoves), awaited
}

// checkAwaited checks what holds with awaited servers: their replicas stay
// and none is added, nothing moves for balance, and a bucket with a live
// replica is led by one.
func checkAwaited(t *testing.T, live []Server, awaited []string, in []TargetPlacement, res PlacementResult) {
	t.Helper()
	isLive := func(id string) bool { return slices.ContainsFunc(live, func(s Server) bool { return s.ID == id }) }
	if res.Moves != 0 {
		t.Errorf("%d moves while servers are awaited", res.Moves)
	}
	for i, tp := range res.Targets {
		for b, nb := range tp.Buckets {
			ob := in[i].Buckets[b]
			for _, a := range awaited {
				if had, has := slices.Contains(ob.Replicas, a), slices.Contains(nb.Replicas, a); had != has {
					t.Errorf("target %d bucket %d: awaited %s: %v -> %v", i, b, a, ob, nb)
				}
			}
			// An awaited leader keeps leading; a bucket whose leader
			// is dead is led by a live replica if it has one.
			if awaitedLeader := slices.Contains(awaited, ob.Leader) && slices.Contains(ob.Replicas, ob.Leader); awaitedLeader && (nb.Leader != ob.Leader || nb.LeaderEpoch != ob.LeaderEpoch) {
				t.Errorf("target %d bucket %d: awaited leader %q replaced: %v -> %v", i, b, ob.Leader, ob, nb)
			} else if !awaitedLeader && slices.ContainsFunc(nb.Replicas, isLive) && !isLive(nb.Leader) && slices.ContainsFunc(live, func(s Server) bool { return s.Changelog == nb.Changelog }) {
				t.Errorf("target %d bucket %d: led by %q, not live, though a replica is: %v -> %v", i, b, nb.Leader, ob, nb)
			}
			if nb.Leader != "" && !slices.Contains(nb.Replicas, nb.Leader) {
				t.Errorf("target %d bucket %d: leader %q not a replica: %v", i, b, nb.Leader, nb)
			}
			if nb.LeaderEpoch < ob.LeaderEpoch || nb.Leader != ob.Leader && !neverPlaced(ob) && nb.LeaderEpoch <= ob.LeaderEpoch {
				t.Errorf("target %d bucket %d: leader %q#%d -> %q#%d", i, b, ob.Leader, ob.LeaderEpoch, nb.Leader, nb.LeaderEpoch)
			}
		}
	}
}

// TestFailoverAfterMovePrefersOlderReplicas: a follower moved for balance
// goes last in the replica list, so when the leader dies next the replica
// that held the bucket before the move leads, not the one still
// restoring; the moved one kept its predecessor's position.
func TestFailoverAfterMovePrefersOlderReplicas(t *testing.T) {
	round1 := Placement(servers("a", "b", "c", "d"), []TargetPlacement{
		target(3, "a,b,c@a#1"),
		target(1, "b@b#0", "b@b#0"),
	}, 16)
	if got := render(round1.Targets)[0]; got != "a,c,d@a#1" {
		t.Fatalf("after the rebalance: %s, want b's follower moved to d, last", got)
	}
	round2 := Placement(servers("b", "c", "d"), round1.Targets, 16) // a dies
	if y := round2.Targets[0].Buckets[0]; y.Leader != "c" {
		t.Fatalf("after a died: %v, want c, the replica from before the move, to lead", y)
	}
}
