package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"syscall"
	"unicode/utf8"

	"gocloud.dev/gcerrors"

	"github.com/thawdb/thaw/internal/tlsfail"
)

var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("objstore: object not found")
	// ErrExists: a write-if-absent found the key taken.
	ErrExists = errors.New("objstore: object exists")
	// ErrConflict: the key holds different bytes than PutIfAbsent was given.
	ErrConflict = errors.New("objstore: object exists with different content")
	// ErrOutsideStore: a URI does not name an object under the store's Base.
	ErrOutsideStore = errors.New("objstore: uri outside the store")
	// ErrIntegrity: an object's size or SHA-256 differs from what was expected.
	ErrIntegrity = errors.New("objstore: integrity check failed")
	// ErrInvalidKey: a key breaks the rules in doc.go.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrInjected is returned by faults that Faults makes up itself
	// (TruncateWrite); FailNth and FailKey return the caller's error.
	// Like the dropped connection it stands for, it is transient.
	ErrInjected = errors.New("objstore: injected fault")

	// ErrPermission: the store refused access. S3 answered 401 or 403
	// (AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch,
	// ExpiredToken, ...), or a file:// operation failed with EACCES, EPERM or
	// EROFS. Permanent: credentials, a policy or file modes must change.
	ErrPermission = errors.New("objstore: permission denied")
	// ErrBucketNotFound: the store itself is missing, not an object in it.
	// S3 answered NoSuchBucket, or a file:// root does not exist at Open
	// (only when create_dir is off). Permanent. It does not wrap
	// ErrNotFound.
	ErrBucketNotFound = errors.New("objstore: bucket not found")
	// ErrNoSpace: the store is out of space: ENOSPC or EDQUOT on file://,
	// HTTP 507 from an S3-compatible server. Not transient: a full disk or
	// quota seldom frees itself within seconds; someone has to make room.
	ErrNoSpace = errors.New("objstore: no space left in the store")
	// ErrInvalidRequest: the store refused the request as it stands: an
	// argument it does not accept or an operation it does not implement
	// (gocloud's InvalidArgument and Unimplemented, S3's 400, 405, 411, 413,
	// 414, 416 and 501), a precondition that failed outside write-if-absent
	// (FailedPrecondition), or on file:// a key that collides with a
	// directory or a name the file system cannot hold (ENOTDIR, EISDIR,
	// ENAMETOOLONG, ELOOP). Permanent.
	ErrInvalidRequest = errors.New("objstore: request refused by the store")
	// ErrTransient: the store failed in a way that may pass if the same call
	// is repeated after a pause: unreachable, a dropped or reset connection,
	// a timeout, throttling, a server error (5xx other than 501 and 507), or
	// an error gocloud could not classify (code Unknown, Internal,
	// ResourceExhausted or DeadlineExceeded). Test it with IsTransient,
	// which also recognizes such errors from outside the store. Tests and
	// wrappers may wrap it to make up a transient failure.
	ErrTransient = errors.New("objstore: transient store failure")
)

// permanent are the classes that repeating a call does not change.
var permanent = []error{
	ErrNotFound, ErrExists, ErrConflict, ErrOutsideStore, ErrIntegrity, ErrInvalidKey,
	ErrPermission, ErrBucketNotFound, ErrNoSpace, ErrInvalidRequest,
}

// IsTransient reports whether err is a failure that may pass if the same
// call is repeated after a pause, so that a retry loop should repeat it:
//
//   - an error wrapping ErrTransient (every operation of a Bucket from
//     OpenBucket wraps it into a store failure of that class) or
//     ErrInjected;
//   - wherever they come from: a network error that timed out, a
//     connection refused, reset or aborted, a broken pipe, an unreachable
//     network or host, EAGAIN, EINTR, EBUSY, EMFILE, ENFILE,
//     io.ErrUnexpectedEOF, an S3 error code or HTTP status of that class,
//     and gocloud's codes Unknown, Internal, ResourceExhausted and
//     DeadlineExceeded (but not a TLS handshake that failed verification,
//     see tlsfail.Untrusted).
//
// It is false for nil, for every error wrapping one of the permanent
// classes (ErrNotFound, ErrExists, ErrConflict, ErrOutsideStore,
// ErrIntegrity, ErrInvalidKey, ErrPermission, ErrBucketNotFound,
// ErrNoSpace, ErrInvalidRequest) or an error of theirs that no Bucket
// wrapped yet (fs.ErrPermission, ENOSPC, a 403, ...), and for every error
// wrapping context.Canceled or context.DeadlineExceeded itself: the caller
// gave up, and a repeat with the same context cannot succeed (a dial or
// http.Client timeout, which only says it is DeadlineExceeded, is a network
// timeout; a caller whose context may have ended checks it first). Any other error
// (one from a Source, one that Faults was told to return, EIO) is not
// transient either: objstore cannot vouch that repeating helps.
func IsTransient(err error) bool {
	if err == nil || callerGaveUp(err) {
		return false
	}
	for _, p := range permanent {
		if errors.Is(err, p) {
			return false
		}
	}
	switch c := classify(err); {
	case c == ErrTransient:
		return true
	case c != nil:
		return false // fs.ErrPermission, ENOSPC, ... from outside the store
	}
	return errors.Is(err, ErrTransient) || errors.Is(err, ErrInjected)
}

