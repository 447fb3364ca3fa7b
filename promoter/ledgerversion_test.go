package promoter_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
)

// newerRecord is r as a newer promoter might store it: version 3, with a
// member this promoter does not know.
func newerRecord(t *testing.T, r promoter.Record) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(`{"version":3,"shard_hint":3,`), b[1:]...)
}

// rawValue returns the stored bytes and mod revision of key.
func rawValue(t *testing.T, cli *clientv3.Client, key string) ([]byte, int64) {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v (%d values)", key, err, len(resp.Kvs))
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision
}

// TestEtcdLedgerVersions: a record as promoters stored it before records
// carried a version still reads, and a write stores it at version 1; a
// record of version 3 and a corrupt one are reported by key — List returns
// the others alongside — and neither Create nor Update writes over them.
func TestEtcdLedgerVersions(t *testing.T) {
	cli := startEtcd(t)
	ctx := t.Context()
	const prefix = "/test/promoter"
	l := promoter.NewEtcdLedger(cli, prefix, nil)
	now := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	key := func(id string) string { return prefix + "/promotions/" + id }

	// Unversioned: what encodeRecord wrote before (encoding/json of a Record).
	old := sampleRecord(now)
	oldJSON, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(oldJSON, []byte(`"version"`)) {
		t.Fatalf("a Record carries a version of its own: %s", oldJSON)
	}
	if _, err := cli.Put(ctx, key(old.ID), string(oldJSON)); err != nil {
		t.Fatal(err)
	}
	got, err := l.Get(ctx, old.ID)
	if err != nil {
		t.Fatalf("get of an unversioned record: %v", err)
	}
	if got.Phase != old.Phase || got.TxnID != old.TxnID || !got.CreatedAt.Equal(old.CreatedAt) || got.Rows != old.Rows {
		t.Fatalf("unversioned record read as %+v", got)
	}
	got.Phase = promoter.PhaseBuilding
	if _, err := l.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if b, _ := rawValue(t, cli, key(old.ID)); !bytes.HasPrefix(b, []byte(`{"version":1,"id":"`+old.ID+`"`)) {
		t.Fatalf("rewritten record: %s", b)
	}

	// A normal record, a newer one and a corrupt one.
	normal := sampleRecord(now.Add(time.Hour))
	normal.ID = promoter.PromotionID("default", "lake.events", "shop.events", "2024-01-06", 42)
	if _, err := l.Create(ctx, normal); err != nil {
		t.Fatal(err)
	}
	newer := sampleRecord(now.Add(2 * time.Hour))
	newer.ID = promoter.PromotionID("default", "lake.events", "shop.events", "2024-01-07", 42)
	newerBytes := newerRecord(t, newer)
	if _, err := cli.Put(ctx, key(newer.ID), string(newerBytes)); err != nil {
		t.Fatal(err)
	}
	corruptID := promoter.PromotionID("default", "lake.events", "shop.events", "2024-01-08", 42)
	corruptBytes := []byte(`{"id":"` + corruptID + `","phase":`)
	if _, err := cli.Put(ctx, key(corruptID), string(corruptBytes)); err != nil {
		t.Fatal(err)
	}
	_, newerRev := rawValue(t, cli, key(newer.ID))

	list, err := l.List(ctx)
	if len(list) != 2 || list[0].ID != normal.ID || list[1].ID != old.ID {
		t.Fatalf("list beside unreadable records: %+v", list)
	}
	if !errors.Is(err, promoter.ErrUnreadable) || !errors.Is(err, promoter.ErrRecordVersion) {
		t.Fatalf("list error %v: want ErrUnreadable and ErrRecordVersion", err)
	}
	bad := promoter.UnreadableRecords(err)
	if len(bad) != 2 {
		t.Fatalf("unreadable records %v, want 2", bad)
	}
	byKey := map[string]*promoter.UnreadableRecordError{}
	for _, u := range bad {
		byKey[u.Key] = u
	}
	if u := byKey[key(newer.ID)]; u == nil || !errors.Is(u, promoter.ErrRecordVersion) ||
		!strings.Contains(u.Error(), key(newer.ID)+": decode record: record version 3: this promoter reads versions 1 to 2; upgrade it") {
		t.Fatalf("newer record reported as %v", u)
	}
	// A corrupt record is reported the same way, without a version.
	if u := byKey[key(corruptID)]; u == nil || errors.Is(u, promoter.ErrRecordVersion) ||
		!strings.Contains(u.Error(), key(corruptID)+": decode record: unexpected end of JSON input") {
		t.Fatalf("corrupt record reported as %v", u)
	}
	if !strings.Contains(err.Error(), key(newer.ID)) || !strings.Contains(err.Error(), key(corruptID)) {
		t.Fatalf("list error %q does not name both keys", err)
	}

	_, err = l.Get(ctx, newer.ID)
	var u *promoter.UnreadableRecordError
	if !errors.As(err, &u) || u.Key != key(newer.ID) || !errors.Is(err, promoter.ErrRecordVersion) {
		t.Fatalf("get of the newer record: %v", err)
	}

	// Nothing writes over them: a create of their ids exists, an update
	// with the revision of a record read before conflicts.
	for _, id := range []string{newer.ID, corruptID} {
		r := sampleRecord(now)
		r.ID = id
		if _, err := l.Create(ctx, r); !errors.Is(err, promoter.ErrExists) {
			t.Fatalf("create over %s: %v, want ErrExists", id, err)
		}
	}
	stale := newer
	stale.Revision = newerRev - 1
	if _, err := l.Update(ctx, stale); !errors.Is(err, promoter.ErrConflict) {
		t.Fatalf("update of the newer record with an older revision: %v, want ErrConflict", err)
	}
	if b, rev := rawValue(t, cli, key(newer.ID)); !bytes.Equal(b, newerBytes) || rev != newerRev {
		t.Fatalf("newer record changed: %s (revision %d, was %d)", b, rev, newerRev)
	}
	if b, _ := rawValue(t, cli, key(corruptID)); !bytes.Equal(b, corruptBytes) {
		t.Fatalf("corrupt record changed: %s", b)
	}
}

