package bulkloadclient

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/coordlist"
	"github.com/thawdb/thaw/internal/tlsfail"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/uploadcap"
)

// ErrNotBegun reports a ScopedStore write refused because the transaction
// is no longer BEGUN (committing, committed, aborted or gone): the
// coordinator mints no credentials for it and its gateway takes no more
// objects of it. It comes with objstore.ErrPermission.
var ErrNotBegun = errors.New("bulkloadclient: the transaction is not BEGUN")

// Credentials is a scoped, temporary write credential of one transaction:
// a capability the upload gateway of the coordinator that minted it
// accepts for writing the transaction's snapshot files and manifest
// (write-if-absent; it deletes nothing) until Expires, while the transaction is
// BEGUN. Token is the credential; it prints as "[REDACTED]" and refuses to
// be marshalled. Credentials are process-local: never put them into a
// build context, a bucket result or anything else that is stored, sent or
// logged.
type Credentials struct {
	Token     uploadcap.Token
	Expires   time.Time
	UploadURL string // the gateway: the minting coordinator's URL + its upload path
}

// UploadCredentials asks the active coordinator for the write credential
// of a BEGUN transaction (GetUploadCredentials): of the snapshot
// directories of the given buckets, or, with none given, of every bucket
// and the manifest. Errors wrap the bulkload sentinels, as Status's do.
func (c *Client) UploadCredentials(ctx context.Context, h bulkload.Handle, buckets ...int) (Credentials, error) {
	bs := make([]int32, len(buckets))
	for i, b := range buckets {
		if b < 0 || b > math.MaxInt32 {
			return Credentials{}, fmt.Errorf("bulkloadclient: upload credentials: %w: bucket %d", bulkload.ErrInvalidRequest, b)
		}
		bs[i] = int32(b)
	}
	var (
		resp *tierv1.GetUploadCredentialsResponse
		at   string
	)
	_, err := coordlist.Route(ctx, c.coords, true, func(err error) bool { return sentinelOf(err) == bulkload.ErrUnavailable },
		c.log, "bulkloadclient", func(co *coordinator) error {
			r, err := co.Svc.GetUploadCredentials(ctx, connect.NewRequest(&tierv1.GetUploadCredentialsRequest{Handle: handleProto(h), Buckets: bs}))
			if err == nil {
				resp, at = r.Msg, co.URL
			}
			return err
		})
	if err != nil {
		return Credentials{}, mapErr(ctx, "upload credentials", err)
	}
	exp := time.UnixMilli(resp.GetExpiresMs()).UTC()
	if resp.GetToken() == "" || resp.GetUploadPath() == "" || resp.GetExpiresMs() <= 0 {
		return Credentials{}, fmt.Errorf("bulkloadclient: upload credentials: %w: an answer without token, expiry or upload path", bulkload.ErrUnavailable)
	}
	return Credentials{Token: uploadcap.Token(resp.GetToken()), Expires: exp, UploadURL: at + resp.GetUploadPath()}, nil
}

// ScopedStore writes one transaction's snapshot files and manifest
// through the upload gateway of the active coordinator, with credentials
// it asks for (UploadCredentials) when it has none, when they are about to
// expire (RefreshBefore), when the gateway answers that they expired or
// that another coordinator minted them, and when no gateway answered (the
// coordinator that minted them may be gone). Where the coordinator's store
// signs uploads (S3), each object goes straight to the store instead, with
// a PUT the gateway signed for exactly that object (its key, size and
// SHA-256, write-if-absent); elsewhere the first answer says so and every
// object goes through the gateway. A builder using it holds no object
// store credentials and can write nothing but the transaction's objects.
// Give it to a session as SessionOptions.Store; Commit writes the manifest
// through one when the client was made WithScopedUploads.
//
// Errors wrap objstore's classes (objstore.IsTransient for what may pass:
// an unreachable gateway, a transient store failure, a coordinator that is
// not available), so a builder treats them as it treats a store's.
// Safe for concurrent use.
type ScopedStore struct {
	c       *Client
	base    string // the build context's remote data dir
	h       bulkload.Handle
	buckets []int // nil: every bucket and the manifest

	// gatewayOnly: the gateway signs no uploads, so every object goes
	// through it.
	gatewayOnly atomic.Bool

	mu struct {
		sync.Mutex
		creds    Credentials
		obtained time.Time
	}
}

// CredentialsWait bounds how long a ScopedStore waits for credentials
// while the coordinator is not available (an election, a transaction
// being recovered by a new active coordinator).
const CredentialsWait = 30 * time.Second

