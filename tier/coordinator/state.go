package coordinator

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/thawdb/thaw/tier/meta"
)

// cluster is what a reconcile round (or a create) reads of etcd: the live
// tablet servers and every live target with its records and assignment.
// The reads are not one snapshot; every write based on them is a
// compare-and-swap on the revision read, so a stale read costs a retry,
// never a lost update.
type cluster struct {
	rev     int64 // revision the servers were read at, before everything else
	servers serverIndex
	targets []targetState // by table id, then partition id
}

// targetState is one live target as read.
type targetState struct {
	table      meta.Versioned[meta.TableRecord]
	partition  *meta.Versioned[meta.PartitionRecord] // nil for a non-partitioned table
	assignment meta.Versioned[meta.Assignment]
}

func (t targetState) target() meta.Target { return t.assignment.Value.Target() }

// stateRev is the revision of the record holding the target's data state.
func (t targetState) stateRev() int64 {
	if t.partition != nil {
		return t.partition.Rev
	}
	return t.table.Rev
}

// serverIndex maps tablet server ids to their registrations.
type serverIndex map[string]meta.ServerRecord

// placement returns the live servers as Placement takes them, by id.
func (s serverIndex) placement() []Server {
	out := make([]Server, 0, len(s))
	for _, id := range slices.Sorted(maps.Keys(s)) {
		out = append(out, Server{ID: id, Changelog: s[id].Changelog})
	}
	return out
}

// address returns a server's registered address, "" if it is not live.
func (s serverIndex) address(id string) string { return s[id].Address }

func indexServers(set meta.ServerSet) serverIndex {
	idx := make(serverIndex, len(set.Servers))
	for _, s := range set.Servers {
		idx[s.ID] = s
	}
	return idx
}

// readCluster reads the live servers and every live target (tables and
// partitions not being dropped, with their assignments).
func (c *Coordinator) readCluster(ctx context.Context) (*cluster, error) {
	set, err := c.store.ListServers(ctx)
	if err != nil {
		return nil, fmt.Errorf("coordinator: read servers: %w", err)
	}
	as, err := c.store.ListAssignments(ctx)
	if err != nil {
		return nil, fmt.Errorf("coordinator: read assignments: %w", err)
	}
	byTarget := make(map[meta.Target]meta.Versioned[meta.Assignment], len(as))
	for _, a := range as {
		byTarget[a.Value.Target()] = a
	}
	tables, err := c.store.ListTables(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("coordinator: read tables: %w", err)
	}
	cl := &cluster{rev: set.Rev, servers: indexServers(set)}
	for _, tv := range tables {
		if tv.Value.Dropping {
			continue
		}
		if !tv.Value.Partitioned() {
			if a, ok := byTarget[tv.Value.Target()]; ok {
				cl.targets = append(cl.targets, targetState{table: tv, assignment: a})
			}
			continue
		}
		parts, err := c.store.ListPartitions(ctx, tv.Value.ID)
		if err != nil {
			return nil, fmt.Errorf("coordinator: read partitions of table %s.%s: %w", tv.Value.Database, tv.Value.Name, err)
		}
		for _, p := range parts {
			if p.Value.Dropping {
				continue
			}
			if a, ok := byTarget[p.Value.Target()]; ok {
				cl.targets = append(cl.targets, targetState{table: tv, partition: &p, assignment: a})
			}
		}
	}
	slices.SortFunc(cl.targets, func(a, b targetState) int { return compareTargets(a.target(), b.target()) })
	return cl, nil
}

// placements returns the placement input of every target, in order.
func (cl *cluster) placements() []TargetPlacement {
	out := make([]TargetPlacement, len(cl.targets))
	for i, t := range cl.targets {
		_, bulkLoad := dataStateOf(&cl.targets[i])
		out[i] = TargetPlacement{RF: t.table.Value.ReplicationFactor, Buckets: fromMeta(t.assignment.Value.Buckets), Pinned: bulkLoad != ""}
	}
	return out
}

// placeNew places a new target of the given replication factor and bucket
// count next to the existing ones (which it does not change) and returns
// its buckets.
func (cl *cluster) placeNew(rf, buckets int) []meta.BucketAssignment {
	targets := append(cl.placements(), TargetPlacement{RF: rf, Buckets: make([]BucketPlacement, buckets)})
	res := Placement(cl.servers.placement(), targets, 0)
	return toMeta(res.Targets[len(targets)-1].Buckets)
}

func fromMeta(bs []meta.BucketAssignment) []BucketPlacement {
	out := make([]BucketPlacement, len(bs))
	for i, b := range bs {
		out[i] = BucketPlacement{Replicas: slices.Clone(b.Replicas), Leader: b.Leader, LeaderEpoch: b.LeaderEpoch, Changelog: b.Changelog}
	}
	return out
}

func toMeta(bs []BucketPlacement) []meta.BucketAssignment {
	out := make([]meta.BucketAssignment, len(bs))
	for i, b := range bs {
		r := slices.Clone(b.Replicas)
		if r == nil {
			r = []string{}
		}
		out[i] = meta.BucketAssignment{Replicas: r, Leader: b.Leader, LeaderEpoch: b.LeaderEpoch, Changelog: b.Changelog}
	}
	return out
}
