package snapshot

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestVerifyingReader(t *testing.T) {
	content := []byte(strings.Repeat("snapshot data ", 1000))
	sha := sha256Hex(content)
	wrappers := map[string]func(io.Reader) io.Reader{
		"plain":     func(r io.Reader) io.Reader { return r },
		"one byte":  iotest.OneByteReader,
		"data+eof":  iotest.DataErrReader,
		"half read": iotest.HalfReader,
	}
	for name, wrap := range wrappers {
		for _, tc := range []struct {
			name    string
			data    []byte
			size    int64
			sha     string
			want    error
			wantLen int
		}{
			{"match", content, int64(len(content)), sha, nil, len(content)},
			{"empty match", nil, 0, sha256Hex(nil), nil, 0},
			{"short", content[:len(content)-1], int64(len(content)), sha, ErrSizeMismatch, len(content) - 1},
			{"long", append(content, 'x'), int64(len(content)), sha, ErrSizeMismatch, len(content)},
			{"long from empty", []byte("x"), 0, sha256Hex(nil), ErrSizeMismatch, 0},
			{"digest", bytes.ToUpper(content), int64(len(content)), sha, ErrDigestMismatch, len(content)},
			{"negative size", content, -1, sha, ErrSizeMismatch, 0},
			{"bad sha", content, int64(len(content)), strings.ToUpper(sha), ErrDigestMismatch, 0},
		} {
			got, err := io.ReadAll(NewVerifyingReader(wrap(bytes.NewReader(tc.data)), tc.size, tc.sha))
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("%s/%s: %v", name, tc.name, err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("%s/%s: got %v, want %v", name, tc.name, err, tc.want)
			case len(got) != tc.wantLen:
				t.Errorf("%s/%s: read %d bytes, want %d", name, tc.name, len(got), tc.wantLen)
			case err != nil && !strings.HasPrefix(err.Error(), "snapshot: "):
				t.Errorf("%s/%s: message %q", name, tc.name, err)
			}
		}
	}
}

func TestVerifyingReaderSticky(t *testing.T) {
	r := NewVerifyingReader(strings.NewReader("abc"), 2, sha256Hex([]byte("ab")))
	buf := make([]byte, 10)
	n, err := r.Read(buf)
	if n != 2 || !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("first read: %d, %v", n, err)
	}
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("second read: %d, %v", n, err)
	}

	// Errors of the underlying reader pass through unchanged.
	boom := errors.New("boom")
	r = NewVerifyingReader(iotest.ErrReader(boom), 1, sha256Hex([]byte("a")))
	if _, err := r.Read(buf); err != boom { //nolint:errorlint // identity is the point
		t.Fatalf("got %v, want boom", err)
	}
}
