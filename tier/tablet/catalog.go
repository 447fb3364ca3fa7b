package tablet

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
)

// recordKind says which records a watch follows.
type recordKind int

const (
	recordTables     recordKind = iota // {p}/tables/{db}/{table}: TableRecord
	recordPartitions                   // {p}/partitions/{tableId}/{name}: PartitionRecord
)

// watchRecords keeps the loop's copy of the table or partition records
// current: it lists the records under prefix and hands them to the loop
// as a reset, then hands it every change. A broken or compacted watch
// lists again. It returns when ctx is done.
func (s *Server) watchRecords(ctx context.Context, prefix string, kind recordKind) {
	b := backoff{min: s.cfg.RetryMin, max: s.cfg.RetryMax}
	for ctx.Err() == nil {
		resp, err := s.deps.Etcd.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("tablet could not list records", "prefix", prefix, "err", err)
			}
			b.sleep(ctx)
			continue
		}
		kvs, rev := resp.Kvs, resp.Header.Revision
		if !s.post(ctx, func(l *loop) { l.resetRecords(kind, kvs) }) {
			return
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range s.deps.Etcd.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if wr.CompactRevision != 0 || wr.Err() != nil {
				if ctx.Err() == nil {
					s.log.Info("tablet record watch broke; listing again", "prefix", prefix, "err", wr.Err())
				}
				break
			}
			evs := wr.Events
			if len(evs) > 0 && !s.post(ctx, func(l *loop) { l.recordEvents(kind, evs) }) {
				break
			}
			b.reset()
		}
		cancel()
		b.sleep(ctx)
	}
}

// resetRecords replaces the loop's records of kind with kvs.
func (l *loop) resetRecords(kind recordKind, kvs []*mvccpb.KeyValue) {
	switch kind {
	case recordTables:
		for key, id := range l.tableKeys {
			delete(l.tables, id)
			delete(l.tableKeys, key)
		}
	case recordPartitions:
		for key, t := range l.partKeys {
			delete(l.parts, t)
			delete(l.partKeys, key)
		}
	}
	for _, kv := range kvs {
		l.putRecord(kind, kv)
	}
	l.listed[kind] = true
	l.all = true
}

// recordEvents applies the changes of one watch response.
func (l *loop) recordEvents(kind recordKind, evs []*clientv3.Event) {
	for _, ev := range evs {
		if ev.Type == clientv3.EventTypePut {
			l.putRecord(kind, ev.Kv)
			continue
		}
		key := string(ev.Kv.Key)
		switch kind {
		case recordTables:
			if id, ok := l.tableKeys[key]; ok {
				delete(l.tableKeys, key)
				delete(l.tables, id)
				l.markTable(id)
			}
		case recordPartitions:
			if t, ok := l.partKeys[key]; ok {
				delete(l.partKeys, key)
				delete(l.parts, t)
				l.markDirty(t)
			}
		}
	}
}

// putRecord decodes and adopts one record, with the data state it holds.
// An undecodable record is logged and skipped.
func (l *loop) putRecord(kind recordKind, kvp *mvccpb.KeyValue) {
	key := string(kvp.Key)
	switch kind {
	case recordTables:
		rec, err := meta.Unmarshal[meta.TableRecord](kvp.Value)
		var table *kv.Table
		if err == nil {
			table, err = kv.NewTable(rec.Schema)
		}
		if err != nil {
			l.log.Error("tablet skips an undecodable table record", "key", key, "err", err)
			return
		}
		if old, ok := l.tableKeys[key]; ok && old != rec.ID {
			delete(l.tables, old)
			l.markTable(old)
		}
		l.tableKeys[key] = rec.ID
		l.tables[rec.ID] = &tableRec{rec: rec, rev: kvp.ModRevision, table: table}
		if !rec.Partitioned() {
			l.applyState(rec.Target(), dataState{state: rec.DataState, bulkLoadID: rec.BulkLoadID, rev: kvp.ModRevision})
		}
		l.markTable(rec.ID)
	case recordPartitions:
		rec, err := meta.Unmarshal[meta.PartitionRecord](kvp.Value)
		if err != nil {
			l.log.Error("tablet skips an undecodable partition record", "key", key, "err", err)
			return
		}
		t := rec.Target()
		if old, ok := l.partKeys[key]; ok && old != t {
			delete(l.parts, old)
			l.markDirty(old)
		}
		l.partKeys[key] = t
		l.parts[t] = &partRec{rec: rec, rev: kvp.ModRevision}
		l.applyState(t, dataState{state: rec.DataState, bulkLoadID: rec.BulkLoadID, rev: kvp.ModRevision})
		l.markDirty(t)
	}
}
