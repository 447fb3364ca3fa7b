package objstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"gocloud.dev/gcerrors"

	"github.com/thawdb/thaw/internal/testfs"
)

// apiErr stands for the AWS SDK's errors: smithy's APIError (ErrorCode)
// and the HTTP response error (HTTPStatusCode), which classify finds by
// their methods.
type apiErr struct {
	code   string
	status int
}

func (e apiErr) Error() string       { return fmt.Sprintf("api error %s (status %d)", e.code, e.status) }
func (e apiErr) ErrorCode() string   { return e.code }
func (e apiErr) HTTPStatusCode() int { return e.status }

// statusErr has an HTTP status and no error code, like a response to HEAD.
type statusErr int

func (e statusErr) Error() string       { return fmt.Sprintf("http status %d", int(e)) }
func (e statusErr) HTTPStatusCode() int { return int(e) }

func TestIsTransient(t *testing.T) {
	pathErr := func(errno syscall.Errno) error {
		return &fs.PathError{Op: "rename", Path: "/store/k", Err: errno}
	}
	connErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: errno}}
	}
	// gocloud's errors wrap the sentinel of their code; so do these.
	gc := func(code error) error { return fmt.Errorf("blob (code=%v): %w", code, code) }
	for _, tc := range []struct {
		name      string
		err       error
		class     error // what classify finds; nil for none
		transient bool
	}{
		{"nil", nil, nil, false},
		{"plain", errors.New("something"), nil, false},
		{"ErrTransient", fmt.Errorf("s3 503: %w", ErrTransient), nil, true},
		{"ErrInjected", fmt.Errorf("put: %w", ErrInjected), nil, true},
		{"canceled", context.Canceled, nil, false},
		{"deadline", fmt.Errorf("put: %w", context.DeadlineExceeded), nil, false},
		{"transient then canceled", fmt.Errorf("%w (last: %w)", context.Canceled, ErrTransient), nil, false},
		{"canceled gocloud", gc(gcerrors.ErrCanceled), nil, false},
		{"ErrNotFound", ErrNotFound, nil, false},
		{"ErrExists", ErrExists, nil, false},
		{"ErrConflict", ErrConflict, nil, false},
		{"ErrOutsideStore", ErrOutsideStore, nil, false},
		{"ErrIntegrity", ErrIntegrity, nil, false},
		{"ErrInvalidKey", ErrInvalidKey, nil, false},
		{"ErrPermission", ErrPermission, nil, false},
		{"ErrBucketNotFound", ErrBucketNotFound, nil, false},
		{"ErrNoSpace", ErrNoSpace, nil, false},
		{"ErrInvalidRequest", ErrInvalidRequest, nil, false},
		{"permanent and transient", fmt.Errorf("%w: %w", ErrPermission, ErrTransient), nil, false},

		// gocloud's codes.
		{"gc unknown", gc(gcerrors.ErrUnknown), ErrTransient, true},
		{"gc internal", gc(gcerrors.ErrInternal), ErrTransient, true},
		{"gc resource exhausted", gc(gcerrors.ErrResourceExhausted), ErrTransient, true},
		{"gc deadline exceeded", gc(gcerrors.ErrDeadlineExceeded), ErrTransient, true},
		// A TLS handshake that failed verification: gocloud's Unknown,
		// but permanent.
		{"gc unknown authority", fmt.Errorf("%w: %w", gcerrors.ErrUnknown, &url.Error{Op: "Put", URL: "https://s3", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}), nil, false},
		{"gc wrong host", fmt.Errorf("%w: %w", gcerrors.ErrUnknown, x509.HostnameError{Host: "s3"}), nil, false},
		{"gc expired", fmt.Errorf("%w: %w", gcerrors.ErrUnknown, x509.CertificateInvalidError{Reason: x509.Expired}), nil, false},
		{"gc host not found", fmt.Errorf("%w: %w", gcerrors.ErrUnknown, &net.DNSError{Err: "no such host", Name: "s3", IsNotFound: true}), ErrTransient, true},
		{"gc not found", gc(gcerrors.ErrNotFound), ErrNotFound, false},
		{"gc already exists", gc(gcerrors.ErrAlreadyExists), ErrExists, false},
		{"gc permission denied", gc(gcerrors.ErrPermissionDenied), ErrPermission, false},
		{"gc invalid argument", gc(gcerrors.ErrInvalidArgument), ErrInvalidRequest, false},
		{"gc unimplemented", gc(gcerrors.ErrUnimplemented), ErrInvalidRequest, false},
		{"gc failed precondition", gc(gcerrors.ErrFailedPrecondition), ErrInvalidRequest, false},

		// The file system under file://.
		{"EACCES", pathErr(syscall.EACCES), ErrPermission, false},
		{"EPERM", pathErr(syscall.EPERM), ErrPermission, false},
		{"EROFS", pathErr(syscall.EROFS), ErrPermission, false},
		{"fs.ErrPermission", fmt.Errorf("open: %w", fs.ErrPermission), ErrPermission, false},
		{"ENOSPC", pathErr(syscall.ENOSPC), ErrNoSpace, false},
		{"EDQUOT", pathErr(syscall.EDQUOT), ErrNoSpace, false},
		{"ENOTDIR", pathErr(syscall.ENOTDIR), ErrInvalidRequest, false},
		{"EISDIR", pathErr(syscall.EISDIR), ErrInvalidRequest, false},
		{"ENAMETOOLONG", pathErr(syscall.ENAMETOOLONG), ErrInvalidRequest, false},
		{"EINTR", pathErr(syscall.EINTR), ErrTransient, true},
		{"EMFILE", pathErr(syscall.EMFILE), ErrTransient, true},
		{"ENOSPC in gocloud unknown", fmt.Errorf("%w: %w", gcerrors.ErrUnknown, pathErr(syscall.ENOSPC)), ErrNoSpace, false},
		{"EACCES in gocloud unknown", fmt.Errorf("%w: %w", gcerrors.ErrUnknown, pathErr(syscall.EACCES)), ErrPermission, false},
		{"ENOENT in gocloud not found", fmt.Errorf("%w: %w", gcerrors.ErrNotFound, pathErr(syscall.ENOENT)), ErrNotFound, false},
		{"EIO", pathErr(syscall.EIO), nil, false},

		// The network.
		{"connection reset", connErr(syscall.ECONNRESET), ErrTransient, true},
		{"connection refused", connErr(syscall.ECONNREFUSED), ErrTransient, true},
		{"broken pipe", connErr(syscall.EPIPE), ErrTransient, true},
		{"host unreachable", connErr(syscall.EHOSTUNREACH), ErrTransient, true},
		{"i/o timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, ErrTransient, true},
		{"dns timeout", &net.DNSError{Err: "timeout", Name: "s3", IsTimeout: true}, ErrTransient, true},
		{"unexpected eof", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), ErrTransient, true},

		// S3: the error code decides, then the HTTP status.
		{"NoSuchBucket", apiErr{"NoSuchBucket", 404}, ErrBucketNotFound, false},
		{"NoSuchKey", fmt.Errorf("%w: %w", gcerrors.ErrNotFound, apiErr{"NoSuchKey", 404}), ErrNotFound, false},
		{"AccessDenied", apiErr{"AccessDenied", 403}, ErrPermission, false},
		{"InvalidAccessKeyId", apiErr{"InvalidAccessKeyId", 403}, ErrPermission, false},
		{"SignatureDoesNotMatch", apiErr{"SignatureDoesNotMatch", 403}, ErrPermission, false},
		{"ExpiredToken", apiErr{"ExpiredToken", 400}, ErrPermission, false},
		{"SlowDown", apiErr{"SlowDown", 503}, ErrTransient, true},
		{"InternalError", apiErr{"InternalError", 500}, ErrTransient, true},
		{"RequestTimeout", apiErr{"RequestTimeout", 400}, ErrTransient, true},
		{"ConditionalRequestConflict", apiErr{"ConditionalRequestConflict", 409}, ErrTransient, true},
		{"NotImplemented", apiErr{"NotImplemented", 501}, ErrInvalidRequest, false},
		{"InvalidBucketName", apiErr{"InvalidBucketName", 400}, ErrInvalidRequest, false},
		{"unknown code 403", apiErr{"SomethingNew", 403}, ErrPermission, false},
		{"unknown code 500", apiErr{"SomethingNew", 500}, ErrTransient, true},
		{"HEAD 403", statusErr(403), ErrPermission, false},
		{"HEAD 401", statusErr(401), ErrPermission, false},
		{"HEAD 503", statusErr(503), ErrTransient, true},
		{"HEAD 502", statusErr(502), ErrTransient, true},
		{"HEAD 429", statusErr(429), ErrTransient, true},
		{"HEAD 400", statusErr(400), ErrInvalidRequest, false},
		{"HEAD 507", statusErr(507), ErrNoSpace, false},
		{"HEAD 404", statusErr(404), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.class {
				t.Errorf("classify(%v) = %v, want %v", tc.err, got, tc.class)
			}
			if got := IsTransient(tc.err); got != tc.transient {
				t.Errorf("IsTransient(%v) = %v, want %v", tc.err, got, tc.transient)
			}
			// Through a bucket's wrapping the class is added, the original
			// error is kept, and IsTransient agrees.
			if tc.err == nil {
				return
			}
			b := &gcBucket{base: "file:///store"}
			wrapped := b.errorf("put", "k", tc.err)
			if !errors.Is(wrapped, tc.err) {
				t.Errorf("errorf(%v) = %v, does not wrap the original", tc.err, wrapped)
			}
			if tc.class != nil && !errors.Is(wrapped, tc.class) {
				t.Errorf("errorf(%v) = %v, want it to wrap %v", tc.err, wrapped, tc.class)
			}
			if got := IsTransient(wrapped); got != tc.transient {
				t.Errorf("IsTransient(%v) = %v, want %v", wrapped, got, tc.transient)
			}
		})
	}
}

