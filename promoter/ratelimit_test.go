package promoter

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/thawdb/thaw/objstore"
)

// TestLimitedStoreFiles: a file put through the upload limiter is charged
// its size when the store copies the file, and nothing when the store links
// it (no bytes move); PutIfAbsent is charged what its Source yields.
func TestLimitedStoreFiles(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("limited "), 4096)
	path := filepath.Join(dir, "f.sst")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	const rate = 1 << 30 // one put fits the burst: no sleeping
	fixed := time.Unix(1700000000, 0)
	for _, tc := range []struct {
		url    string
		charge float64
	}{
		{"mem://limited-files", float64(len(data))},
		{"file://" + filepath.ToSlash(filepath.Join(dir, "store")), 0},
	} {
		st, err := objstore.Open(t.Context(), tc.url)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		lim := newLimiter(rate)
		lim.now = func() time.Time { return fixed }
		ls := limitedStore{Store: st, lim: lim}
		if _, err := ls.PutFileStamped(t.Context(), "k.sst", path, int64(len(data)), sha, objstore.FileStamp{}); err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := rate - lim.tokens; got != tc.charge {
			t.Errorf("%s: file put charged %v bytes, want %v", tc.url, got, tc.charge)
		}
		if _, err := ls.PutIfAbsent(t.Context(), "meta", objstore.BytesSource([]byte("0123456789"))); err != nil {
			t.Fatal(err)
		}
		if got := rate - lim.tokens; got != tc.charge+10 {
			t.Errorf("%s: after a 10-byte PutIfAbsent the limiter was charged %v bytes, want %v", tc.url, got, tc.charge+10)
		}
	}
}
