package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/testtls"
	"github.com/thawdb/thaw/tier/meta"
)

// TestEtcdTLS: thaw coordinator and thaw tablet reach an etcd that serves
// TLS and requires client certificates (etcd.tls), and run the tier over
// it; without the client certificate, or without trusting etcd's, a role
// does not start and says why.
func TestEtcdTLS(t *testing.T) {
	dir := t.TempDir()
	etcdCert, etcdKey := filepath.Join(dir, "etcd.pem"), filepath.Join(dir, "etcd-key.pem")
	clientCert, clientKey := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	testtls.Write(t, etcdCert, etcdKey)
	testtls.Write(t, clientCert, clientKey) // self-signed: its own CA, which etcd trusts
	own, err := ClientTLSFiles(etcdCert, clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := meta.StartEmbedded(t.Context(), meta.EmbeddedConfig{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true,
		CertFile: etcdCert, KeyFile: etcdKey, ClientCAFile: clientCert, ClientTLS: own})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })
	eps := etcd.Endpoints()
	if !strings.HasPrefix(eps[0], "https://") {
		t.Fatalf("endpoints %v", eps)
	}
	roles := roleTest{dir: dir, remote: "file://" + filepath.Join(dir, "remote"), endpoints: eps}
	good := EtcdTLS{CAFile: etcdCert, CertFile: clientCert, KeyFile: clientKey}

	for name, bad := range map[string]struct {
		tls  EtcdTLS
		want string
	}{
		"no client certificate": {EtcdTLS{CAFile: etcdCert}, "remote error: tls: certificate required"},
		"etcd not trusted":      {EtcdTLS{CertFile: clientCert, KeyFile: clientKey}, "certificate signed by unknown authority"},
	} {
		cc := roles.coordinator()
		cc.Etcd.TLS = bad.tls
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		start := time.Now()
		err := RunCoordinator(ctx, cc, RunOptions{})
		cancel()
		// At once, not after retries: the dial timeout is 5s.
		if !errors.Is(err, meta.ErrTLS) || !strings.Contains(err.Error(), bad.want) || time.Since(start) > 4*time.Second {
			t.Fatalf("%s: %v after %v, want a failure to start saying %q", name, err, time.Since(start), bad.want)
		}
	}

	cc, tc := roles.coordinator(), roles.tablet("ts-1")
	cc.Etcd.TLS, tc.Etcd.TLS = good, good
	ca, _ := runRoles(t, cc, tc)
	coord := tierv1connect.NewCoordinatorServiceClient(NewHTTPClient(nil), BaseURL(ca))
	awaitOneServer(t, coord)
	createTable(t, coord, "d", "t", 2, &tierv1.Column{Name: "k", Type: "BIGINT"}, &tierv1.Column{Name: "v", Type: "STRING"})
	checkTierWorks(t, newTierClient(t, BaseURL(ca)), coord)
}
