package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/thawdb/thaw/bulkload/bulkloadclient"
)

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestResumedBeginLeavesSharedTxn: a begin that resumes a transaction
// (the same --token) and then cannot write its output aborted the
// transaction the first begin's builders were working on. With a caller's
// token it is left BEGUN now, and the error says how to go on.
func TestResumedBeginLeavesSharedTxn(t *testing.T) {
	e, tc := startTestTier(t)
	ctx := t.Context()
	server := "--server=" + e.HostPort()
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CreateTable(ctx, "shop", "items", itemsTable(t, false), 2); err != nil {
		t.Fatal(err)
	}
	var first bytes.Buffer
	if err := runBulkload(ctx, &first, []string{"begin", "shop.items", "--token", "shared", server}); err != nil {
		t.Fatal(err)
	}
	bc, err := bulkloadclient.UnmarshalBuildContext(bytes.TrimSpace(first.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	id := bc.Handle().TxnID
	// The restarted coordinator script resumes, but its stdout is gone.
	err = runBulkload(ctx, failWriter{}, []string{"begin", "shop.items", "--token", "shared", server})
	if err == nil || !strings.Contains(err.Error(), "is left BEGUN") {
		t.Fatalf("resumed begin that cannot print: %v", err)
	}
	out, serr := runBulk(t, "status", id, "--output", "json", server)
	if serr != nil {
		t.Fatal(serr)
	}
	if !strings.Contains(out, `"state": "BEGUN"`) {
		t.Errorf("the first Begin's transaction, which builders hold a context of, was aborted by a resumed Begin that failed to print:\n%s", out)
	}
}
