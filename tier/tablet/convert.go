package tablet

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// targetOf converts a request's target ids.
func targetOf(id *tierv1.TargetId) (meta.Target, *connect.Error) {
	if id == nil {
		return meta.Target{}, errInvalid("no target")
	}
	t := meta.Target{TableID: id.GetTableId(), PartitionID: id.GetPartitionId()}
	if t.TableID < 1 || t.PartitionID < 0 {
		return meta.Target{}, errInvalid("target ids table %d, partition %d", t.TableID, t.PartitionID)
	}
	return t, nil
}

func targetProto(t meta.Target) *tierv1.TargetId {
	return &tierv1.TargetId{TableId: t.TableID, PartitionId: t.PartitionID}
}

// dataStateOf converts a pushed data state.
func dataStateOf(s tierv1.DataState, bulkLoadID string, rev int64) (dataState, error) {
	var d dataState
	switch s {
	case tierv1.DataState_DATA_STATE_ACTIVE:
		d.state = meta.Active
	case tierv1.DataState_DATA_STATE_LOADING:
		if bulkLoadID == "" {
			return d, errors.New("LOADING without a bulk load id")
		}
		d.state = meta.Loading
	default:
		return d, fmt.Errorf("data state %v", s)
	}
	d.bulkLoadID, d.rev = bulkLoadID, rev
	return d, nil
}

// schemaOf converts a pushed schema and compiles it.
func schemaOf(p *tierv1.TableSchema) (*kv.Table, error) {
	s, err := tierpb.SchemaFromProto(p)
	if err != nil {
		return nil, err
	}
	return kv.NewTable(s)
}

// pushedInfoOf converts what a NotifyAssignment says of a target.
func pushedInfoOf(t meta.Target, m *tierv1.NotifyAssignmentRequest) (pushedInfo, error) {
	table, err := schemaOf(m.GetSchema())
	if err != nil {
		return pushedInfo{}, fmt.Errorf("schema: %w", err)
	}
	if table.Buckets() < 1 {
		return pushedInfo{}, errors.New("schema without buckets")
	}
	path := m.GetPath()
	snap := snapshot.Target{
		RemoteDir: m.GetRemoteDataDir(),
		Database:  path.GetDatabase(),
		Table:     path.GetTable(),
		TableID:   t.TableID,
	}
	if t.Partitioned() != (path.Partition != nil) {
		return pushedInfo{}, fmt.Errorf("path %v does not match %s", path, t)
	}
	if t.Partitioned() {
		snap.Partition, snap.PartitionID = path.GetPartition(), t.PartitionID
	}
	if err := snap.Validate(); err != nil {
		return pushedInfo{}, err
	}
	return pushedInfo{snap: snap, table: table}, nil
}
