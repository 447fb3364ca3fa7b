package bulkloadtest

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/fencing"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/uploadcap"
)

// TestGatewayOpenAfterTermEndsAtFreeze: a Commit's freeze whose term ends
// just as it starts. Its effect closed the upload gateway to the
// transaction with the term's cancelled context after the ended runner
// had reopened it, so in the same process's next term the gateway refused
// every upload of the BEGUN transaction ("is committing: its manifest is
// being frozen") though the manifest never froze.
func TestGatewayOpenAfterTermEndsAtFreeze(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c-1")
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		h.startTablet(id)
	}
	n := h.leader()
	ctx := t.Context()
	tp := h.createTable(n, "items", 2, "")
	info := h.mustBegin(n, tp, "gw-term")
	ref := h.load(info, makeRows(10, ""))
	var once sync.Once
	h.setHook(func(_, step string) error {
		if step != "persist:freeze" {
			return nil
		}
		once.Do(func() {
			ldr, err := fencing.CurrentLeader(ctx, h.cli, h.store.ElectionPrefix())
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := h.cli.Delete(ctx, ldr.Key); err != nil {
				t.Error(err)
				return
			}
			for {
				if _, ok := n.c.IsLeader(); !ok {
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
		return nil
	})
	_, err := commit(ctx, n, info.GetHandle(), ref)
	t.Logf("commit in the ending term: %v", err)
	h.setHook(nil)
	// The same process leads again.
	eventually(t, "c-1 leads again", func() error {
		_, err := n.bulk.GetUploadCredentials(ctx, connect.NewRequest(&tierv1.GetUploadCredentialsRequest{Handle: info.GetHandle()}))
		return err
	})
	st, err := status(ctx, n, info.GetHandle().GetTxnId())
	if err != nil {
		t.Fatal(err)
	}
	if st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_BEGUN {
		t.Fatalf("state %s, want BEGUN (the freeze never landed)", st.GetState())
	}
	cred, err := n.bulk.GetUploadCredentials(ctx, connect.NewRequest(&tierv1.GetUploadCredentialsRequest{Handle: info.GetHandle()}))
	if err != nil {
		t.Fatal(err)
	}
	uri := snapTarget(info).SnapshotDir(1, info.GetSnapshotIds()[1]) + "/after-term"
	var code int
	var r uploadcap.Refusal
	for i := 0; i < 50; i++ {
		code, r = gatewayPut(t, n, cred.Msg.GetToken(), uri, "x")
		if code != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != http.StatusOK {
		t.Fatalf("upload in the new term of a BEGUN transaction whose manifest never froze: %d %+v", code, r)
	}
}
