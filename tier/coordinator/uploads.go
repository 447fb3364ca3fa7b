package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/uploadcap"
)

// Defaults of the upload gateway (BulkLoadConfig).
const (
	DefaultUploadCredentialTTL = 15 * time.Minute
	DefaultMaxUploadBytes      = 8 << 30
	DefaultUploadConcurrency   = 8
	DefaultSignedUploadTTL     = 5 * time.Minute
	// MaxSignedUploadTTL bounds BulkLoadConfig.SignedUploadTTL: a signed
	// upload cannot be revoked, so it stays short.
	MaxSignedUploadTTL = time.Hour
)

// UploadStore is what the upload gateway needs of the object store on top
// of BulkObjectStore: storing a local file write-if-absent (an identical
// object is adopted, a different one is objstore.ErrConflict) whose digest
// the gateway computed while receiving it, so that a store that links the
// file need not read it again. *objstore.Store satisfies it; without it the
// gateway is unavailable.
type UploadStore interface {
	PutFileStamped(ctx context.Context, key, path string, size int64, sha string, stamp objstore.FileStamp) (objstore.Object, error)
}

var _ UploadStore = (*objstore.Store)(nil)

// UploadSigner is what signed uploads need of the object store: a PUT of
// one object of known size and SHA-256, write-if-absent, that a holder of
// no store credentials can send (an existing object is adopted or a
// conflict instead); errors.ErrUnsupported where the store signs none.
// *objstore.Store satisfies it.
type UploadSigner interface {
	SignPut(ctx context.Context, key string, size int64, sha string, ttl time.Duration) (objstore.SignedPut, objstore.Object, error)
}

var _ UploadSigner = (*objstore.Store)(nil)

const uploadMetadataSuffix = "/" + snapshot.MetadataFileName

// uploadGateway holds the gateway's parts.
type uploadGateway struct {
	signer  *uploadcap.Signer
	store   UploadStore  // nil: no gateway
	presign UploadSigner // nil: no signed uploads
	sem     chan struct{}

	mu   sync.Mutex
	txns map[string]*txnWrites // transactions with writes in flight or closed
}

// txnWrites is one transaction's gateway writes in flight (stores,
// deletes, signings), and whether the gateway closed to it because a
// Commit is freezing its manifest.
type txnWrites struct {
	n      int
	closed bool
	owner  any           // the runner that closed it
	idle   chan struct{} // closed when n drops to 0 after a close
}

// enter counts a write of txn in flight, or refuses it when a Commit
// closed the transaction to writes; call leave when it is done.
func (g *uploadGateway) enter(txn string) *uploadFail {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.txns[txn]
	if w == nil {
		w = &txnWrites{}
		g.txns[txn] = w
	}
	if w.closed {
		return failf(http.StatusForbidden, uploadcap.NotBegun, "transaction %s is committing: its manifest is being frozen", txn)
	}
	w.n++
	return nil
}

func (g *uploadGateway) leave(txn string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.txns[txn]
	w.n--
	switch {
	case w.n == 0 && w.closed:
		close(w.idle)
	case w.n == 0:
		delete(g.txns, txn)
	}
}

// closeAndDrain closes txn to gateway writes and waits until those in
// flight are done: a Commit calls it before it persists the manifest
// freeze, so that nothing the gateway stores or deletes changes what the
// validation then reads.
func (g *uploadGateway) closeAndDrain(ctx context.Context, txn string, owner any) error {
	g.mu.Lock()
	if err := ctx.Err(); err != nil {
		// The owner's term ended: its cleanup may have reopened txn
		// already, and a close now would outlive it (the same process's
		// next term would find the gateway closed to a transaction whose
		// manifest never froze). The context ends before that cleanup.
		g.mu.Unlock()
		return fmt.Errorf("closing the upload gateway to transaction %s: %w", txn, err)
	}
	w := g.txns[txn]
	if w == nil {
		w = &txnWrites{}
		g.txns[txn] = w
	}
	w.owner = owner
	if !w.closed {
		w.closed, w.idle = true, make(chan struct{})
		if w.n == 0 {
			close(w.idle)
		}
	}
	idle := w.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the upload gateway's writes of transaction %s: %w", txn, ctx.Err())
	}
}