// RefreshBefore is how long before their expiry a ScopedStore replaces
// its credentials (halfway through their lifetime when that is shorter
// than twice RefreshBefore).
const RefreshBefore = time.Minute

var _ snapshotbuild.Store = (*ScopedStore)(nil)

// ScopedStore returns a store of bc's transaction that writes through the
// upload gateway, with credentials of the given buckets only (pass a
// session's SessionOptions.Buckets), or, with none given, of every bucket
// and the manifest.
func (c *Client) ScopedStore(bc *BuildContext, buckets ...int) *ScopedStore {
	return &ScopedStore{c: c, base: bc.remoteDataDir, h: bc.handle, buckets: slices.Clone(buckets)}
}

// Key is the key of uri under the build context's remote data dir.
func (s *ScopedStore) Key(uri string) (string, error) { return objstore.KeyUnder(s.base, uri) }

// PutIfAbsent uploads src under key write-if-absent (an identical object
// is adopted, another is objstore.ErrConflict). It reads src twice: once
// for its size and SHA-256, once to send it.
func (s *ScopedStore) PutIfAbsent(ctx context.Context, key string, src objstore.Source) (objstore.Object, error) {
	size, sum, err := objstore.Digest(src)
	if err != nil {
		return objstore.Object{}, fmt.Errorf("bulkloadclient: upload %s: %w", key, err)
	}
	return s.put(ctx, key, size, sum, src.Open)
}

// PutFileStamped uploads the local file at path of the given size and
// SHA-256 (which the gateway checks before storing anything); the stamp
// is not needed.
func (s *ScopedStore) PutFileStamped(ctx context.Context, key, path string, size int64, sum string, _ objstore.FileStamp) (objstore.Object, error) {
	return s.put(ctx, key, size, sum, func() (io.ReadCloser, error) { return os.Open(path) })
}

func (s *ScopedStore) put(ctx context.Context, key string, size int64, sum string, open func() (io.ReadCloser, error)) (objstore.Object, error) {
	// Objects larger than one S3 PUT takes go through the gateway.
	if !s.gatewayOnly.Load() && size <= objstore.MaxSignedPutSize {
		obj, err := s.putSigned(ctx, key, size, sum, open)
		if !errors.Is(err, errUnsupported) {
			return obj, err
		}
		// The store signs no uploads (or the coordinator was told not
		// to): everything goes through the gateway from now on.
		s.gatewayOnly.Store(true)
	}
	b, err := s.do(ctx, http.MethodPut, key, size, sum, open)
	if err != nil {
		return objstore.Object{}, err
	}
	var res uploadcap.Result
	if err := decodeStrict(b, &res); err != nil {
		return objstore.Object{}, fmt.Errorf("bulkloadclient: upload %s: %w: the gateway's answer: %w", key, objstore.ErrTransient, err)
	}
	if res.Size != size || res.SHA256 != sum {
		return objstore.Object{}, fmt.Errorf("bulkloadclient: upload %s: %w: the gateway stored %d bytes sha256 %s, sent %d bytes sha256 %s",
			key, objstore.ErrIntegrity, res.Size, res.SHA256, size, sum)
	}
	return objstore.Object{Key: key, Size: size, SHA256: sum, Adopted: res.Adopted}, nil
}

// credentials returns valid credentials, asking for new ones when the held
// ones are stale (or the same as stale, after the gateway refused them).
func (s *ScopedStore) credentials(ctx context.Context, stale uploadcap.Token) (Credentials, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cr := s.mu.creds
	// Renew RefreshBefore ahead of the expiry, or halfway through a
	// shorter lifetime (one capped by a near build deadline).
	if cr.Token != "" && cr.Token != stale && time.Until(cr.Expires) > min(RefreshBefore, cr.Expires.Sub(s.mu.obtained)/2) {
		return cr, nil
	}
	obtained := time.Now()
	cr, err := s.c.UploadCredentials(ctx, s.h, s.buckets...)
	// A coordinator that is not available (an election, a new active
	// coordinator recovering the transaction) is waited for, up to
	// CredentialsWait.
	for pause, start := 100*time.Millisecond, time.Now(); err != nil && IsRetriable(err) && time.Since(start)+pause < CredentialsWait; pause = min(2*pause, 2*time.Second) {
		s.c.log.Debug("bulkloadclient: waiting for upload credentials", "txn", s.h.TxnID, "err", err)
		select {
		case <-ctx.Done():
			return Credentials{}, fmt.Errorf("%w (%w)", ctx.Err(), err)
		case <-time.After(pause):
		}
		cr, err = s.c.UploadCredentials(ctx, s.h, s.buckets...)
	}
	if err != nil {
		switch {
		case IsRetriable(err):
			return Credentials{}, fmt.Errorf("%w: %w", objstore.ErrTransient, err)
		case errors.Is(err, bulkload.ErrInvalidState), errors.Is(err, bulkload.ErrNotFound):
			return Credentials{}, fmt.Errorf("%w: %w: %w", objstore.ErrPermission, ErrNotBegun, err)
		}
		return Credentials{}, fmt.Errorf("%w: %w", objstore.ErrPermission, err)
	}
	s.mu.creds, s.mu.obtained = cr, obtained
	return cr, nil
}

