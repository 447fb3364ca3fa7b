package daemon

import (
	"bytes"
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedUploadKey: thaw server's coordinators take the upload
// gateway's signing key from THAW_UPLOAD_KEY as thaw coordinator's do (they
// never read it: a malformed key started, a valid one was ignored and each
// coordinator signed with a random key of its own).
func TestEmbeddedUploadKey(t *testing.T) {
	start := func() (*Embedded, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		return StartEmbedded(ctx, EmbeddedConfig{DataDir: t.TempDir(), TabletServers: 1, EtcdUnsafeNoFsync: true})
	}
	t.Setenv(EnvUploadKey, "not-64-hex-digits")
	if e, err := start(); err == nil || !strings.Contains(err.Error(), EnvUploadKey+" must be 64 hex digits") {
		if e != nil {
			_ = e.Close()
		}
		t.Fatalf("start with a malformed %s: %v", EnvUploadKey, err)
	}
	key := bytes.Repeat([]byte{0xab}, 32)
	t.Setenv(EnvUploadKey, hex.EncodeToString(key))
	e, err := start()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !bytes.Equal(e.uploadKey, key) {
		t.Fatalf("the embedded coordinators sign with %x, want %s's %x", e.uploadKey, EnvUploadKey, key)
	}
}