// reopen forgets that owner closed txn (a recovered transaction whose
// manifest never froze, or a runner that ends): the gateway's view of the
// transaction decides again. Writes still in flight (a runner that ended
// while its freeze waited for them) keep counting, and the entry goes when
// the last leaves. A close by another runner of the same transaction (a
// later term's) stays.
func (g *uploadGateway) reopen(txn string, owner any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.txns[txn]
	if w == nil || !w.closed || w.owner != owner {
		return
	}
	if w.n == 0 {
		delete(g.txns, txn)
		return
	}
	w.closed, w.owner, w.idle = false, nil, nil
}

func newUploadGateway(cfg BulkLoadConfig, objects ObjectStore, key []byte) (*uploadGateway, error) {
	var (
		s   *uploadcap.Signer
		err error
	)
	if key == nil {
		s, err = uploadcap.NewRandomSigner()
	} else {
		s, err = uploadcap.NewSigner(key)
	}
	if err != nil {
		return nil, fmt.Errorf("coordinator: upload gateway: %w", err)
	}
	g := &uploadGateway{signer: s, sem: make(chan struct{}, cfg.UploadConcurrency), txns: map[string]*txnWrites{}}
	g.store, _ = objects.(UploadStore)
	if cfg.SignedUploadTTL > 0 {
		g.presign, _ = objects.(UploadSigner)
	}
	return g, nil
}

// GetUploadCredentials mints a capability for a BEGUN transaction.
func (s *bulkService) GetUploadCredentials(ctx context.Context, req *connect.Request[tierv1.GetUploadCredentialsRequest]) (_ *connect.Response[tierv1.GetUploadCredentialsResponse], err error) {
	defer func() { s.count("get_upload_credentials", err) }()
	c := s.c
	mgr, err := s.manager(ctx)
	if err != nil {
		return nil, err
	}
	if c.uploads.store == nil {
		return nil, unavailable("bulk load: the coordinator's object store cannot serve the upload gateway")
	}
	r, err := mgr.lookup(ctx, req.Msg.GetHandle())
	if err != nil {
		return nil, bulkError(err, nil)
	}
	v := r.view()
	if err := c.allowed(ctx, v.rec.Target); err != nil {
		return nil, err
	}
	switch {
	case v.rec.State != bulkload.Begun:
		return nil, bulkError(fmt.Errorf("%w: upload credentials need a BEGUN transaction (%s)", bulkload.ErrInvalidState, v.rec.State), &v)
	case v.rec.Aborting():
		return nil, bulkError(fmt.Errorf("%w: transaction %s is being aborted", bulkload.ErrInvalidState, v.rec.TxnID), &v)
	case v.rec.Manifest != nil:
		return nil, bulkError(fmt.Errorf("%w: transaction %s is committing: its manifest is frozen", bulkload.ErrInvalidState, v.rec.TxnID), &v)
	case v.info == nil:
		// Begin has not completed, or a new active coordinator is still
		// recovering the transaction.
		return nil, bulkError(fmt.Errorf("%w: transaction %s is not ready for uploads yet (phase %s): retry", bulkload.ErrUnavailable, v.rec.TxnID, v.phase), &v)
	}
	var buckets []int // nil: every bucket and the manifest
	if bs := req.Msg.GetBuckets(); len(bs) > 0 {
		seen := make([]bool, v.rec.Buckets)
		for _, b := range bs {
			if b < 0 || int(b) >= v.rec.Buckets || seen[b] {
				return nil, bulkError(fmt.Errorf("%w: upload credentials of %d buckets: bucket %d is repeated or not in 0..%d",
					bulkload.ErrInvalidRequest, len(bs), b, v.rec.Buckets-1), &v)
			}
			seen[b] = true
			buckets = append(buckets, int(b))
		}
		slices.Sort(buckets)
	}
	now := c.clock.Now()
	exp := now.Add(c.cfg.BulkLoad.UploadCredentialTTL)
	if dl := v.info.BuildDeadline; dl.Before(exp) {
		exp = dl
	}
	exp = exp.Truncate(time.Millisecond)
	tok, err := c.uploads.signer.Mint(uploadcap.Capability{TxnID: v.rec.TxnID, Expires: exp, Buckets: buckets}, now)
	if err != nil {
		// The build deadline has passed: the transaction is about to be
		// aborted.
		return nil, bulkError(fmt.Errorf("%w: %w", bulkload.ErrDeadlineExceeded, err), &v)
	}
	return connect.NewResponse(&tierv1.GetUploadCredentialsResponse{
		Token: tok.Reveal(), ExpiresMs: exp.UnixMilli(), UploadPath: uploadcap.Path,
	}), nil
}

