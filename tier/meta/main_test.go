package meta_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/testetcd"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
)

// endpoints are the client URLs of the embedded etcd shared by the tests of
// this binary; each test works under its own prefix.
var endpoints []string

func TestMain(m *testing.M) {
	os.Exit(testetcd.Main(m, "meta", testetcd.Options{}, &endpoints))
}

// envs numbers the envs, so that every one has its own prefix even when
// tests run more than once (-count).
var envs atomic.Int64

// env is one test's view of the shared etcd: a client, a store under the
// test's own prefix, and a coordinator term to guard writes with.
type env struct {
	t      *testing.T
	cli    *clientv3.Client
	s      *meta.Store
	lead   *fencing.Leadership
	g      meta.Guard
	prefix string
}

func newEnv(t *testing.T, opts ...meta.Option) *env {
	t.Helper()
	cli := newClient(t, endpoints)
	prefix := fmt.Sprintf("/t/%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), envs.Add(1))
	s, err := meta.New(cli, prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, cli: cli, s: s, prefix: prefix}
	e.lead = e.elect(cli, "coordinator-1")
	e.g = meta.GuardOf(e.lead)
	return e
}

func newClient(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := meta.Connect(ctxTimeout(t, 10*time.Second), eps, meta.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// elect makes id the coordinator under the env's election prefix.
func (e *env) elect(cli *clientv3.Client, id string) *fencing.Leadership {
	e.t.Helper()
	l, err := fencing.Elect(ctxTimeout(e.t, 10*time.Second), cli, e.s.ElectionPrefix(), id, 2*time.Second)
	if err != nil {
		e.t.Fatalf("elect %s: %v", id, err)
	}
	e.t.Cleanup(func() { l.Resign(context.Background()) })
	return l
}

// dump returns every key under the env's prefix but the election's, with
// its value.
func (e *env) dump() map[string]string {
	e.t.Helper()
	resp, err := e.cli.Get(e.t.Context(), e.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); !strings.HasPrefix(k, e.s.ElectionPrefix()+"/") {
			out[strings.TrimPrefix(k, e.prefix)] = string(kv.Value)
		}
	}
	return out
}

// keys returns the sorted keys of dump.
func (e *env) keys() []string { return slices.Sorted(maps.Keys(e.dump())) }

// unchanged fails the test if the keys and values differ from before.
func (e *env) unchanged(before map[string]string, what string) {
	e.t.Helper()
	if after := e.dump(); !maps.Equal(before, after) {
		e.t.Fatalf("%s changed the store:\nbefore %v\nafter  %v", what, before, after)
	}
}

func (e *env) createDB(name string) {
	e.t.Helper()
	if _, err := e.s.CreateDatabase(e.t.Context(), e.g, name); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) createTable(db, name string, buckets int, partitioned bool) meta.Versioned[meta.TableRecord] {
	e.t.Helper()
	spec := tableSpec(db, name, buckets, partitioned)
	v, err := e.s.CreateTable(e.t.Context(), e.g, spec)
	if err != nil {
		e.t.Fatalf("create table %s.%s: %v", db, name, err)
	}
	return v
}

func (e *env) createPartition(db, table, name string, buckets int) meta.Versioned[meta.PartitionRecord] {
	e.t.Helper()
	v, err := e.s.CreatePartition(e.t.Context(), e.g, db, table, name, assign(buckets, "ts-1", "ts-2", "ts-3"))
	if err != nil {
		e.t.Fatalf("create partition %s: %v", name, err)
	}
	return v
}

// schema is a primary-key table (id BIGINT, day STRING, v STRING NULL),
// partitioned by day if asked.
func schema(buckets int, partitioned bool) kv.TableSchema {
	s := kv.TableSchema{
		Columns: []kv.Column{
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "day", Type: kv.Type{Kind: kv.KindString}},
			{Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
		},
		PrimaryKey: []string{"id", "day"},
		Buckets:    buckets,
	}
	if partitioned {
		s.PartitionKeys = []string{"day"}
	}
	return s
}

func tableSpec(db, name string, buckets int, partitioned bool) meta.TableSpec {
	spec := meta.TableSpec{
		Database: db, Name: name, Schema: schema(buckets, partitioned),
		ReplicationFactor: 3, RemoteDataDir: "file:///remote",
	}
	if !partitioned {
		spec.Buckets = assign(buckets, "ts-1", "ts-2", "ts-3")
	}
	return spec
}

// assign spreads n buckets over servers, three replicas each (fewer if
// there are fewer servers), the first replica leading at epoch 0.
func assign(n int, servers ...string) []meta.BucketAssignment {
	out := make([]meta.BucketAssignment, n)
	for b := range out {
		for r := range min(3, len(servers)) {
			out[b].Replicas = append(out[b].Replicas, servers[(b+r)%len(servers)])
		}
		out[b].Leader = out[b].Replicas[0]
	}
	return out
}

// ctxTimeout returns the test's context bounded by d.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// recv returns the next value of ch, failing the test after d.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing within %v", what, d)
	}
	panic("unreachable")
}

// closed fails the test unless ch is closed within d.
func closed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}
