package objstore

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
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
	ErrInjected = errors.New("objstore: injected fault")
)

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
	}
	return nil
}
