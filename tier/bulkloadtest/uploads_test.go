package bulkloadtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/tierpb"
	"github.com/thawdb/thaw/tier/uploadcap"
)

// TestUploadGatewayFaults fails the upload gateway's store writes and cuts
// an upload's body short: each answers the class a client acts on, and
// none leaves an object in the store or a file in the gateway's temporary
// directory; the same upload then succeeds.
func TestUploadGatewayFaults(t *testing.T) {
	tmp := t.TempDir()
	h := newHarness(t, withFaults(), withBulkConfig(func(c *coordinator.BulkLoadConfig) { c.UploadTempDir = tmp }))
	n := h.standard()
	ctx := t.Context()
	tp := h.createTable(n, "items", 2, "")
	info := h.mustBegin(n, tp, "gw-faults")
	cred, err := n.bulk.GetUploadCredentials(ctx, connect.NewRequest(&tierv1.GetUploadCredentialsRequest{Handle: info.GetHandle()}))
	if err != nil {
		t.Fatal(err)
	}
	uri := snapTarget(info).SnapshotDir(0, info.GetSnapshotIds()[0]) + "/f"
	key, err := h.objects.Key(uri)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("sst "), 4096)
	sum := sha256.Sum256(body)
	sha := hex.EncodeToString(sum[:])
	put := func() (int, uploadcap.Refusal) {
		t.Helper()
		return gatewayPut(t, n, cred.Msg.GetToken(), uri, string(body))
	}
	untouched := func(what string) {
		t.Helper()
		if _, err := h.objects.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s: the object: %v, want not found", what, err)
		}
		eventually(t, what+": the gateway's temporary directory is empty", func() error {
			ents, err := os.ReadDir(tmp)
			if err != nil || len(ents) > 0 {
				return fmt.Errorf("%d entries, %v", len(ents), err)
			}
			return nil
		})
	}

	for _, tc := range []struct {
		name   string
		err    error
		status int
		class  string
	}{
		{"transient store failure", fmt.Errorf("%w: injected", objstore.ErrTransient), 503, uploadcap.Transient},
		{"store full", fmt.Errorf("%w: injected", objstore.ErrNoSpace), 507, uploadcap.NoSpace},
		{"store refuses", fmt.Errorf("%w: injected", objstore.ErrPermission), 502, uploadcap.StoreRefused},
	} {
		h.faults.FailNth(objstore.OpPut, 1, tc.err)
		if status, r := put(); status != tc.status || r.Class != tc.class || !strings.Contains(r.Error, "injected") {
			t.Errorf("%s: %d %+v, want %d %s", tc.name, status, r, tc.status, tc.class)
		}
		untouched(tc.name)
	}

	// A body cut short: the client promises 16 KiB, sends 10 bytes and
	// hangs up.
	conn, err := net.Dial("tcp", strings.TrimPrefix(n.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(n.url + uploadcap.Path + "?uri=" + url.QueryEscape(uri))
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n%s: %s\r\nContent-Length: %d\r\n\r\n%s",
		u.RequestURI(), u.Host, cred.Msg.GetToken(), uploadcap.HeaderSHA256, sha, len(body), body[:10])
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	// The gateway has seen it (the first transient refusal above, and
	// this one) before the store is checked.
	eventually(t, "the gateway refused the cut-short body", func() error {
		v, _, err := metricvalue.Value(n.reg, "thaw_coordinator_upload_requests_total", map[string]string{"op": "put", "result": uploadcap.Transient})
		if err == nil && v != 2 {
			err = fmt.Errorf("%v transient refusals", v)
		}
		return err
	})
	untouched("a body cut short")

	// Nothing armed: the same upload is stored.
	if status, r := put(); status != http.StatusOK {
		t.Fatalf("put: %d %+v", status, r)
	}
	if got, err := h.objects.Get(ctx, key); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("stored %d bytes, %v", len(got), err)
	}
}

