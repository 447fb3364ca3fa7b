package bulkloadclient_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/testlog"
)

func tokenHash(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// TestCallerAuthentication runs a coordinator that authenticates its
// bulk-load callers: a caller without a token or with an unknown one is
// refused; a caller allowed one table begins, builds (scoped uploads),
// commits and lists only there, and can neither begin nor look at nor
// abort nor write into another table's transaction; the tokens appear in
// no log line.
func TestCallerAuthentication(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const loaderTok, adminTok = "loader-token-5b7e1c9d", "admin-token-0f3a8e62"
	var logs testlog.Buffer
	e, tc := scopedTier(ctx, t, &logs, daemon.EmbeddedConfig{Coordinator: daemon.CoordinatorOptions{Callers: []daemon.CallerOptions{
		{Name: "loader", TokenSHA256: tokenHash(loaderTok), Tables: []string{"shop.items"}},
		{Name: "admin", TokenSHA256: tokenHash(adminTok), Tables: []string{"*"}},
	}}}, "items", "other")
	client := func(opts ...bulkloadclient.Opt) *bulkloadclient.Client {
		c, err := bulkloadclient.New(ctx, e.Address(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	items, other := bulkload.Target{Database: "shop", Table: "items"}, bulkload.Target{Database: "shop", Table: "other"}

	for name, c := range map[string]*bulkloadclient.Client{
		"no token":      client(),
		"unknown token": client(bulkloadclient.WithBearerToken("not-a-callers-token")),
	} {
		_, err := c.Begin(ctx, items, "auth-x", bulkloadclient.BeginOptions{})
		if !errors.Is(err, bulkload.ErrPermissionDenied) || bulkloadclient.IsRetriable(err) {
			t.Fatalf("%s: begin: %v", name, err)
		}
	}
	if _, err := bulkloadclient.New(ctx, e.Address(), bulkloadclient.WithBearerToken("short")); err == nil {
		t.Fatal("a 5-byte bearer token was taken")
	}

	loader, admin := client(bulkloadclient.WithBearerToken(loaderTok), bulkloadclient.WithScopedUploads()), client(bulkloadclient.WithBearerToken(adminTok))
	if _, err := begin(ctx, loader, other, "auth-1"); !errors.Is(err, bulkload.ErrPermissionDenied) || !strings.Contains(err.Error(), "caller loader may not bulk load shop.other") {
		t.Fatalf("loader begins shop.other: %v", err)
	}
	theirs, err := begin(ctx, admin, other, "auth-2")
	if err != nil {
		t.Fatal(err)
	}
	mine, err := begin(ctx, loader, items, "auth-3")
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"status":      func() error { _, err := loader.Status(ctx, theirs.Handle()); return err },
		"abort":       func() error { _, err := loader.Abort(ctx, theirs.Handle()); return err },
		"in progress": func() error { _, _, err := loader.GetInProgress(ctx, other); return err },
		"credentials": func() error { _, err := loader.UploadCredentials(ctx, theirs.Handle()); return err },
	} {
		if err := call(); !errors.Is(err, bulkload.ErrPermissionDenied) {
			t.Errorf("loader %s of admin's transaction: %v", name, err)
		}
	}
	if st, err := admin.Status(ctx, theirs.Handle()); err != nil || st.State != bulkload.Begun {
		t.Fatalf("admin's transaction after the loader's attempts: %+v %v", st, err)
	}

	// List shows the loader its own transaction only.
	lc := tierv1connect.NewBulkLoadServiceClient(e.HTTPClient(), e.Address(), connect.WithInterceptors(bulkloadclient.Bearer(loaderTok)))
	resp, err := lc.List(ctx, connect.NewRequest(&tierv1.ListBulkLoadsRequest{IncludeTerminal: true}))
	if err != nil {
		t.Fatal(err)
	}
	if txns := resp.Msg.GetTransactions(); len(txns) != 1 || txns[0].GetHandle().GetTxnId() != mine.Handle().TxnID {
		t.Fatalf("the loader lists %v", txns)
	}

	// The loader builds through the upload gateway and commits.
	rows := itemRows(200, "")
	results := buildThrough(ctx, t, mine, rows, nil, loader.ScopedStore(mine))
	if st, err := loader.Commit(ctx, mine, results, 30*time.Second); err != nil || st.State != bulkload.Committed {
		t.Fatalf("commit: %+v %v", st, err)
	}
	expectRows(ctx, t, tc, "items", rows)
	if _, err := admin.Abort(ctx, theirs.Handle()); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{loaderTok, adminTok} {
		if strings.Contains(logs.String(), tok) {
			t.Fatal("a log line holds a bearer token")
		}
	}
	if !strings.Contains(logs.String(), "coordinator") {
		t.Fatal("no logs captured")
	}
}
