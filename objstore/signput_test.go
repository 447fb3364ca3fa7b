package objstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/testvgw"
)

// vgwStore starts versitygw and opens the store s3://lake/tier on it.
func vgwStore(t *testing.T) (*testvgw.Server, *Store) {
	t.Helper()
	srv := testvgw.Start(t)
	srv.Bucket(t, "lake")
	s, err := Open(t.Context(), srv.StoreURL("lake", "tier"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return srv, s
}

// signedSend sends body with a signed PUT, dropping the named header or
// replacing the URL's path when asked, and returns the status and the S3
// error code.
func signedSend(t *testing.T, sp SignedPut, body []byte, mod func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, sp.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range sp.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.ContentLength = int64(len(body))
	if mod != nil {
		mod(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	code := ""
	if i := bytes.Index(b, []byte("<Code>")); i >= 0 {
		if j := bytes.Index(b[i:], []byte("</Code>")); j >= 0 {
			code = string(b[i+6 : i+j])
		}
	}
	return resp.StatusCode, code
}

// TestSignPut checks, against an S3 server that verifies signatures
// (versitygw), that a signed PUT writes exactly the declared object and
// nothing else: not twice, not other bytes, not another key, not without
// its headers, not after it expired; that an existing object is adopted
// or refused instead of signed; and that the credential never prints.
func TestSignPut(t *testing.T) {
	_, s := vgwStore(t)
	ctx := t.Context()

	body := []byte("the bytes of one snapshot file")
	other := bytes.ToUpper(body) // same length, other digest
	sum := sha(body)
	absent := func(key string) {
		t.Helper()
		if _, err := s.Stat(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: stat: %v, want not found", key, err)
		}
	}

	sp, obj, err := s.SignPut(ctx, "snap-1/a.sst", int64(len(body)), sum, time.Minute)
	if err != nil || obj.Adopted || sp.URL == "" {
		t.Fatalf("sign: %v %+v", err, obj)
	}
	for _, f := range []string{"%v", "%s", "%+v", "%#v", "%q"} {
		if out := fmt.Sprintf(f, sp); strings.Contains(out, "Signature") {
			t.Fatalf("%s prints the credential: %s", f, out)
		}
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "put", sp)
	if strings.Contains(logged.String(), "Signature") {
		t.Fatalf("slog prints the credential: %s", logged.String())
	}
	if b, err := json.Marshal(struct{ P SignedPut }{sp}); err == nil {
		t.Fatalf("json.Marshal of a signed PUT: %s", b)
	}

	// Refused before anything is stored: other bytes, a missing header
	// (each one is signed), a shorter body, another key.
	for name, tc := range map[string]struct {
		body []byte
		mod  func(*http.Request)
		code string
	}{
		"other bytes":       {other, nil, "BadDigest"},
		"no If-None-Match":  {body, func(r *http.Request) { r.Header.Del("If-None-Match") }, "SignatureDoesNotMatch"},
		"no checksum":       {body, func(r *http.Request) { r.Header.Del("X-Amz-Checksum-Sha256") }, "SignatureDoesNotMatch"},
		"a shorter body":    {body[:5], nil, "SignatureDoesNotMatch"},
		"another key":       {body, func(r *http.Request) { r.URL.Path = strings.Replace(r.URL.Path, "a.sst", "b.sst", 1) }, "SignatureDoesNotMatch"},
		"another directory": {body, func(r *http.Request) { r.URL.Path = strings.Replace(r.URL.Path, "snap-1", "snap-2", 1) }, "SignatureDoesNotMatch"},
	} {
		if status, code := signedSend(t, sp, tc.body, tc.mod); status < 400 || code != tc.code {
			t.Errorf("%s: %d %s, want %s", name, status, code, tc.code)
		}
	}
	absent("snap-1/a.sst")
	absent("snap-1/b.sst")
	absent("snap-2/a.sst")

	if status, code := signedSend(t, sp, body, nil); status != http.StatusOK {
		t.Fatalf("signed put: %d %s", status, code)
	}
	if got, err := s.Get(ctx, "snap-1/a.sst"); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("stored object: %q %v", got, err)
	}
	// Used again (even with the same bytes): the key is taken.
	if status, code := signedSend(t, sp, body, nil); status != http.StatusPreconditionFailed {
		t.Fatalf("second use: %d %s, want 412", status, code)
	}

	// An existing key is not signed: identical bytes are adopted, others
	// are a conflict.
	if sp2, obj, err := s.SignPut(ctx, "snap-1/a.sst", int64(len(body)), sum, time.Minute); err != nil || !obj.Adopted || sp2.URL != "" {
		t.Fatalf("sign an existing identical object: %v %+v", err, obj)
	}
	if _, _, err := s.SignPut(ctx, "snap-1/a.sst", int64(len(other)), sha(other), time.Minute); !errors.Is(err, ErrConflict) {
		t.Fatalf("sign over other bytes: %v, want ErrConflict", err)
	}

	// An expired signature stores nothing.
	late, _, err := s.SignPut(ctx, "snap-1/late.sst", int64(len(body)), sum, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	if status, code := signedSend(t, late, body, nil); status != http.StatusForbidden {
		t.Fatalf("expired: %d %s, want 403", status, code)
	}
	absent("snap-1/late.sst")

	// Requests it refuses to sign.
	for name, f := range map[string]func() error{
		"bad key":      func() error { _, _, err := s.SignPut(ctx, "../x", 1, sum, time.Minute); return err },
		"bad digest":   func() error { _, _, err := s.SignPut(ctx, "k", 1, strings.ToUpper(sum), time.Minute); return err },
		"negative":     func() error { _, _, err := s.SignPut(ctx, "k", -1, sum, time.Minute); return err },
		"too large":    func() error { _, _, err := s.SignPut(ctx, "k", MaxSignedPutSize+1, sum, time.Minute); return err },
		"no lifetime":  func() error { _, _, err := s.SignPut(ctx, "k", 1, sum, 0); return err },
		"too long ttl": func() error { _, _, err := s.SignPut(ctx, "k", 1, sum, MaxSignedPutTTL+time.Second); return err },
	} {
		if err := f(); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
}

// TestSignPutEscapedKey: a key holding a sequence gocloud escapes
// ("__0x41__", which a table named t__0x41__ puts in every path) is signed
// as the object the store reads: the signed PUT wrote the raw key, which
// the store listed as another name (".../tA-7/...") and never found, so
// the load could not commit, and a second signing answered 412, not
// adopted. Nor does a name standing for the escaped form reach it.
func TestSignPutEscapedKey(t *testing.T) {
	_, s := vgwStore(t)
	ctx := t.Context()
	body := []byte("escaped")
	sum := sha(body)
	const key = "db/t__0x41__-7/0/snap-1/a.sst"
	sp, obj, err := s.SignPut(ctx, key, int64(len(body)), sum, time.Minute)
	if err != nil || obj.Adopted {
		t.Fatalf("sign: %v %+v", err, obj)
	}
	if status, code := signedSend(t, sp, body, nil); status != http.StatusOK {
		t.Fatalf("signed put: %d %s", status, code)
	}
	if got, err := s.Get(ctx, key); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the store reads %s: %q, %v", key, got, err)
	}
	var listed []string
	for a, err := range s.List(ctx, "db/") {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, a.Key)
	}
	if !slices.Equal(listed, []string{key}) {
		t.Fatalf("listed %q, want %q", listed, key)
	}
	if _, obj, err := s.SignPut(ctx, key, int64(len(body)), sum, time.Minute); err != nil || !obj.Adopted {
		t.Fatalf("sign again: %v %+v, want adopted", err, obj)
	}
	// The name gocloud's escaped form would read as raw is another key.
	const twin = "db/t__0x5f___0x41__-7/0/snap-1/a.sst"
	sp, obj, err = s.SignPut(ctx, twin, int64(len(body)), sum, time.Minute)
	if err != nil || obj.Adopted {
		t.Fatalf("sign %s: %v %+v", twin, err, obj)
	}
	if status, code := signedSend(t, sp, body, nil); status != http.StatusOK {
		t.Fatalf("signed put of %s: %d %s", twin, status, code)
	}
	if _, err := s.Stat(ctx, twin); err != nil {
		t.Fatalf("stat %s: %v", twin, err)
	}
}

// TestVerifiedReadsSkipSDKChecksum: S3 keeps the SHA-256 checksum a signed
// PUT declared, and the AWS SDK checks it on a plain read; a read objstore
// verifies itself (OpenVerified, and so GetFile) leaves that check out, as
// it would hash every byte twice, and its own check still catches a
// changed object.
func TestVerifiedReadsSkipSDKChecksum(t *testing.T) {
	srv, s := vgwStore(t)
	ctx := t.Context()
	body := []byte("the bytes of one snapshot file")
	sp, _, err := s.SignPut(ctx, "a.sst", int64(len(body)), sha(body), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if status, code := signedSend(t, sp, body, nil); status != http.StatusOK {
		t.Fatalf("signed put: %d %s", status, code)
	}
	readAll := func(rc io.ReadCloser, err error) error {
		if err != nil {
			return err
		}
		_, err = io.ReadAll(rc)
		return errors.Join(err, rc.Close())
	}
	if err := readAll(s.OpenVerified(ctx, "a.sst", int64(len(body)), sha(body))); err != nil {
		t.Fatalf("verified read of the object: %v", err)
	}
	// The same size, other bytes, behind the server's back.
	if err := os.WriteFile(srv.ObjectPath("lake", "tier/a.sst"), bytes.ToUpper(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "a.sst"); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("plain read of a changed object: %v, want the SDK's checksum mismatch", err)
	}
	err = readAll(s.OpenVerified(ctx, "a.sst", int64(len(body)), sha(body)))
	if !errors.Is(err, ErrIntegrity) || strings.Contains(err.Error(), "checksum did not match") {
		t.Fatalf("verified read of a changed object: %v, want objstore's own ErrIntegrity", err)
	}
}

// TestSignPutUnsupported: stores other than s3:// sign nothing, and
// say so before looking at the key: an existing one was adopted (read
// whole) or a conflict there.
func TestSignPutUnsupported(t *testing.T) {
	body := []byte("existing object")
	for _, u := range []string{"file://" + t.TempDir(), "mem://"} {
		s, err := Open(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutIfAbsent(t.Context(), "there", BytesSource(body)); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			key  string
			body []byte
		}{{"k", []byte("x")}, {"there", body}, {"there", []byte("other bytes, same..")}} {
			if _, obj, err := s.SignPut(t.Context(), c.key, int64(len(c.body)), sha(c.body), time.Minute); !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("%s: sign a PUT of %q: %+v, %v; want errors.ErrUnsupported", u, c.key, obj, err)
			}
		}
		s.Close()
	}
}

// TestSignedPutRedactedInEveryVerb: a SignedPut prints as [REDACTED] in
// every fmt verb, not only in those that use String (%d printed the
// struct, URL and signature included), and in slog.
func TestSignedPutRedactedInEveryVerb(t *testing.T) {
	sp := SignedPut{URL: "https://s3.example/b/k?X-Amz-Signature=SECRETSIG", Expires: time.Unix(1, 0)}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d", "%t"} {
		if out := fmt.Sprintf(verb, sp); strings.Contains(out, "SECRETSIG") {
			t.Errorf("fmt %s of a SignedPut leaks its URL: %s", verb, out)
		}
	}
	var b strings.Builder
	slog.New(slog.NewJSONHandler(&b, nil)).Info("put", "signed", sp)
	if strings.Contains(b.String(), "SECRETSIG") {
		t.Errorf("slog of a SignedPut leaks its URL: %s", b.String())
	}
}