// TestUploadGatewayClosesAtCommit: once a Commit froze the manifest (here:
// while the result of its validation is held back), the gateway takes
// nothing more of the transaction (what the validation reads must not
// change under it) and no new credential is minted, while the Commit goes
// on to COMMITTED.
func TestUploadGatewayClosesAtCommit(t *testing.T) {
	h := newHarness(t)
	n := h.standard()
	ctx := t.Context()
	tp := h.createTable(n, "items", 2, "")
	info := h.mustBegin(n, tp, "gw-commit")
	cred, err := n.bulk.GetUploadCredentials(ctx, connect.NewRequest(&tierv1.GetUploadCredentialsRequest{Handle: info.GetHandle()}))
	if err != nil {
		t.Fatal(err)
	}
	ref := h.load(info, makeRows(40, ""))
	validating, release := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free()
	h.setHook(func(_, step string) error {
		if step == "validated" {
			once.Do(func() { close(validating) })
			<-release
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		st, err := commit(ctx, n, info.GetHandle(), ref)
		if err == nil && st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED {
			err = fmt.Errorf("commit: %s", st.GetState())
		}
		done <- err
	}()
	<-validating
	uri := snapTarget(info).SnapshotDir(1, info.GetSnapshotIds()[1]) + "/late"
	if status, r := gatewayPut(t, n, cred.Msg.GetToken(), uri, "late"); status != http.StatusForbidden || r.Class != uploadcap.NotBegun || !strings.Contains(r.Error, "manifest is frozen") {
		t.Fatalf("put while validating: %d %+v", status, r)
	}
	if _, err := n.bulk.GetUploadCredentials(ctx, connect.NewRequest(&tierv1.GetUploadCredentialsRequest{Handle: info.GetHandle()})); err == nil {
		t.Fatal("credentials minted while validating")
	} else {
		wantReason(t, err, tierpb.ReasonInvalidState)
	}
	free()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	key, err := h.objects.Key(uri)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.objects.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the late object: %v", err)
	}
}

// gatewayPut sends a PUT of body to uri through n's upload gateway and
// returns the status and refusal.
func gatewayPut(t *testing.T, n *coordNode, token, uri, body string) (int, uploadcap.Refusal) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, n.url+uploadcap.Path+"?uri="+url.QueryEscape(uri), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(uploadcap.HeaderSHA256, hex.EncodeToString(sum[:]))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r uploadcap.Refusal
	if resp.StatusCode != http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, r
}

// TestUploadGatewayDrainsAtCommit: a Commit closes the gateway to the
// transaction and waits for the writes it has in flight before it freezes
// the manifest, so nothing the gateway stores lands while the validation
// reads. A store write held up in the store keeps the freeze waiting; a
// write that arrives meanwhile is refused; the freeze follows the held
// write's end.
func TestUploadGatewayDrainsAtCommit(t *testing.T) {
	h := newHarness(t, withFaults())
	n := h.standard()
	ctx := t.Context()
	tp := h.createTable(n, "items", 2, "")
	info := h.mustBegin(n, tp, "gw-drain")
	cred, err := n.bulk.GetUploadCredentials(ctx, connect.NewRequest(&tierv1.GetUploadCredentialsRequest{Handle: info.GetHandle()}))
	if err != nil {
		t.Fatal(err)
	}
	ref := h.load(info, makeRows(40, ""))
	dir := snapTarget(info).SnapshotDir(1, info.GetSnapshotIds()[1])

	var seq atomic.Int32 // orders the events below
	var released, frozen atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	h.faults.FailKey(objstore.OpPut, func(key string) bool {
		if strings.HasSuffix(key, "/held") {
			close(entered)
			<-release
			released.Store(seq.Add(1))
		}
		return false
	}, nil)
	h.setHook(func(_, step string) error {
		if step == "persisted:freeze" && frozen.Load() == 0 {
			frozen.Store(seq.Add(1))
		}
		return nil
	})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free()
	held := make(chan int, 1)
	go func() {
		status, _ := gatewayPut(t, n, cred.Msg.GetToken(), dir+"/held", "held")
		held <- status
	}()
	<-entered
	done := make(chan error, 1)
	go func() {
		st, err := commit(ctx, n, info.GetHandle(), ref)
		if err == nil && st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED {
			err = fmt.Errorf("commit: %s", st.GetState())
		}
		done <- err
	}()
	// Once the Commit waits for the held write, a new one is refused
	// (until then it is stored, and then adopted).
	var status int
	var r uploadcap.Refusal
	for {
		status, r = gatewayPut(t, n, cred.Msg.GetToken(), dir+"/late", "late")
		if status != http.StatusOK || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status != http.StatusForbidden || r.Class != uploadcap.NotBegun || !strings.Contains(r.Error, "being frozen") {
		t.Fatalf("a write while the Commit waits: %d %+v", status, r)
	}
	if f := frozen.Load(); f != 0 {
		t.Fatalf("the manifest froze (event %d) while a gateway write was in flight", f)
	}
	free()
	if s := <-held; s != http.StatusOK {
		t.Fatalf("the held write: %d", s)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f, rel := frozen.Load(), released.Load(); f == 0 || f < rel {
		t.Fatalf("freeze at event %d, held write released at event %d", f, rel)
	}
}
