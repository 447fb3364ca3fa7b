package tablet_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/access"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestDataAccess: a tablet server follows the data-access policy in etcd
// as it changes: open when not enforced, then reads and writes only for
// callers whose patterns cover the table (refusals write nothing), a
// refusal of everything while the record is unreadable or missing, and
// open again once not enforced. A server started under an enforced policy
// never serves an unauthenticated call.
func TestDataAccess(t *testing.T) {
	c := newCluster(t)
	ts := c.startServer("ts-1")
	tb := c.createTable("orders", []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	const appTok, readerTok, otherTok = "app-token-0123456789", "reader-token-0123456789", "other-token-0123456789"

	as := func(tok string, r connect.AnyRequest) {
		if tok != "" {
			r.Header().Set("Authorization", "Bearer "+tok)
		}
	}
	writeAs := func(tok string, rows ...row) error {
		r := connect.NewRequest(&tierv1.WriteRequest{Target: tb.id, Bucket: 0, LeaderEpoch: 1, Mutations: tb.upsert(t, rows...)})
		as(tok, r)
		_, err := ts.client.Write(t.Context(), r)
		return err
	}
	k1, _, _ := tb.encode(t, row{"acme", 1, ""})
	lookupAs := func(tok string) error {
		r := connect.NewRequest(&tierv1.LookupRequest{Target: tb.id, Bucket: 0, Keys: [][]byte{k1}})
		as(tok, r)
		_, err := ts.client.Lookup(t.Context(), r)
		return err
	}
	scanAs := func(tok string) (int, error) {
		r := connect.NewRequest(&tierv1.ScanRequest{Target: tb.id, Bucket: 0})
		as(tok, r)
		resp, err := ts.client.Scan(t.Context(), r)
		if err != nil {
			return 0, err
		}
		return len(resp.Msg.Rows), nil
	}
	prefixAs := func(tok string) error {
		r := connect.NewRequest(&tierv1.PrefixLookupRequest{Target: tb.id, Bucket: 0, Prefixes: [][]byte{prefix("acme")}})
		as(tok, r)
		_, err := ts.client.PrefixLookup(t.Context(), r)
		return err
	}
	policy := func(d meta.DataAccess) {
		t.Helper()
		if _, err := c.store.PutDataAccess(t.Context(), c.guard, d); err != nil {
			t.Fatal(err)
		}
	}
	// await retries fn until it fails with reason (or succeeds, for "").
	await := func(what string, want tierpb.Reason, fn func() error) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := fn()
			if tierpb.ReasonOf(err) == want && (want != "" || err == nil) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v, want %q", what, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Not enforced (as the cluster starts): open.
	await("a write, not enforced", "", func() error { return writeAs("", row{"acme", 1, "open"}) })

	policy(meta.DataAccess{Enforce: true, Callers: []meta.DataCaller{
		{Name: "app", TokenSHA256: access.TokenSHA256(appTok), Read: []string{"db.*"}, Write: []string{"db.orders"}},
		{Name: "reader", TokenSHA256: access.TokenSHA256(readerTok), Read: []string{"db.orders"}},
		{Name: "other", TokenSHA256: access.TokenSHA256(otherTok), Read: []string{"other.*"}, Write: []string{"db.others"}},
	}})
	await("a lookup without a token", tierpb.ReasonUnauthenticated, func() error { return lookupAs("") })
	for _, tc := range []struct {
		what string
		err  error
		want tierpb.Reason
	}{
		{"a write without a token", writeAs("", row{"acme", 1, "anonymous"}), tierpb.ReasonUnauthenticated},
		{"a write with an unknown token", writeAs("not-a-caller-token-01", row{"acme", 1, "unknown"}), tierpb.ReasonUnauthenticated},
		{"a write by a reader", writeAs(readerTok, row{"acme", 1, "reader"}), tierpb.ReasonPermissionDenied},
		{"a write by another table's writer", writeAs(otherTok, row{"acme", 1, "other"}), tierpb.ReasonPermissionDenied},
		{"a lookup by another database's reader", lookupAs(otherTok), tierpb.ReasonPermissionDenied},
		{"a prefix lookup by another database's reader", prefixAs(otherTok), tierpb.ReasonPermissionDenied},
		{"a prefix lookup without a token", prefixAs(""), tierpb.ReasonUnauthenticated},
		{"a lookup by the reader", lookupAs(readerTok), ""},
		{"a prefix lookup by the app", prefixAs(appTok), ""},
	} {
		if got := tierpb.ReasonOf(tc.err); got != tc.want || (tc.want == "" && tc.err != nil) {
			t.Errorf("%s: %v, want %q", tc.what, tc.err, tc.want)
		}
		for _, tok := range []string{appTok, readerTok, otherTok} {
			if tc.err != nil && strings.Contains(tc.err.Error(), tok) {
				t.Errorf("%s: the error quotes a token: %v", tc.what, tc.err)
			}
		}
	}
	if _, err := scanAs(""); tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated {
		t.Errorf("a scan without a token: %v", err)
	}
	if _, err := scanAs(otherTok); tierpb.ReasonOf(err) != tierpb.ReasonPermissionDenied || !strings.Contains(err.Error(), "caller other may not read db.orders") {
		t.Errorf("a scan by another database's reader: %v", err)
	}
	// Nothing refused was written.
	lr := connect.NewRequest(&tierv1.LookupRequest{Target: tb.id, Bucket: 0, Keys: [][]byte{k1}})
	as(readerTok, lr)
	got, err := ts.client.Lookup(t.Context(), lr)
	if err != nil {
		t.Fatal(err)
	}
	if _, open, _ := tb.encode(t, row{"acme", 1, "open"}); !got.Msg.Results[0].Found || string(got.Msg.Results[0].Value) != string(open) {
		t.Fatalf("after the refused writes: %v, want the value written before the policy", got.Msg.Results[0])
	}
	if err := writeAs(appTok, row{"acme", 2, "app"}); err != nil {
		t.Fatalf("a write by the app: %v", err)
	}
	if n, err := scanAs(readerTok); err != nil || n != 2 {
		t.Fatalf("a scan by the reader: %d rows, %v", n, err)
	}

	// A server started now refuses an unauthenticated call from the
	// first: the policy not read yet is UNAVAILABLE, never open.
	ts2 := c.startServer("ts-2")
	r := connect.NewRequest(&tierv1.LookupRequest{Target: tb.id, Bucket: 0, Keys: [][]byte{k1}})
	if _, err := ts2.client.Lookup(t.Context(), r); tierpb.ReasonOf(err) != tierpb.ReasonUnavailable && tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated {
		t.Fatalf("the first call to a new server without a token: %v", err)
	}

	// An unreadable record: everything is refused, with or without a token.
	if _, err := c.cli.Put(t.Context(), c.store.DataAccessKey(), `{"version":1,"enforce":true,"callers":[],"extra":1}`); err != nil {
		t.Fatal(err)
	}
	await("a write by the app under an unreadable policy", tierpb.ReasonUnavailable, func() error { return writeAs(appTok, row{"acme", 3, "app"}) })
	if err := lookupAs(""); tierpb.ReasonOf(err) != tierpb.ReasonUnavailable {
		t.Fatalf("a lookup without a token under an unreadable policy: %v", err)
	}

	// Not enforced: open again. No policy stored (a tier whose
	// coordinator has never led): nothing is served.
	policy(meta.DataAccess{})
	await("a write without a token, not enforced", "", func() error { return writeAs("", row{"acme", 3, "open"}) })
	if _, err := c.cli.Delete(t.Context(), c.store.DataAccessKey()); err != nil {
		t.Fatal(err)
	}
	await("a lookup without a token, no policy", tierpb.ReasonUnavailable, func() error { return lookupAs("") })
	if err := writeAs(appTok, row{"acme", 4, "app"}); tierpb.ReasonOf(err) != tierpb.ReasonUnavailable || !strings.Contains(err.Error(), "no coordinator has published") {
		t.Fatalf("a write by the app, no policy: %v", err)
	}
	policy(meta.DataAccess{})
	await("a lookup without a token, not enforced again", "", func() error { return lookupAs("") })
}