// wantClass fails unless err wraps class and fs's or the driver's own
// error beneath it, and is transient exactly when class is ErrTransient.
func wantClass(t *testing.T, what string, err, class error) {
	t.Helper()
	t.Logf("%s: %v", what, err)
	if !errors.Is(err, class) {
		t.Fatalf("%s: %v, want %v", what, err, class)
	}
	if got := IsTransient(err); got != (class == ErrTransient) {
		t.Fatalf("%s: IsTransient(%v) = %v", what, err, got)
	}
}

// TestFileReadOnly: on a file:// store whose directories refuse writes,
// every write is ErrPermission, not transient, and wraps the file
// system's own error; reads go on; once the directory is writable again
// the same calls succeed.
func TestFileReadOnly(t *testing.T) {
	ctx := t.Context()
	root := filepath.Join(t.TempDir(), "remote")
	s := openStore(t, "file://"+filepath.ToSlash(root))
	mustPut(t, s, "kv/old", []byte("old"))
	local, localSHA := writeLocal(t, t.TempDir(), "f", []byte("file data"))

	undo := testfs.MakeReadOnly(t, filepath.Join(root, "kv"))
	permission := func(what string, err error) {
		t.Helper()
		wantClass(t, what, err, ErrPermission)
		if !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("%s: %v does not wrap fs.ErrPermission", what, err)
		}
		var pe *fs.PathError
		var le *os.LinkError
		if !errors.As(err, &pe) && !errors.As(err, &le) {
			t.Fatalf("%s: %v wraps no *fs.PathError or *os.LinkError", what, err)
		}
	}
	permission("put", s.Bucket().Put(ctx, "kv/new", bytes.NewReader([]byte("new")), false))
	permission("put in a new directory", s.Bucket().Put(ctx, "kv/dir/new", bytes.NewReader([]byte("new")), false))
	_, err := s.PutIfAbsent(ctx, "kv/new", BytesSource([]byte("new")))
	permission("put if absent", err)
	_, err = s.PutFile(ctx, "kv/file", local, int64(len("file data")), localSHA)
	permission("put file", err)
	permission("delete", s.Delete(ctx, "kv/old"))
	if got := mustGet(t, s, "kv/old"); string(got) != "old" {
		t.Fatalf("get from the read-only store: %q", got)
	}
	if got := listKeys(t, s, "kv/"); len(got) != 1 || got[0] != "kv/old" {
		t.Fatalf("list of the read-only store: %q", got)
	}
	if _, err := s.Stat(ctx, "kv/new"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat of the refused object: %v, want ErrNotFound", err)
	}

	undo()
	mustPut(t, s, "kv/new", []byte("new"))
	if _, err := s.PutFile(ctx, "kv/file", local, int64(len("file data")), localSHA); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "kv/old"); err != nil {
		t.Fatal(err)
	}
}

