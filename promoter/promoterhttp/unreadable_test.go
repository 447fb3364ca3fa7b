package promoterhttp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/daemon/daemontest"
	"github.com/thawdb/thaw/internal/tieradapter"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
	"github.com/thawdb/thaw/tier/tierclient"
)

const testPrefix = "/test/promoterhttp"

// ledgerEnv is a promoter (not running) over an embedded tier whose etcd
// holds its ledger under testPrefix.
type ledgerEnv struct {
	etcd *clientv3.Client
	srv  *httptest.Server
	c    *promoterhttp.Client
}

func newLedgerEnv(t *testing.T) ledgerEnv {
	t.Helper()
	ctx := t.Context()
	e, tc := daemontest.StartWithClient(ctx, t, daemon.EmbeddedConfig{DataDir: t.TempDir(), EtcdUnsafeNoFsync: true, TabletServers: 1})
	bl, err := bulkloadclient.New(ctx, e.Address())
	if err != nil {
		t.Fatal(err)
	}
	p, err := promoter.New(promoter.Config{Tier: tieradapter.New(tc), BulkLoad: bl, Ledger: promoter.NewEtcdLedger(e.Etcd(), testPrefix, nil)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promoterhttp.NewHandler(p, nil))
	t.Cleanup(srv.Close)
	c, err := promoterhttp.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ledgerEnv{etcd: e.Etcd(), srv: srv, c: c}
}

func ledgerKey(id string) string { return testPrefix + "/promotions/" + id }

// testRecord is a committed record of the partition day.
func testRecord(day string, at time.Time) promoter.Record {
	id := promoter.PromotionID("events", "lake.events", "shop.events", day, 42)
	return promoter.Record{
		ID: id, Policy: "events", Catalog: "default", LakeTable: "lake.events", Partition: day,
		LakePartitions: []string{"0/event_day=" + day}, SourceSnapshotID: 42, ScanSnapshotID: 42,
		Database: "shop", Table: "events", CallerToken: promoter.CallerToken(id, 1), Attempt: 1,
		Phase: promoter.PhaseCommitted, TxnID: "0b0d6f7e-52f1-4b8e-9a43-0b2a1e6c1d11", Buckets: 4,
		Rows: 10, Bytes: 2048, CreatedAt: at, UpdatedAt: at, CommittedAt: &at,
	}
}

// putNewer stores r as a newer promoter might: version 3, with a member
// this promoter does not know.
func putNewer(t *testing.T, cli *clientv3.Client, r promoter.Record) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	b = append([]byte(`{"version":3,"shard_hint":3,`), b[1:]...)
	if _, err := cli.Put(t.Context(), ledgerKey(r.ID), string(b)); err != nil {
		t.Fatal(err)
	}
	return ledgerKey(r.ID)
}

// get answers GET path: its status and body.
func get(t *testing.T, srv *httptest.Server, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: content type %q: %s", path, ct, body)
	}
	return resp.StatusCode, body
}

