// Package testvgw runs versitygw, an S3 server that checks SigV4
// signatures (plain and presigned), content checksums and conditional
// writes, for tests where what S3 enforces matters: gofakes3, the
// in-process S3 of the other tests, checks no signature at all.
//
// versitygw is a separate program. Start finds it in $THAW_VERSITYGW, then
// on $PATH, then in the user's cache directory; failing all three it
// installs the pinned Version there with `go install` from the Go module
// proxy (about a minute, once per machine). .ci/run installs it before the
// tests run.
package testvgw

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Version is the versitygw release the tests run.
const Version = "v1.8.0"

// Module is versitygw's command package.
const Module = "github.com/versity/versitygw/cmd/versitygw"

// Access and Secret are the server's root credentials.
const (
	Access = "THAWTESTACCESSKEY"
	Secret = "thaw-test-secret-key-not-a-real-one"
)

// Server is a running versitygw with a posix backend.
type Server struct {
	Endpoint string // http://127.0.0.1:port
	dir      string // the backend's root: one directory per bucket
}

// Start runs versitygw until the test ends and points the AWS SDK's
// default credential chain at its root credentials (t.Setenv: the test
// must not be parallel).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	StaticCredentials(t, Access, Secret)
	root := t.TempDir()
	dir, meta := filepath.Join(root, "data"), filepath.Join(root, "meta")
	for _, d := range []string{dir, meta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var lastErr error
	for range 3 { // the port may be taken between choosing and binding it
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(bin, "--access", Access, "--secret", Secret, "--port", addr, "posix", "--sidecar", meta, dir)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("testvgw: start %s: %v", bin, err)
		}
		exited := make(chan struct{}) // closed when the process is gone and its output copied
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		if lastErr = awaitListening(addr, exited); lastErr == nil {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			return &Server{Endpoint: "http://" + addr, dir: dir}
		}
		_ = cmd.Process.Kill()
		<-exited
		lastErr = fmt.Errorf("%w; output: %s", lastErr, out.String())
	}
	t.Fatalf("testvgw: versitygw did not start: %v", lastErr)
	return nil
}

// Bucket creates the bucket name (a directory of the backend).
func (s *Server) Bucket(t testing.TB, name string) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(s.dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
}

// ObjectPath is the file of object key of bucket in the backend: a test
// changes it to corrupt the object behind the server's back.
func (s *Server) ObjectPath(bucket, key string) string {
	return filepath.Join(s.dir, bucket, filepath.FromSlash(key))
}

// StoreURL is the objstore URL of bucket/prefix on the server.
func (s *Server) StoreURL(bucket, prefix string) string {
	q := url.Values{"endpoint": {s.Endpoint}, "region": {"us-east-1"}, "use_path_style": {"true"}}
	return "s3://" + bucket + "/" + prefix + "?" + q.Encode()
}

// StaticCredentials points the AWS SDK's default credential chain at the
// given static keys and nothing else (no profile, no shared files, no
// instance metadata) until the test ends.
func StaticCredentials(t testing.TB, access, secret string) {
	t.Helper()
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

var install struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of the versitygw program, installing it into
// the user's cache directory if it is nowhere else.
func Binary(t testing.TB) string {
	t.Helper()
	install.once.Do(func() { install.path, install.err = binary() })
	if install.err != nil {
		t.Fatalf("testvgw: %v", install.err)
	}
	return install.path
}

func binary() (string, error) {
	if p := os.Getenv("THAW_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("THAW_VERSITYGW: %w", err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no versitygw on $PATH and no cache directory to install it in: %w", err)
	}
	dir := filepath.Join(cache, "thaw-test", "versitygw-"+Version)
	path := filepath.Join(dir, "versitygw")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Install into a private directory and rename: test binaries of other
	// packages may be installing it at the same time.
	tmp, err := os.MkdirTemp(dir, "install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", Module+"@"+Version)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w: %s", Module, Version, err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), path); err != nil {
		return "", err
	}
	return path, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// awaitListening waits until addr accepts connections, the process exits
// or 20 seconds pass.
func awaitListening(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("versitygw exited")
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("versitygw not listening on %s after 20s", addr)
}
