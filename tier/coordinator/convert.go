package coordinator

import (
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// schemaFromProto converts a wire schema to kv's and validates it
// (kv.NewTable).
func schemaFromProto(p *tierv1.TableSchema) (kv.TableSchema, error) {
	s, err := tierpb.SchemaFromProto(p)
	if err != nil {
		return kv.TableSchema{}, err
	}
	t, err := kv.NewTable(s)
	if err != nil {
		return kv.TableSchema{}, err
	}
	return t.Schema(), nil
}

func dataStateProto(s meta.DataState) tierv1.DataState {
	switch s {
	case meta.Active:
		return tierv1.DataState_DATA_STATE_ACTIVE
	case meta.Loading:
		return tierv1.DataState_DATA_STATE_LOADING
	}
	return tierv1.DataState_DATA_STATE_UNSPECIFIED
}

// dataStateOf returns a target's data state and bulk-load id: the
// partition's for a partition, the table's otherwise.
func dataStateOf(ts *targetState) (tierv1.DataState, string) {
	if ts.partition != nil {
		return dataStateProto(ts.partition.Value.DataState), ts.partition.Value.BulkLoadID
	}
	return dataStateProto(ts.table.Value.DataState), ts.table.Value.BulkLoadID
}

func tableInfo(v meta.Versioned[meta.TableRecord]) *tierv1.TableInfo {
	r := v.Value
	return &tierv1.TableInfo{
		TableId:           r.ID,
		Path:              &tierv1.TablePath{Database: r.Database, Table: r.Name},
		Schema:            tierpb.SchemaToProto(r.Schema),
		ReplicationFactor: int32(r.ReplicationFactor),
		RemoteDataDir:     r.RemoteDataDir,
		DataState:         dataStateProto(r.DataState),
		BulkLoadId:        r.BulkLoadID,
		CreatedMs:         r.CreatedMs,
		ModifiedMs:        r.ModifiedMs,
	}
}

func partitionInfo(r meta.PartitionRecord) *tierv1.PartitionInfo {
	return &tierv1.PartitionInfo{
		PartitionId:   r.ID,
		PartitionName: r.Name,
		DataState:     dataStateProto(r.DataState),
		BulkLoadId:    r.BulkLoadID,
	}
}

func targetIDProto(t meta.Target) *tierv1.TargetId {
	return &tierv1.TargetId{TableId: t.TableID, PartitionId: t.PartitionID}
}

func targetPathProto(ts *targetState) *tierv1.TargetPath {
	p := &tierv1.TargetPath{Database: ts.table.Value.Database, Table: ts.table.Value.Name}
	if ts.partition != nil {
		name := ts.partition.Value.Name
		p.Partition = &name
	}
	return p
}

// bucketLocation describes bucket b; the leader's address comes from its
// registration and is empty while it is not live.
func bucketLocation(b int, ba meta.BucketAssignment, servers serverIndex) *tierv1.BucketLocation {
	loc := &tierv1.BucketLocation{
		Bucket:      int32(b),
		LeaderId:    ba.Leader,
		LeaderEpoch: ba.LeaderEpoch,
		Replicas:    append([]string(nil), ba.Replicas...),
		Changelog:   ba.Changelog,
	}
	if ba.Leader != "" {
		loc.LeaderAddress = servers.address(ba.Leader)
	}
	return loc
}

func serverInfo(r meta.ServerRecord) *tierv1.ServerInfo {
	return &tierv1.ServerInfo{ServerId: r.ID, Address: r.Address, StartedMs: r.StartedMs, Changelog: r.Changelog}
}