// uploadFail is a failed gateway request.
type uploadFail struct {
	status int
	class  string
	msg    string
}

func (f *uploadFail) Error() string { return f.msg }

func failf(status int, class, format string, args ...any) *uploadFail {
	return &uploadFail{status: status, class: class, msg: "coordinator: upload gateway: " + fmt.Sprintf(format, args...)}
}

// serveUpload is the upload gateway: PUT writes an object write-if-absent
// (POST signs such a write straight to the store), of the transaction the
// request's capability names and only while it is BEGUN. It deletes
// nothing: a delete cannot be fenced, and one a deposed coordinator still
// had in flight could land after its successor validated the manifest
// (a _METADATA gone, or replaced by a later write-if-absent).
func (c *Coordinator) serveUpload(w http.ResponseWriter, r *http.Request) {
	op := strings.ToLower(r.Method)
	var (
		res  any // the answer: a *uploadcap.Result or *uploadcap.Signed
		fail *uploadFail
	)
	switch r.Method {
	case http.MethodPut:
		var put *uploadcap.Result
		if put, fail = c.upload(r); put != nil {
			c.m.bulk.uploadBytes.Add(float64(put.Size))
			res = put
		}
	case http.MethodPost:
		op = "sign"
		var signed *uploadcap.Signed
		if signed, fail = c.sign(r); signed != nil {
			res = signed
		}
	default:
		op = "other"
		w.Header().Set("Allow", "PUT, POST")
		fail = failf(http.StatusMethodNotAllowed, uploadcap.BadRequest, "method %s (want PUT or POST)", r.Method)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	result := "ok"
	if fail != nil {
		result = fail.class
		c.log.Debug("upload gateway refused a request", "method", r.Method, "uri", r.URL.Query().Get("uri"), "class", fail.class, "err", fail.msg)
		w.WriteHeader(fail.status)
		_ = json.NewEncoder(w).Encode(uploadcap.Refusal{Error: fail.msg, Class: fail.class})
	} else if res != nil {
		_ = json.NewEncoder(w).Encode(res)
	} else {
		w.WriteHeader(http.StatusNoContent)
	}
	c.m.bulk.uploads.WithLabelValues(op, result).Inc()
}

// authorizeUpload checks the request's capability and returns the object
// key of its uri, the key's URI and the transaction's frozen facts.
func (c *Coordinator) authorizeUpload(r *http.Request) (key, uri string, info *bulkload.TargetInfo, capa uploadcap.Capability, fail *uploadFail) {
	q := r.URL.Query()
	if len(q) != 1 || len(q["uri"]) != 1 {
		return "", "", nil, capa, failf(http.StatusBadRequest, uploadcap.BadRequest, "want exactly one query parameter, uri")
	}
	uri = q.Get("uri")
	auth := r.Header.Values("Authorization")
	tok, ok := "", len(auth) == 1
	if ok {
		tok, ok = strings.CutPrefix(auth[0], "Bearer ")
	}
	if !ok {
		return "", "", nil, capa, failf(http.StatusUnauthorized, uploadcap.Unauthorized, "want one Authorization: Bearer header with an upload capability")
	}
	capa, err := c.uploads.signer.Verify(uploadcap.Token(tok), c.clock.Now())
	switch {
	case errors.Is(err, uploadcap.ErrExpired):
		return "", "", nil, capa, failf(http.StatusUnauthorized, uploadcap.Expired, "%v", err)
	case errors.Is(err, uploadcap.ErrUnknownKey):
		return "", "", nil, capa, failf(http.StatusUnauthorized, uploadcap.UnknownKey, "%v", err)
	case err != nil:
		return "", "", nil, capa, failf(http.StatusUnauthorized, uploadcap.Unauthorized, "%v", err)
	}
	t, err := c.leading(r.Context())
	if err != nil {
		return "", "", nil, capa, failf(http.StatusServiceUnavailable, uploadcap.NotLeader, "this coordinator is not the active one")
	}
	if c.bulkObjects == nil || c.uploads.store == nil {
		return "", "", nil, capa, failf(http.StatusServiceUnavailable, uploadcap.StoreRefused, "the coordinator's object store cannot serve the upload gateway")
	}
	if err := t.bulk.awaitReady(r.Context()); err != nil {
		return "", "", nil, capa, failf(http.StatusServiceUnavailable, uploadcap.NotLeader, "transactions not loaded yet: %v", err)
	}
	run := t.bulk.runner(capa.TxnID)
	if run == nil {
		return "", "", nil, capa, failf(http.StatusForbidden, uploadcap.NotBegun, "transaction %s is unknown", capa.TxnID)
	}
	v := run.view()
	if fail := writable(v); fail != nil {
		return "", "", nil, capa, fail
	}
	key, err = c.bulkObjects.Key(uri)
	if err != nil {
		return "", "", nil, capa, failf(http.StatusForbidden, uploadcap.OutOfScope, "%v", err)
	}
	return key, uri, v.info, capa, nil
}

// writable says whether a transaction takes uploads: BEGUN and not being
// aborted, its fence ready and its manifest not yet frozen (a Commit has not begun: what it
// validates must not change under it).
func writable(v runnerView) *uploadFail {
	switch {
	case v.rec.State != bulkload.Begun:
		return failf(http.StatusForbidden, uploadcap.NotBegun, "transaction %s is %s, not BEGUN", v.rec.TxnID, v.rec.State)
	case v.rec.Aborting():
		return failf(http.StatusForbidden, uploadcap.NotBegun, "transaction %s is being aborted", v.rec.TxnID)
	case v.rec.Manifest != nil:
		return failf(http.StatusForbidden, uploadcap.NotBegun, "transaction %s is committing: its manifest is frozen", v.rec.TxnID)
	case v.info == nil:
		return failf(http.StatusServiceUnavailable, uploadcap.Transient, "transaction %s is not ready for uploads yet (phase %s)", v.rec.TxnID, v.phase)
	}
	return nil
}

// stillWritable checks the transaction again after a body was received,
// just before it is stored.
func (c *Coordinator) stillWritable(ctx context.Context, txn string) *uploadFail {
	t, err := c.leading(ctx)
	if err != nil {
		return failf(http.StatusServiceUnavailable, uploadcap.NotLeader, "this coordinator stopped leading")
	}
	run := t.bulk.runner(txn)
	if run == nil {
		return failf(http.StatusForbidden, uploadcap.NotBegun, "transaction %s is gone", txn)
	}
	return writable(run.view())
}

// inSnapshotDir reports whether uri names an object directly in the
// snapshot directory of one of info's buckets that capa allows (uri is a
// valid key's URI: no empty, "." or ".." segment).
func inSnapshotDir(info *bulkload.TargetInfo, capa uploadcap.Capability, uri string) bool {
	i := strings.LastIndexByte(uri, '/')
	if i <= 0 {
		return false
	}
	b := slices.Index(info.SnapshotDirs, uri[:i])
	return b >= 0 && capa.AllowsBucket(b)
}

// authorizeObject authorizes a PUT or POST of one object: the
// capability's, in its scope (a file directly in an allowed bucket's
// snapshot directory, or the manifest), of size bytes within the limit,
// with a well-formed SHA-256.
func (c *Coordinator) authorizeObject(r *http.Request, size int64) (key string, info *bulkload.TargetInfo, capa uploadcap.Capability, sha string, fail *uploadFail) {
	key, uri, info, capa, fail := c.authorizeUpload(r)
	if fail != nil {
		return "", nil, capa, "", fail
	}
	if !(uri == info.ManifestPath && capa.AllowsManifest()) && !inSnapshotDir(info, capa, uri) {
		return "", nil, capa, "", failf(http.StatusForbidden, uploadcap.OutOfScope, "%s is not in the snapshot directories or the manifest path the capability allows of transaction %s", uri, info.Handle.TxnID)
	}
	switch {
	case size < 0:
		return "", nil, capa, "", failf(http.StatusLengthRequired, uploadcap.BadRequest, "the object's size is required")
	case size > c.cfg.BulkLoad.MaxUploadBytes:
		return "", nil, capa, "", failf(http.StatusRequestEntityTooLarge, uploadcap.TooLarge, "%d bytes exceed the gateway's limit of %d", size, c.cfg.BulkLoad.MaxUploadBytes)
	}
	sha = r.Header.Get(uploadcap.HeaderSHA256)
	if len(sha) != 64 || strings.Trim(sha, "0123456789abcdef") != "" {
		return "", nil, capa, "", failf(http.StatusBadRequest, uploadcap.BadRequest, "%s must be 64 lowercase hex digits", uploadcap.HeaderSHA256)
	}
	return key, info, capa, sha, nil
}

// sign answers a POST: a signed PUT of the object straight to the store,
// or Adopted when the key already holds its bytes. A signed PUT cannot be
// revoked when the transaction leaves BEGUN, so it is short-lived
// (SignedUploadTTL, never past the capability) and signs the size, the
// SHA-256 and write-if-absent: the most it can ever do is create that one
// object with exactly the bytes declared here, which a Commit validates
// like any other.
func (c *Coordinator) sign(r *http.Request) (*uploadcap.Signed, *uploadFail) {
	if c.uploads.presign == nil {
		return nil, failf(http.StatusNotImplemented, uploadcap.Unsupported, "this gateway signs no uploads: send the object with PUT")
	}
	if r.ContentLength > 0 {
		return nil, failf(http.StatusBadRequest, uploadcap.BadRequest, "a POST has no body")
	}
	hl := r.Header.Values(uploadcap.HeaderLength)
	size := int64(-1)
	if len(hl) == 1 {
		n, err := strconv.ParseInt(hl[0], 10, 64)
		if err != nil || n < 0 || strconv.FormatInt(n, 10) != hl[0] {
			return nil, failf(http.StatusBadRequest, uploadcap.BadRequest, "%s %q is not a size in bytes", uploadcap.HeaderLength, hl[0])
		}
		size = n
	}
	key, info, capa, sha, fail := c.authorizeObject(r, size)
	if fail != nil {
		return nil, fail
	}
	if size > objstore.MaxSignedPutSize {
		return nil, failf(http.StatusNotImplemented, uploadcap.Unsupported, "%d bytes exceed the largest signed upload (%d): send the object with PUT", size, int64(objstore.MaxSignedPutSize))
	}
	ttl := min(c.cfg.BulkLoad.SignedUploadTTL, capa.Expires.Sub(c.clock.Now()).Truncate(time.Second))
	if ttl < time.Second {
		return nil, failf(http.StatusUnauthorized, uploadcap.Expired, "the capability expires in less than a second")
	}
	if fail := c.uploads.enter(info.Handle.TxnID); fail != nil {
		return nil, fail
	}
	defer c.uploads.leave(info.Handle.TxnID)
	sp, obj, err := c.uploads.presign.SignPut(r.Context(), key, size, sha, ttl)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil, failf(http.StatusNotImplemented, uploadcap.Unsupported, "%v", err)
	case err != nil:
		return nil, storeFail(err)
	case obj.Adopted:
		return &uploadcap.Signed{Adopted: true}, nil
	}
	if fail := c.stillWritable(r.Context(), info.Handle.TxnID); fail != nil {
		return nil, fail
	}
	h := make(map[string]string, len(sp.Header))
	for k := range sp.Header {
		h[k] = sp.Header.Get(k)
	}
	return &uploadcap.Signed{URL: uploadcap.SignedURL(sp.URL), Header: h, ExpiresMs: sp.Expires.UnixMilli()}, nil
}