// callerGaveUp reports whether context.Canceled or context.DeadlineExceeded
// itself is in err's chain: a context ended. errors.Is would also match a
// dial timeout (net's) or an http.Client timeout, which say they are
// DeadlineExceeded although no caller's context ended: those are network
// timeouts, transient.
func callerGaveUp(err error) bool {
	for err != nil {
		if err == context.Canceled || err == context.DeadlineExceeded {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if callerGaveUp(e) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// classify returns the class sentinel of an error that a store operation
// returned (gocloud's, or a local file system's), or nil when it has none:
// the error already carries a class, the caller's context ended, or
// nothing in it tells. The most specific evidence decides: S3's error
// code, then the HTTP status, then the errno, then gocloud's code.
func classify(err error) error {
	if err == nil || callerGaveUp(err) {
		return nil
	}
	if errors.Is(err, ErrTransient) || errors.Is(err, ErrInjected) {
		return nil
	}
	for _, c := range permanent {
		if errors.Is(err, c) {
			return nil
		}
	}
	var api interface{ ErrorCode() string }
	if errors.As(err, &api) {
		if c := s3CodeClass(api.ErrorCode()); c != nil {
			return c
		}
	}
	var resp interface{ HTTPStatusCode() int }
	if errors.As(err, &resp) {
		if c := httpStatusClass(resp.HTTPStatusCode()); c != nil {
			return c
		}
	}
	if c := errnoClass(err); c != nil {
		return c
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrTransient
	}
	if tlsfail.Untrusted(err) {
		// gocloud calls it Unknown; no repeat helps until the
		// configuration changes.
		return nil
	}
	// Only gocloud's errors wrap its code sentinels (gcerrors.Code would
	// call any other error Unknown).
	switch {
	case errors.Is(err, gcerrors.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, gcerrors.ErrAlreadyExists):
		return ErrExists
	case errors.Is(err, gcerrors.ErrPermissionDenied):
		return ErrPermission
	case errors.Is(err, gcerrors.ErrInvalidArgument), errors.Is(err, gcerrors.ErrUnimplemented),
		errors.Is(err, gcerrors.ErrFailedPrecondition):
		return ErrInvalidRequest
	case errors.Is(err, gcerrors.ErrUnknown), errors.Is(err, gcerrors.ErrInternal),
		errors.Is(err, gcerrors.ErrResourceExhausted), errors.Is(err, gcerrors.ErrDeadlineExceeded):
		return ErrTransient
	case errors.Is(err, io.ErrUnexpectedEOF):
		return ErrTransient
	}
	return nil
}

// s3CodeClass classifies an S3 error code; nil leaves it to the status.
func s3CodeClass(code string) error {
	switch code {
	case "NoSuchBucket":
		return ErrBucketNotFound
	case "AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
		"ExpiredToken", "InvalidToken", "TokenRefreshRequired", "AllAccessDisabled",
		"AccountProblem", "NotSignedUp":
		return ErrPermission
	case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout",
		"Throttling", "ThrottlingException", "RequestThrottled", "TooManyRequestsException",
		"RequestLimitExceeded", "BandwidthLimitExceeded", "OperationAborted",
		"ConditionalRequestConflict":
		return ErrTransient
	case "NotImplemented", "InvalidArgument", "InvalidRequest", "InvalidBucketName",
		"KeyTooLongError", "EntityTooLarge", "MethodNotAllowed", "InvalidRange",
		"AuthorizationHeaderMalformed":
		return ErrInvalidRequest
	}
	return nil
}

// httpStatusClass classifies an HTTP status; nil leaves it to gocloud's
// code (404 among others: missing object, missing upload).
func httpStatusClass(status int) error {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrPermission
	case http.StatusInsufficientStorage:
		return ErrNoSpace
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusLengthRequired,
		http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong,
		http.StatusRequestedRangeNotSatisfiable, http.StatusNotImplemented:
		return ErrInvalidRequest
	case http.StatusRequestTimeout, http.StatusTooManyRequests:
		return ErrTransient
	}
	if status >= 500 && status <= 599 {
		return ErrTransient
	}
	return nil
}

// errnoClass classifies a system call's error.
func errnoClass(err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return ErrPermission
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return ErrNoSpace
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP):
		return ErrInvalidRequest
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.ENETDOWN), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR),
		errors.Is(err, syscall.EBUSY), errors.Is(err, syscall.EMFILE),
		errors.Is(err, syscall.ENFILE):
		return ErrTransient
	}
	return nil
}

// checkKey enforces the key rules of doc.go.
func checkKey(key string) error {
	bad := func(why string) error { return fmt.Errorf("%w: %s", ErrInvalidKey, why) }
	switch {
	case key == "":
		return bad("empty")
	case !utf8.ValidString(key):
		return bad("not utf-8")
	case strings.HasSuffix(key, ".attrs"):
		return bad(`the suffix ".attrs" is reserved`)
	case key == StagingDir || strings.HasPrefix(key, StagingDir+"/"):
		return bad(`the prefix "` + StagingDir + `/" is reserved`)
	case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' || r == '?' || r == '#' }):
		return bad(`contains a control character, '\', '?' or '#'`)
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return bad("empty path segment")
		case ".", "..":
			return bad(`"." or ".." segment`)
		}
		if strings.HasSuffix(seg, "..") {
			// fileblob keeps "a../b" in the file "a..__0x2f__b" but
			// "a../" under the directory "a..": refused on every store.
			return bad(`a path segment ends in ".."`)
		}
	}
	return nil
}
