package tablet_test

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/internal/testproxy"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
)

// TestUndecodableAssignmentOnRelist: an assignment the server cannot
// decode (a newer release's field, a damaged record) met by a relist of
// the assignment watch (after a compaction) is not a drop: the replica
// keeps serving and the bucket's changelog stays. It was taken for
// deleted: the replica stopped and the changelog, every acknowledged
// write since the last snapshot, was deleted.
func TestUndecodableAssignmentOnRelist(t *testing.T) {
	c := newCluster(t)
	ctx := t.Context()
	p := testproxy.New(t, endpoints[0])
	pcli, err := meta.Connect(ctx, []string{"http://" + p.Addr()}, meta.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pcli.Close() })
	var logged testlog.Buffer
	pstore, err := meta.New(pcli, c.store.Prefix(), meta.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	if err != nil {
		t.Fatal(err)
	}
	c.deps = func(d *tablet.Deps) { d.Meta = pstore }
	ts := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	mustWrite(t, ts, tb, 0, 1, tb.upsert(t, row{"a", 1, "x"}, row{"a", 2, "y"})...)

	resp, err := c.cli.Get(ctx, c.store.Prefix()+"/assignment/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("assignments: %v %v", resp, err)
	}
	key, orig := string(resp.Kvs[0].Key), resp.Kvs[0].Value
	bad := append(bytes.TrimSuffix(bytes.TrimSpace(slices.Clone(orig)), []byte("}")), []byte(`,"future_field":1}`)...)
	if _, err := c.cli.Put(ctx, key, string(bad)); err != nil {
		t.Fatal(err)
	}
	// Cut the watch's connection and compact meanwhile: it lists again.
	p.Pause(true)
	cr, err := c.cli.Put(ctx, c.store.Prefix()+"/zz-compact", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli.Compact(ctx, cr.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	p.Pause(false)
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for !strings.Contains(logged.String(), "relists after compaction") || !strings.Contains(logged.String(), "skips an undecodable assignment") {
		if time.Now().After(deadline) {
			t.Fatalf("the watch did not relist:\n%s", logged.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What the relist would do it does at once; a second to let it show.
	time.Sleep(time.Second)
	ids, err := c.logs.List(ctx)
	if err != nil || !slices.Contains(ids, changelog.BucketLogID{TableID: tb.rec.ID, Bucket: 0}) {
		t.Fatalf("the live bucket's changelog is gone after the relist (%v): %v", err, ids)
	}
	if got, err := scanAll(t, ts, tb, 0, nil, 10); err != nil || len(got) != 2 {
		t.Fatalf("after the relist the bucket serves %v (%v), want its 2 rows", got, err)
	}
	if _, err := c.cli.Put(ctx, key, string(orig)); err != nil {
		t.Fatal(err)
	}
}