func (c *Coordinator) upload(r *http.Request) (*uploadcap.Result, *uploadFail) {
	key, info, _, sha, fail := c.authorizeObject(r, r.ContentLength)
	if fail != nil {
		return nil, fail
	}
	size := r.ContentLength
	select {
	case c.uploads.sem <- struct{}{}:
		defer func() { <-c.uploads.sem }()
	case <-r.Context().Done():
		return nil, failf(http.StatusServiceUnavailable, uploadcap.Transient, "waiting for an upload slot: %v", r.Context().Err())
	}
	tmp, fail := receive(r.Body, c.cfg.BulkLoad.UploadTempDir, size, sha)
	if fail != nil {
		return nil, fail
	}
	defer func() { _ = os.Remove(tmp) }()
	// The stamp of the received file lets a linking store trust the digest
	// computed while receiving instead of hashing the file again (the zero
	// stamp, where stamps are not available, makes it verify).
	stamp, err := objstore.StampFile(tmp)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return nil, failf(http.StatusServiceUnavailable, uploadcap.Transient, "temporary file: %v", err)
	}
	if fail := c.uploads.enter(info.Handle.TxnID); fail != nil {
		return nil, fail
	}
	defer c.uploads.leave(info.Handle.TxnID)
	if fail := c.stillWritable(r.Context(), info.Handle.TxnID); fail != nil {
		return nil, fail
	}
	obj, err := c.uploads.store.PutFileStamped(r.Context(), key, tmp, size, sha, stamp)
	if err != nil {
		return nil, storeFail(err)
	}
	return &uploadcap.Result{Size: obj.Size, SHA256: obj.SHA256, Adopted: obj.Adopted}, nil
}

