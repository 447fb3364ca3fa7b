package replica

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/changelog"
)

// env is one test's shared parts: a file:// object store behind a fault
// injector and a local changelog provider, as the hosts of one machine
// share them.
type env struct {
	store  *objstore.Store
	faults *objstore.Faults
	logs   *changelog.LocalProvider
	target snapshot.Target
}

func newEnv(t testing.TB) *env {
	t.Helper()
	url := "file://" + filepath.ToSlash(t.TempDir())
	b, err := objstore.OpenBucket(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	f := objstore.NewFaults(b)
	s := objstore.New(f, url)
	t.Cleanup(func() { _ = s.Close() })
	logs, err := changelog.NewLocalProvider(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logs.Close() })
	return &env{store: s, faults: f, logs: logs,
		target: snapshot.Target{RemoteDir: s.Base(), Database: "db", Table: "t", TableID: 7}}
}

// host opens a host on a fresh root; it returns the root too.
func (e *env) host(t testing.TB, opts ...Option) (*Host, string) {
	t.Helper()
	root := t.TempDir()
	h, err := NewHost(root, e.store, e.logs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Error(err)
		}
	})
	return h, root
}

// hostOnly is host without the root.
func (e *env) hostOnly(t testing.TB, opts ...Option) *Host {
	h, _ := e.host(t, opts...)
	return h
}

func (e *env) id(bucket int32) ReplicaID { return ReplicaID{Target: e.target, Bucket: bucket} }

func open(t *testing.T, h *Host, id ReplicaID, from *snapshot.Metadata) *Replica {
	t.Helper()
	r, err := h.Open(t.Context(), id, from)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func key(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }

// upserts returns n upserts of keys from..from+n-1 with values tagged tag.
func upserts(from, n int, tag string) []Mutation {
	ms := make([]Mutation, n)
	for i := range ms {
		ms[i] = Mutation{Op: OpUpsert, Key: key(from + i), Value: fmt.Appendf(nil, "v%05d-%s", from+i, tag)}
	}
	return ms
}

func write(t *testing.T, r *Replica, ms []Mutation) int64 {
	t.Helper()
	first, err := r.Write(t.Context(), ms)
	if err != nil {
		t.Fatal(err)
	}
	return first
}

func snap(t *testing.T, r *Replica, id int64, prev *snapshot.Metadata) *snapshot.Metadata {
	t.Helper()
	md, _, err := r.Snapshot(t.Context(), id, prev)
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// contents reads the whole replica through Scan, in small pages.
func contents(t *testing.T, r *Replica) map[string]string {
	t.Helper()
	out := map[string]string{}
	var after []byte
	for {
		rows, next, err := r.Scan(t.Context(), after, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range rows {
			if _, dup := out[string(kv.Key)]; dup {
				t.Fatalf("scan returned %q twice", kv.Key)
			}
			out[string(kv.Key)] = string(kv.Value)
		}
		if next == nil {
			return out
		}
		after = next
	}
}

// model applies mutations to a map, as a replica should.
func model(m map[string]string, ms []Mutation) {
	for _, x := range ms {
		if x.Op == OpDelete {
			delete(m, string(x.Key))
		} else {
			m[string(x.Key)] = string(x.Value)
		}
	}
}

func sameContents(t *testing.T, r *Replica, want map[string]string) {
	t.Helper()
	got := contents(t, r)
	if !maps.Equal(got, want) {
		t.Fatalf("replica %v holds %d rows, want %d (first differences: %s)", r.ID(), len(got), len(want), diff(got, want))
	}
	if n := r.RowCount(); n != int64(len(want)) {
		t.Fatalf("RowCount = %d, want %d", n, len(want))
	}
}

func diff(got, want map[string]string) string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			d = append(d, fmt.Sprintf("%s: got %q want %q", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("%s: unexpected", k))
		}
	}
	return strings.Join(d[:min(len(d), 5)], "; ")
}

func waitApplied(t *testing.T, r *Replica, offset int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for r.AppliedOffset() < offset {
		if time.Now().After(deadline) {
			t.Fatalf("replica %v applied %d, want %d", r.ID(), r.AppliedOffset(), offset)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func logEnd(t *testing.T, e *env, id ReplicaID) int64 {
	t.Helper()
	l, err := e.logs.Open(t.Context(), id.LogID())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, end, err := l.Offsets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return end
}