// decodeStrict decodes body into v refusing unknown members and trailing
// data, and returns its top-level member names.
func decodeStrict(t *testing.T, body []byte, v any) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	if dec.More() {
		t.Fatalf("trailing data after %s", body)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range members {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

const newerWhy = "decode record: record version 3: this promoter reads versions 1 to 2; upgrade it"

// TestPromotionsWithUnreadableRecords: a ledger holds a readable record,
// one of version 3 and a corrupt one. GET /v1/promotions answers 200 with
// the readable one and lists the other two by key and reason (the member
// is absent while every record reads); the client returns the readable
// promotion with an error listing the same. GET /v1/promotions/{id} of an
// unreadable record answers 500 "unreadable" naming its key and reason.
func TestPromotionsWithUnreadableRecords(t *testing.T) {
	e := newLedgerEnv(t)
	ctx := t.Context()
	at := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	readable := testRecord("2024-01-05", at)
	if _, err := promoter.NewEtcdLedger(e.etcd, testPrefix, nil).Create(ctx, readable); err != nil {
		t.Fatal(err)
	}

	// Every record reads: no "unreadable" member, the client no error.
	status, body := get(t, e.srv, promoterhttp.PathPromotions)
	var resp promoterhttp.PromotionsResponse
	if names := decodeStrict(t, body, &resp); status != http.StatusOK || !slices.Equal(names, []string{"promotions"}) {
		t.Fatalf("before: %d, members %v: %s", status, names, body)
	}
	if prs, err := e.c.Promotions(ctx, ""); err != nil || len(prs) != 1 {
		t.Fatalf("client before: %v, %d promotions", err, len(prs))
	}

	newer := testRecord("2024-01-06", at.Add(time.Hour))
	newerKey := putNewer(t, e.etcd, newer)
	corruptID := promoter.PromotionID("events", "lake.events", "shop.events", "2024-01-07", 42)
	corruptKey := ledgerKey(corruptID)
	if _, err := e.etcd.Put(ctx, corruptKey, `{"id":"`+corruptID+`","phase":`); err != nil {
		t.Fatal(err)
	}
	want := []promoterhttp.UnreadableRecord{
		{Key: newerKey, Error: newerWhy},
		{Key: corruptKey, Error: "decode record: unexpected end of JSON input"},
	}
	sortByKey := func(us []promoterhttp.UnreadableRecord) []promoterhttp.UnreadableRecord {
		us = slices.Clone(us)
		slices.SortFunc(us, func(a, b promoterhttp.UnreadableRecord) int { return strings.Compare(a.Key, b.Key) })
		return us
	}
	want = sortByKey(want)

	status, body = get(t, e.srv, promoterhttp.PathPromotions)
	resp = promoterhttp.PromotionsResponse{}
	names := decodeStrict(t, body, &resp)
	if status != http.StatusOK || !slices.Equal(names, []string{"promotions", "unreadable"}) {
		t.Fatalf("list: %d, members %v: %s", status, names, body)
	}
	if len(resp.Promotions) != 1 || resp.Promotions[0].Record.ID != readable.ID || resp.Promotions[0].Record.Phase != promoter.PhaseCommitted {
		t.Fatalf("promotions beside unreadable records: %s", body)
	}
	if got := sortByKey(resp.Unreadable); !slices.Equal(got, want) {
		t.Fatalf("unreadable %+v, want %+v", got, want)
	}
	// Each entry has exactly the documented members.
	var raw struct {
		Unreadable []map[string]json.RawMessage `json:"unreadable"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, u := range raw.Unreadable {
		if _, ok := u["key"]; !ok || len(u) != 2 || u["error"] == nil {
			t.Fatalf("unreadable entry %v: want key and error", u)
		}
	}

	// A policy filter does not hide them (their policy cannot be read);
	// an unknown policy is still 404, worded as the plan's.
	if status, body := get(t, e.srv, promoterhttp.PathPromotions+"?policy=nope"); status != http.StatusNotFound ||
		!strings.Contains(string(body), `promoter: unknown policy: \"nope\"`) {
		t.Fatalf("unknown policy: %d %s", status, body)
	}

	// The client: the readable promotion, and an error listing the others.
	prs, err := e.c.Promotions(ctx, "")
	if len(prs) != 1 || prs[0].Record.ID != readable.ID {
		t.Fatalf("client promotions: %+v", prs)
	}
	if !errors.Is(err, promoter.ErrUnreadable) || errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("client error %v: want ErrUnreadable", err)
	}
	if got := sortByKey(promoterhttp.UnreadableOf(err)); !slices.Equal(got, want) {
		t.Fatalf("client unreadable %+v, want %+v", got, want)
	}
	if !strings.Contains(err.Error(), "promoter: unreadable ledger record "+newerKey+": "+newerWhy) {
		t.Fatalf("client error %q does not name %s and why", err, newerKey)
	}

	// One unreadable record: 500 "unreadable", naming its key and why.
	for _, tc := range []struct{ id, key, why string }{
		{newer.ID, newerKey, newerWhy},
		{corruptID, corruptKey, "unexpected end of JSON input"},
	} {
		status, body := get(t, e.srv, promoterhttp.PathPromotions+"/"+tc.id)
		var er promoterhttp.ErrorResponse
		decodeStrict(t, body, &er)
		if status != http.StatusInternalServerError || er.Code != promoterhttp.CodeUnreadable ||
			!strings.Contains(er.Error, tc.key) || !strings.Contains(er.Error, tc.why) {
			t.Fatalf("GET %s: %d %+v", tc.id, status, er)
		}
		_, err := e.c.Promotion(ctx, tc.id)
		var apiErr *promoterhttp.Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusInternalServerError || !errors.Is(err, promoter.ErrUnreadable) ||
			errors.Is(err, promoter.ErrNotFound) || !strings.Contains(apiErr.Message, tc.key) {
			t.Fatalf("client promotion %s: %v", tc.id, err)
		}
	}
	// The readable one still reads.
	if pr, err := e.c.Promotion(ctx, readable.ID); err != nil || pr.Record.ID != readable.ID {
		t.Fatalf("readable promotion: %+v %v", pr, err)
	}
}

// TestPromotionsListFailure: an error of the ledger other than unreadable
// records still fails the list as before: 500 "internal" with the error.
func TestPromotionsListFailure(t *testing.T) {
	ctx := t.Context()
	e, err := daemon.StartEmbedded(ctx, daemon.EmbeddedConfig{DataDir: t.TempDir(), EtcdUnsafeNoFsync: true, TabletServers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("close tier: %v", err)
		}
	}()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	tc, err := tierclient.New(ctx, e.Address())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	bl, err := bulkloadclient.New(ctx, e.Address())
	if err != nil {
		t.Fatal(err)
	}
	// A ledger whose etcd client is closed: every read fails.
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.EtcdEndpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := promoter.New(promoter.Config{Tier: tieradapter.New(tc), BulkLoad: bl, Ledger: promoter.NewEtcdLedger(cli, testPrefix, nil)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promoterhttp.NewHandler(p, nil))
	defer srv.Close()
	status, body := get(t, srv, promoterhttp.PathPromotions)
	var er promoterhttp.ErrorResponse
	decodeStrict(t, body, &er)
	if status != http.StatusInternalServerError || er.Code != promoterhttp.CodeInternal || !strings.Contains(er.Error, "promoter: ledger list") {
		t.Fatalf("list over a closed etcd client: %d %s", status, body)
	}
}