// receive writes body to a temporary file in dir and checks its size and
// SHA-256 before anything reaches the store.
func receive(body io.Reader, dir string, size int64, sha string) (_ string, fail *uploadFail) {
	f, err := os.CreateTemp(dir, "thaw-upload-*")
	if err != nil {
		return "", failf(http.StatusServiceUnavailable, uploadcap.Transient, "temporary file: %v", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && fail == nil {
			fail = failf(http.StatusServiceUnavailable, uploadcap.Transient, "temporary file: %v", cerr)
		}
		if fail != nil {
			_ = os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(body, size+1))
	switch {
	case err != nil:
		return "", failf(http.StatusBadRequest, uploadcap.Transient, "reading the body after %d bytes: %v", n, err)
	case n != size:
		return "", failf(http.StatusBadRequest, uploadcap.Integrity, "body of %d bytes, Content-Length %d", n, size)
	case hex.EncodeToString(h.Sum(nil)) != sha:
		return "", failf(http.StatusBadRequest, uploadcap.Integrity, "body's SHA-256 %x differs from %s %s", h.Sum(nil), uploadcap.HeaderSHA256, sha)
	}
	return f.Name(), nil
}

// storeFail maps an object store error to the gateway's answer.
func storeFail(err error) *uploadFail {
	switch {
	case errors.Is(err, objstore.ErrConflict):
		return failf(http.StatusConflict, uploadcap.Conflict, "%v", err)
	case errors.Is(err, objstore.ErrNotFound):
		return failf(http.StatusNotFound, uploadcap.NotFound, "%v", err)
	case errors.Is(err, objstore.ErrIntegrity):
		return failf(http.StatusBadRequest, uploadcap.Integrity, "%v", err)
	case errors.Is(err, objstore.ErrNoSpace):
		return failf(http.StatusInsufficientStorage, uploadcap.NoSpace, "%v", err)
	case objstore.IsTransient(err), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return failf(http.StatusServiceUnavailable, uploadcap.Transient, "%v", err)
	}
	return failf(http.StatusBadGateway, uploadcap.StoreRefused, "%v", err)
}