// errUnsupported is the gateway's refusal to sign an upload.
var errUnsupported = errors.New("the upload gateway signs no uploads")

// putSigned asks the gateway for a signed upload of the object and sends
// it straight to the store; errUnsupported when the gateway signs none.
// The signed URL is a credential: it never enters an error or a log.
func (s *ScopedStore) putSigned(ctx context.Context, key string, size int64, sum string, open func() (io.ReadCloser, error)) (objstore.Object, error) {
	obj := objstore.Object{Key: key, Size: size, SHA256: sum}
	for attempt := 1; ; attempt++ {
		b, err := s.do(ctx, http.MethodPost, key, size, sum, nil)
		if err != nil {
			return objstore.Object{}, err
		}
		var signed uploadcap.Signed
		if err := decodeStrict(b, &signed); err != nil {
			return objstore.Object{}, fmt.Errorf("bulkloadclient: upload %s: %w: the gateway's answer: %w", key, objstore.ErrTransient, err)
		}
		if signed.Adopted {
			obj.Adopted = true
			return obj, nil
		}
		status, code, err := s.sendSigned(ctx, signed, size, open)
		switch {
		case err != nil:
			return objstore.Object{}, fmt.Errorf("bulkloadclient: upload %s to the store: %w", key, err)
		case status/100 == 2:
			return obj, nil
		case (status == http.StatusPreconditionFailed || status == http.StatusForbidden) && attempt == 1:
			// The key was taken meanwhile (asking again answers adopted or
			// a conflict), or the signature expired on the way.
			continue
		}
		class := objstore.ErrInvalidRequest
		switch {
		case code == "BadDigest" || code == "XAmzContentChecksumMismatch" || code == "IncompleteBody":
			class = objstore.ErrIntegrity
		case status == http.StatusForbidden:
			class = objstore.ErrPermission
		case status == http.StatusPreconditionFailed:
			class = objstore.ErrConflict
		case status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout:
			class = objstore.ErrTransient
		}
		return objstore.Object{}, fmt.Errorf("bulkloadclient: upload %s to the store: %w: the store answered %d %s", key, class, status, code)
	}
}

// sendSigned sends the object with a signed PUT and returns the store's
// status and S3 error code (never its message, which may quote the
// signature).
func (s *ScopedStore) sendSigned(ctx context.Context, signed uploadcap.Signed, size int64, open func() (io.ReadCloser, error)) (int, string, error) {
	var body io.ReadCloser = http.NoBody
	if size > 0 {
		rc, err := open()
		if err != nil {
			return 0, "", fmt.Errorf("open source: %w", err)
		}
		body = rc
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, signed.URL.Reveal(), body)
	if err != nil {
		_ = body.Close()
		return 0, "", fmt.Errorf("%w: the signed upload is not a URL", objstore.ErrInvalidRequest)
	}
	for k, v := range signed.Header {
		req.Header.Set(k, v)
	}
	req.ContentLength = size
	resp, err := s.c.storeHC.Do(req)
	if err != nil {
		// A *url.Error quotes the URL, signature and all: keep only its
		// cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if tlsfail.Untrusted(err) {
			// Repeating cannot help until the configuration changes.
			return 0, "", fmt.Errorf("%w: the object store's TLS certificate is not trusted (signed uploads go straight to the store, "+
				"trusting the system's CA roots; bulkloadclient.WithStoreHTTPClient sets another client): %w", objstore.ErrPermission, err)
		}
		return 0, "", fmt.Errorf("%w: %w", objstore.ErrTransient, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Code string `xml:"Code"`
	}
	_ = xml.Unmarshal(b, &e)
	return resp.StatusCode, e.Code, nil
}

