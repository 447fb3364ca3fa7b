package tablet

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tablet/replica"
	"github.com/thawdb/thaw/tier/tierpb"
)

// Write validates a batch completely, then appends it to the bucket's
// changelog (durable before the answer) and applies it.
func (h *service) Write(ctx context.Context, req *connect.Request[tierv1.WriteRequest]) (_ *connect.Response[tierv1.WriteResponse], err error) {
	s := h.s
	defer func() { s.m.writes.WithLabelValues(resultOf(err)).Inc() }()
	m := req.Msg
	r, err := s.resolveData(req.Header(), writeOp, m.GetTarget(), m.GetBucket())
	if err != nil {
		return nil, err
	}
	epoch := m.GetLeaderEpoch()
	rep, err := s.replicaFor(ctx, r, &epoch, "write")
	if err != nil {
		return nil, err
	}
	release, err := admit(r.tv, "write")
	if err != nil {
		return nil, err
	}
	defer release()
	muts, size, err := s.validateBatch(r.tv, m.GetBucket(), m.GetMutations())
	if err != nil {
		return nil, err
	}
	first, err := rep.Write(ctx, muts)
	if err != nil {
		err = replicaErr("write", err)
		if reason := tierpb.ReasonOf(err); reason == tierpb.ReasonStorageFull || reason == tierpb.ReasonInternal {
			s.writeFailures.report(s.log, time.Now(), "tablet write failed", "replica", rep.ID().String(), "reason", reason, "err", err)
		}
		return nil, err
	}
	s.m.batchMutations.Observe(float64(len(muts)))
	s.m.batchBytes.Observe(float64(size))
	return connect.NewResponse(&tierv1.WriteResponse{FirstOffset: first, Count: int32(len(muts))}), nil
}

// validateBatch checks a write batch against the limits and the table's
// schema and converts it; it returns the batch's changelog bytes. Every
// mutation is checked before anything is written:
//
//   - an upsert's value decodes with the table's current schema (its schema
//     id is the table's, else SCHEMA_MISMATCH), its key is exactly the key
//     encoding of the decoded row, the row belongs to the request's bucket
//     and, for a partition, to the target's partition;
//   - a delete has no value, and its key decodes and re-encodes to itself
//     and belongs to the bucket.
func (s *Server) validateBatch(tv *targetView, bucket int32, in []*tierv1.Mutation) ([]replica.Mutation, int, error) {
	if len(in) == 0 {
		return nil, 0, errInvalid("write: empty batch")
	}
	if len(in) > s.cfg.MaxBatchMutations {
		return nil, 0, errTooLarge(s.cfg.MaxBatchMutations, "write: %d mutations, the limit is %d", len(in), s.cfg.MaxBatchMutations)
	}
	size := 0
	for _, m := range in {
		size += replica.RecordLen(len(m.GetKey()), len(m.GetValue()))
	}
	if size > s.cfg.MaxBatchBytes {
		return nil, 0, errTooLarge(s.cfg.MaxBatchBytes, "write: %d bytes, the limit is %d", size, s.cfg.MaxBatchBytes)
	}
	out := make([]replica.Mutation, len(in))
	for i, m := range in {
		if err := checkMutation(tv, bucket, m); err != nil {
			if err.schema {
				return nil, 0, rpcErr(tierpb.ReasonSchemaMismatch, map[string]string{
					tierpb.KeyIndex:    strconv.Itoa(i),
					tierpb.KeySchemaID: strconv.Itoa(int(tv.table.SchemaID())),
				}, "write: mutation %d: %s", i, err.msg)
			}
			return nil, 0, errInvalidAt(i, "write: mutation: %s", err.msg)
		}
		op := replica.OpUpsert
		if m.GetOp() == tierv1.MutationOp_MUTATION_OP_DELETE {
			op = replica.OpDelete
		}
		out[i] = replica.Mutation{Op: op, Key: m.GetKey(), Value: m.GetValue()}
	}
	return out, size, nil
}

// mutationError says what is wrong with a mutation.
type mutationError struct {
	msg    string
	schema bool // the value's schema id is not the table's
}

func badMutation(msg string) *mutationError { return &mutationError{msg: msg} }

func checkMutation(tv *targetView, bucket int32, m *tierv1.Mutation) *mutationError {
	t := tv.table
	key, value := m.GetKey(), m.GetValue()
	if len(key) == 0 {
		return badMutation("empty key")
	}
	var row kv.Row
	switch m.GetOp() {
	case tierv1.MutationOp_MUTATION_OP_UPSERT:
		if len(value) < 2 {
			return badMutation("an upsert needs a value")
		}
		if id := int16(binary.LittleEndian.Uint16(value)); id != t.SchemaID() {
			return &mutationError{msg: "value has schema id " + strconv.Itoa(int(id)) + ", the table's is " + strconv.Itoa(int(t.SchemaID())), schema: true}
		}
		var err error
		if _, row, err = t.DecodeValue(value); err != nil {
			return badMutation("value does not decode: " + err.Error())
		}
		name, err := t.PartitionName(row)
		if err != nil {
			return badMutation("partition values: " + err.Error())
		}
		if name != tv.snap.Partition {
			return badMutation("the row belongs to partition " + strconv.Quote(name) + ", not " + strconv.Quote(tv.snap.Partition))
		}
	case tierv1.MutationOp_MUTATION_OP_DELETE:
		if len(value) != 0 {
			return badMutation("a delete carries a value")
		}
		values, err := t.DecodeKey(key)
		if err != nil {
			return badMutation("key does not decode: " + err.Error())
		}
		row = make(kv.Row, t.NumColumns())
		for j, c := range tv.physKey {
			row[c] = values[j]
		}
	default:
		return badMutation("unknown op " + m.GetOp().String())
	}
	enc, err := t.EncodeKey(row)
	if err != nil {
		return badMutation("key does not encode: " + err.Error())
	}
	if !bytes.Equal(enc, key) {
		return badMutation("the key is not the encoded primary key of the row")
	}
	b, err := t.Bucket(row)
	if err != nil {
		return badMutation("bucket key: " + err.Error())
	}
	if int32(b) != bucket {
		return badMutation("the row belongs to bucket " + strconv.Itoa(b) + ", not " + strconv.Itoa(int(bucket)))
	}
	return nil
}
