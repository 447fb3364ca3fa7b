package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/internal/testproxy"
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

// TestEtcdTrustReload: the etcd client of thaw coordinator and thaw
// tablet follows a changed etcd.tls.ca_file. etcd's certificate is renewed
// by another CA and the client's connections are cut: the same client is
// refused until the bundle holds the new CA, then reads again.
func TestEtcdTrustReload(t *testing.T) {
	dir := t.TempDir()
	etcdCert, etcdKey := filepath.Join(dir, "etcd.pem"), filepath.Join(dir, "etcd-key.pem")
	first := testtls.Write(t, etcdCert, etcdKey) // for 127.0.0.1, its own CA
	trust := filepath.Join(dir, "trust.pem")
	replaceBundle(t, trust, pemOf(t, first))
	own, err := ClientTLS(trust)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := meta.StartEmbedded(t.Context(), meta.EmbeddedConfig{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true,
		CertFile: etcdCert, KeyFile: etcdKey, ClientTLS: own})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	p := testproxy.New(t, etcd.Endpoints()[0])

	var logs testlog.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cfg := EtcdConfig{Endpoints: []string{"https://" + p.Addr()}, DialTimeout: time.Second, TLS: EtcdTLS{CAFile: trust}}
	cli, err := connectEtcd(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	get := func() error {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cli.Get(gctx, "k")
		return err
	}
	if err := get(); err != nil {
		t.Fatalf("the first certificate: %v", err)
	}

	second := testtls.Write(t, etcdCert, etcdKey) // etcd reads it at every handshake
	p.Cut()
	within10s(t, "the renewed certificate is refused while the bundle holds only the first CA", func() error {
		if get() == nil {
			return errors.New("the client still reads")
		}
		// The reason, which the client's errors do not carry: a role
		// starting now fails at once on the certificate.
		if _, err := connectEtcd(ctx, cfg, slog.New(slog.DiscardHandler)); !errors.Is(err, meta.ErrTLS) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			return fmt.Errorf("a new client: %v, want an untrusted-certificate error", err)
		}
		return nil
	})
	replaceBundle(t, trust, append(pemOf(t, first), pemOf(t, second)...))
	within10s(t, "the same client trusts the renewed certificate once the bundle holds its CA", get)
	if !strings.Contains(logs.String(), "CA bundle reloaded") {
		t.Errorf("no reload logged: %s", logs.String())
	}
}