// decodeStrict decodes one JSON answer of the gateway, refusing unknown
// members.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// do sends one gateway request, asking for new credentials and sending it
// once more when the gateway refused the credentials as stale or gave no
// answer of its own (a transport failure, a server error without a
// refusal: the same write again is harmless, every one write-if-absent).
// It returns the answer's body.
func (s *ScopedStore) do(ctx context.Context, method, key string, size int64, sum string, open func() (io.ReadCloser, error)) ([]byte, error) {
	const op = "upload"
	uri := s.base + "/" + key
	if _, err := s.Key(uri); err != nil {
		return nil, fmt.Errorf("bulkloadclient: %s %s: %w", op, key, err)
	}
	var stale uploadcap.Token
	for attempt := 1; ; attempt++ {
		cr, err := s.credentials(ctx, stale)
		if err != nil {
			return nil, fmt.Errorf("bulkloadclient: %s %s: upload credentials: %w", op, uri, err)
		}
		res, class, err := s.send(ctx, cr, method, uri, size, sum, open)
		if err == nil {
			return res, nil
		}
		if class == uploadcap.Unsupported {
			return nil, errUnsupported
		}
		// A refusal that new credentials cure, or no answer of a gateway
		// at all (its coordinator may be gone: the credentials name its
		// address until they expire, while a new leader's gateway takes
		// the upload): new credentials, once.
		gone := class == "" && errors.Is(err, objstore.ErrTransient) && ctx.Err() == nil
		if !(uploadcap.Refresh(class) || gone) || attempt == 2 {
			return nil, fmt.Errorf("bulkloadclient: %s %s: %w", op, uri, err)
		}
		stale = cr.Token
	}
}

func (s *ScopedStore) send(ctx context.Context, cr Credentials, method, uri string, size int64, sum string, open func() (io.ReadCloser, error)) ([]byte, string, error) {
	var body io.ReadCloser = http.NoBody
	if open != nil && size > 0 { // net/http sends a body of length 0 chunked
		rc, err := open()
		if err != nil {
			return nil, "", fmt.Errorf("open source: %w", err)
		}
		body = rc
	}
	req, err := http.NewRequestWithContext(ctx, method, cr.UploadURL+"?uri="+url.QueryEscape(uri), body)
	if err != nil {
		_ = body.Close()
		return nil, "", fmt.Errorf("%w: %w", objstore.ErrInvalidRequest, err)
	}
	req.Header.Set("Authorization", "Bearer "+cr.Token.Reveal())
	switch method {
	case http.MethodPut:
		req.ContentLength = size
		req.Header.Set(uploadcap.HeaderSHA256, sum)
	case http.MethodPost:
		req.Header.Set(uploadcap.HeaderLength, strconv.FormatInt(size, 10))
		req.Header.Set(uploadcap.HeaderSHA256, sum)
	}
	resp, err := s.c.hc.Do(req)
	if err != nil {
		// Never the token: it travels in a header, and the URL holds
		// none.
		return nil, "", fmt.Errorf("%w: %w", objstore.ErrTransient, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, "", fmt.Errorf("%w: reading the gateway's answer: %w", objstore.ErrTransient, err)
	}
	if resp.StatusCode == http.StatusOK {
		return b, "", nil
	}
	var ue uploadcap.Refusal
	if err := json.Unmarshal(b, &ue); err != nil || ue.Class == "" {
		class := objstore.ErrInvalidRequest
		if resp.StatusCode >= 500 {
			class = objstore.ErrTransient
		}
		return nil, "", fmt.Errorf("%w: the gateway answered %s", class, resp.Status)
	}
	if ue.Class == uploadcap.NotBegun {
		return nil, ue.Class, fmt.Errorf("%w: %w: %s", objstore.ErrPermission, ErrNotBegun, ue.Error)
	}
	return nil, ue.Class, fmt.Errorf("%w: %s", uploadClass(ue.Class), ue.Error)
}

// uploadClass maps a gateway refusal to objstore's error classes.
func uploadClass(class string) error {
	switch class {
	case uploadcap.Conflict:
		return objstore.ErrConflict
	case uploadcap.NotFound:
		return objstore.ErrNotFound
	case uploadcap.Integrity:
		return objstore.ErrIntegrity
	case uploadcap.NoSpace:
		return objstore.ErrNoSpace
	case uploadcap.Transient, uploadcap.NotLeader, uploadcap.Expired, uploadcap.UnknownKey:
		return objstore.ErrTransient
	case uploadcap.Unauthorized, uploadcap.OutOfScope:
		return objstore.ErrPermission
	}
	return objstore.ErrInvalidRequest
}
