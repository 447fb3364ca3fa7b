package bulkloadtest

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/tierpb"
	"github.com/thawdb/thaw/tier/uploadcap"
)

// TestBeginRacesDrop: a drop of the table lands between a Begin's
// admission and its first write. The Begin answers TARGET_NOT_FOUND at
// once instead of retrying a write that can never succeed (the caller
// hung, and the coordinator kept a transaction that exists nowhere,
// holding a slot of max_active), and the coordinator holds nothing.
func TestBeginRacesDrop(t *testing.T) {
	h := newHarness(t)
	lead := h.standard()
	tp := h.createTable(lead, "items", 2, "")
	var fired atomic.Bool
	var dropErr error
	h.setHook(func(_, step string) error {
		if step == "persist:begin" && fired.CompareAndSwap(false, true) {
			_, dropErr = lead.coord.DropTable(context.WithoutCancel(t.Context()), connect.NewRequest(&tierv1.DropTableRequest{
				Path: &tierv1.TablePath{Database: db, Table: "items"}}))
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := begin(ctx, lead, tp, "job-1")
	if !fired.Load() || dropErr != nil {
		t.Fatalf("setup: drop in the Begin's window: fired %v, %v", fired.Load(), dropErr)
	}
	if tierpb.ReasonOf(err) != tierpb.ReasonTargetNotFound {
		t.Fatalf("begin: %v (%s), want TARGET_NOT_FOUND", err, tierpb.ReasonOf(err))
	}
	lst, err := lead.bulk.List(t.Context(), connect.NewRequest(&tierv1.ListBulkLoadsRequest{IncludeTerminal: true}))
	if err != nil {
		t.Fatal(err)
	}
	if txns := lst.Msg.GetTransactions(); len(txns) != 0 {
		t.Fatalf("the coordinator holds %d transactions after the failed Begin: %v", len(txns), txns)
	}
}

// TestUploadsRefusedWhileAborting: once an abort is decided (the
// transaction is held in it, its unfence round not done), the upload
// gateway mints no credentials and takes no upload: what lands there
// after the abort could be left behind by the cleanup of its output.
func TestUploadsRefusedWhileAborting(t *testing.T) {
	h := newHarness(t)
	n := h.standard()
	tp := h.createTable(n, "items", 2, "")
	info := h.mustBegin(n, tp, "job-1")
	cred, err := n.bulk.GetUploadCredentials(t.Context(), connect.NewRequest(&tierv1.GetUploadCredentialsRequest{Handle: info.GetHandle()}))
	if err != nil {
		t.Fatal(err)
	}
	h.setHook(func(_, step string) error {
		if step == "send:unfence" {
			return errCrash // the transaction stays aborting
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, _ = abort(ctx, n, info.GetHandle())
	st, err := status(t.Context(), n, info.GetHandle().GetTxnId())
	if err != nil || !st.GetAborting() {
		t.Fatalf("setup: status %v %v, want the transaction aborting", st, err)
	}
	_, err = n.bulk.GetUploadCredentials(t.Context(), connect.NewRequest(&tierv1.GetUploadCredentialsRequest{Handle: info.GetHandle()}))
	if tierpb.ReasonOf(err) != tierpb.ReasonInvalidState || !strings.Contains(err.Error(), "is being aborted") {
		t.Fatalf("credentials while aborting: %v, want INVALID_STATE saying it is being aborted", err)
	}
	code, ref := gatewayPut(t, n, cred.Msg.GetToken(), info.GetSnapshotDirs()[0]+"/late-file", "late bytes")
	if code != http.StatusForbidden || ref.Class != uploadcap.NotBegun {
		t.Fatalf("upload while aborting: %d %+v, want 403 %s", code, ref, uploadcap.NotBegun)
	}
}