// errorLogs returns the error-level JSON log events in logs whose key is
// key.
func errorLogs(t *testing.T, logs *testlog.Buffer, key string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(logs.Bytes(), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if ev["level"] == "ERROR" && ev["key"] == key {
			out = append(out, ev)
		}
	}
	return out
}

// TestResumeWithNewerRecord: a ledger holds the unsettled records of a
// killed promoter and a record of version 3. Resume settles the normal
// records (they end committed), leaves the newer record byte for byte,
// logs it at error level with its key, and returns an error naming the key
// and the version; so do Run (which does not start), a reconcile (which
// plans nothing) and the status API of that record, while the status API's
// list answers the others and names it.
func TestResumeWithNewerRecord(t *testing.T) {
	e := newEnv(t, 300)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	const table, prefix = "versions", "/thaw-test/versions"
	days := []string{"2024-01-02", "2024-01-03"}
	parts := []string{e.partitionOf(days[0]), e.partitionOf(days[1])}
	pols := []*policies.Policy{twoDayPolicy(t, "versions", table)}

	// A promoter killed once both records are begun.
	first, _ := e.killedAt(ctx, t, e.configAt(pols, prefix), promoter.PhaseBegun)
	recs, err := first.Promotions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Phase != promoter.PhaseBegun || recs[1].Phase != promoter.PhaseBegun {
		t.Fatalf("after the kill: %+v", recs)
	}

	// A newer promoter's record of the same table, in progress.
	newer := recs[0]
	newer.ID = promoter.PromotionID("default", "lake.events", "shop."+table, "2024-01-04", 77)
	newer.CallerToken = promoter.CallerToken(newer.ID, 1)
	newerKey := prefix + "/promotions/" + newer.ID
	newerBytes := newerRecord(t, newer)
	cli := e.tier.Etcd()
	if _, err := cli.Put(ctx, newerKey, string(newerBytes)); err != nil {
		t.Fatal(err)
	}
	_, newerRev := rawValue(t, cli, newerKey)
	const why = "record version 3: this promoter reads versions 1 to 2; upgrade it"
	namesIt := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, promoter.ErrUnreadable) || !errors.Is(err, promoter.ErrRecordVersion) ||
			!strings.Contains(err.Error(), newerKey+": decode record: "+why) {
			t.Fatalf("%s: %v, want an error naming %s and %q", what, err, newerKey, why)
		}
	}
	untouched := func(t *testing.T) {
		t.Helper()
		if b, rev := rawValue(t, cli, newerKey); !bytes.Equal(b, newerBytes) || rev != newerRev {
			t.Fatalf("the version 3 record changed: %s (revision %d, was %d)", b, rev, newerRev)
		}
	}

	logs := &testlog.Buffer{}
	cfg := e.configAt(pols, prefix)
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	second := e.promoter(cfg)
	err = second.Resume(ctx)
	namesIt(t, "resume", err)
	untouched(t)
	if evs := errorLogs(t, logs, newerKey); len(evs) == 0 || !strings.Contains(evs[0]["err"].(string), why) {
		t.Fatalf("error logs of %s: %v", newerKey, evs)
	}

	// The normal records were settled: committed, the tier holds the rows.
	recs, err = second.Promotions(ctx)
	namesIt(t, "promotions", err)
	committed := committedByPartition(t, recs, table)
	if len(recs) != 2 || len(committed) != 2 {
		t.Fatalf("after resume: %+v", recs)
	}
	// Meeting the record again (status calls, reconciles) logs it at
	// error level no more: one error event for the key so far.
	if _, err := second.Promotions(ctx); err == nil {
		t.Fatal("promotions: no error for the unreadable record")
	}
	if evs := errorLogs(t, logs, newerKey); len(evs) != 1 {
		t.Fatalf("%d error logs of %s after meeting it three times, want 1: %v", len(evs), newerKey, evs)
	}
	for i, d := range days {
		e.checkTier(table, parts[i], e.lakeRows(d))
	}
	e.noTxnInProgress(table, parts)

	// Run does not start over the unreadable record; a reconcile plans
	// nothing; the status API says why. None of them touches it.
	if err := second.Run(ctx); err == nil {
		t.Fatal("run started over an unreadable record")
	} else {
		namesIt(t, "run", err)
	}
	if second.Ready() {
		t.Fatal("ready over an unreadable record")
	}
	_, err = second.Reconcile(ctx)
	namesIt(t, "reconcile", err)
	srv := httptest.NewServer(promoterhttp.NewHandler(second, nil))
	defer srv.Close()
	c, err := promoterhttp.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The list answers the readable records and names the unreadable one.
	prs, err := c.Promotions(ctx, "")
	if !errors.Is(err, promoter.ErrUnreadable) || !strings.Contains(err.Error(), newerKey+": decode record: "+why) {
		t.Fatalf("status API: %v", err)
	}
	if us := promoterhttp.UnreadableOf(err); len(prs) != 2 || len(us) != 1 || us[0].Key != newerKey || us[0].Error != "decode record: "+why {
		t.Fatalf("status API: %d promotions, unreadable %+v", len(prs), us)
	}
	_, err = c.Promotion(ctx, newer.ID)
	var apiErr *promoterhttp.Error
	if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, newerKey+": decode record: "+why) {
		t.Fatalf("status API of %s: %v", newer.ID, err)
	}
	untouched(t)
	if recs, _ := second.Promotions(ctx); len(committedByPartition(t, recs, table)) != 2 {
		t.Fatalf("after run and reconcile: %+v", recs)
	}
}