// TestFileMissingRoot: a file:// root that does not exist, with
// create_dir off ("false", "0" or empty; fileblob itself takes any value as
// on), is ErrBucketNotFound at Open and is not created.
func TestFileMissingRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "absent")
	for _, off := range []string{"", "false", "0"} {
		_, err := Open(t.Context(), "file://"+filepath.ToSlash(root)+"?create_dir="+off)
		wantClass(t, "open a missing root, create_dir="+off, err, ErrBucketNotFound)
		if errors.Is(err, ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("open a missing root, create_dir=%s: %v, want fs.ErrNotExist and not ErrNotFound", off, err)
		}
		if _, serr := os.Stat(root); !errors.Is(serr, fs.ErrNotExist) {
			t.Fatalf("create_dir=%s: the root was created: %v", off, serr)
		}
	}
	// The default creates it.
	s := openStore(t, "file://"+filepath.ToSlash(root))
	mustPut(t, s, "k", []byte("v"))
}

// TestFileKeyCollision: on file:// a key below an object is no object
// (ErrNotFound on reads), and writing it is ErrInvalidRequest, not
// transient.
func TestFileKeyCollision(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, "file://"+filepath.ToSlash(t.TempDir())+"/remote")
	mustPut(t, s, "a", []byte("a"))
	_, err := s.Stat(ctx, "a/b")
	wantClass(t, "stat below an object", err, ErrNotFound)
	_, err = s.Get(ctx, "a/b")
	wantClass(t, "get below an object", err, ErrNotFound)
	wantClass(t, "delete below an object", s.Delete(ctx, "a/b"), ErrNotFound)
	_, err = s.GetFile(ctx, "a/b", filepath.Join(t.TempDir(), "dst"), 1, sha([]byte("b")))
	wantClass(t, "get file below an object", err, ErrNotFound)
	wantClass(t, "put below an object", s.Bucket().Put(ctx, "a/b", bytes.NewReader([]byte("b")), false), ErrInvalidRequest)
	_, err = s.PutIfAbsent(ctx, "a/b", BytesSource([]byte("b")))
	wantClass(t, "put if absent below an object", err, ErrInvalidRequest)
}
