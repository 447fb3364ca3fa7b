package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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

// TestServerEtcdTLS: thaw server's embedded etcd serves TLS and requires
// client certificates (etcd.tls); the tier's own clients reach it and the
// tier works, an outside client without a certificate is refused, one
// with a certificate of the client CA bundle (the promoter's
// tier.etcd.tls) reads the tier's metadata. --check and the start refuse
// a key pair the server's own clients cannot present, saying why.
func TestServerEtcdTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	etcdCert, etcdKey := filepath.Join(dir, "etcd.pem"), filepath.Join(dir, "etcd-key.pem")
	clientCert, clientKey := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	etcdCA := testtls.Write(t, etcdCert, etcdKey) // self-signed, server and client authentication
	clientCA := testtls.Write(t, clientCert, clientKey)
	bundle := filepath.Join(dir, "clients.pem")
	var pemBytes []byte
	for _, c := range []*x509.Certificate{etcdCA, clientCA} {
		pemBytes = append(pemBytes, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	if err := os.WriteFile(bundle, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	good := EmbeddedEtcdTLS{CertFile: etcdCert, KeyFile: etcdKey, ClientCAFile: bundle}

	var sc ServerConfig
	sc.Defaults()
	sc.DataDir, sc.Etcd.TLS = dir, good
	if err := errors.Join(sc.Validate(), sc.CheckFiles()); err != nil {
		t.Fatalf("check: %v", err)
	}
	serverOnly, serverOnlyKey := testtls.Files(t) // server authentication only
	for name, tc := range map[string]struct {
		tls  EmbeddedEtcdTLS
		want string
	}{
		"no key":                       {EmbeddedEtcdTLS{CertFile: etcdCert}, "cert_file and key_file go together"},
		"client CA without a key pair": {EmbeddedEtcdTLS{ClientCAFile: bundle}, "client_ca_file needs cert_file and key_file"},
		"not for client authentication": {EmbeddedEtcdTLS{CertFile: serverOnly, KeyFile: serverOnlyKey, ClientCAFile: serverOnly},
			"cannot authenticate the embedded etcd's own clients"},
		"key of another pair": {EmbeddedEtcdTLS{CertFile: etcdCert, KeyFile: clientKey}, "private key does not match public key"},
	} {
		sc.Etcd.TLS = tc.tls
		if err := errors.Join(sc.Validate(), sc.CheckFiles()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: check: %v, want it to say %q", name, err, tc.want)
		}
		if e, err := StartEmbedded(ctx, EmbeddedConfig{DataDir: filepath.Join(dir, "bad"), EtcdUnsafeNoFsync: true, TabletServers: 1, EtcdTLS: tc.tls}); err == nil {
			e.Close()
			t.Errorf("%s: the tier started", name)
		}
	}

	var logs testlog.Buffer
	e := startTier(t, ctx, EmbeddedConfig{DataDir: filepath.Join(dir, "tier"), TabletServers: 1, EtcdTLS: good,
		EtcdListen: "0.0.0.0:0", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	eps := e.EtcdEndpoints()
	if !strings.HasPrefix(eps[0], "https://") {
		t.Fatalf("etcd endpoints %v", eps)
	}
	if strings.Contains(logs.String(), "plain HTTP") {
		t.Fatalf("warned of plain HTTP over TLS: %s", logs.String())
	}
	coord := tierv1connect.NewCoordinatorServiceClient(e.HTTPClient(), e.Address())
	createTable(t, coord, "d", "t", 2, &tierv1.Column{Name: "k", Type: "BIGINT"}, &tierv1.Column{Name: "v", Type: "STRING"})
	checkTierWorks(t, newTierClient(t, e.Address()), coord)

	// Outside clients reach it at the address its certificate names.
	u, err := url.Parse(eps[0])
	if err != nil {
		t.Fatal(err)
	}
	outside := []string{"https://127.0.0.1:" + u.Port()}
	trust := x509.NewCertPool()
	trust.AddCert(etcdCA)
	if _, err := meta.Connect(ctx, outside, meta.ClientOptions{TLS: &tls.Config{RootCAs: trust}, DialTimeout: time.Second}); !errors.Is(err, meta.ErrTLS) {
		t.Fatalf("an outside client without a certificate: %v, want refused", err)
	}
	own, err := ClientTLSFiles(etcdCert, clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := meta.Connect(ctx, outside, meta.ClientOptions{TLS: own})
	if err != nil {
		t.Fatalf("an outside client of the bundle: %v", err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, DefaultPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count == 0 {
		t.Fatalf("the tier's metadata through an outside client: %v, %v", resp, err)
	}
}

// TestWarnPlainEtcd: thaw server warns when its embedded etcd serves
// plain HTTP beyond the loopback interface, not on loopback or over TLS.
func TestWarnPlainEtcd(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		tls  EmbeddedEtcdTLS
		warn bool
	}{
		{"0.0.0.0", EmbeddedEtcdTLS{}, true},
		{"10.1.2.3", EmbeddedEtcdTLS{}, true},
		{"127.0.0.1", EmbeddedEtcdTLS{}, false},
		{"::1", EmbeddedEtcdTLS{}, false},
		{"0.0.0.0", EmbeddedEtcdTLS{CertFile: "c.pem", KeyFile: "k.pem"}, false},
	} {
		var logs testlog.Buffer
		warnPlainEtcd(slog.New(slog.NewTextHandler(&logs, nil)), tc.tls, []net.Addr{&net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 2379}})
		if got := strings.Contains(logs.String(), "serves plain HTTP beyond the loopback interface"); got != tc.warn {
			t.Errorf("%s with TLS %t: warned %t", tc.ip, tc.tls.CertFile != "", got)
		}
	}
}

// TestEtcdAdvertise: the embedded etcd's advertised address is what the
// tier logs and hands out as its endpoint (a promoter's
// tier.etcd.endpoints), while the tier itself works through the listener;
// an address no client can dial is refused at start.
func TestEtcdAdvertise(t *testing.T) {
	ctx := t.Context()
	var logs testlog.Buffer
	e := startTier(t, ctx, EmbeddedConfig{DataDir: t.TempDir(), TabletServers: 1, EtcdAdvertise: "etcd.invalid:2379",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if eps := e.EtcdEndpoints(); len(eps) != 1 || eps[0] != "http://etcd.invalid:2379" {
		t.Fatalf("etcd endpoints %v", eps)
	}
	if !strings.Contains(logs.String(), `msg="embedded etcd serving" endpoints=[http://etcd.invalid:2379] listen=[127.0.0.1:`) {
		t.Errorf("start log:\n%s", logs.String())
	}
	coord := tierv1connect.NewCoordinatorServiceClient(e.HTTPClient(), e.Address())
	createTable(t, coord, "d", "t", 2, &tierv1.Column{Name: "k", Type: "BIGINT"}, &tierv1.Column{Name: "v", Type: "STRING"})
	checkTierWorks(t, newTierClient(t, e.Address()), coord)

	_, err := StartEmbedded(ctx, EmbeddedConfig{DataDir: t.TempDir(), EtcdUnsafeNoFsync: true, EtcdAdvertise: "0.0.0.0:2379"})
	if err == nil || !strings.Contains(err.Error(), "etcd advertise: meta: invalid argument: embedded etcd advertise \"0.0.0.0:2379\"") {
		t.Fatalf("start with an unspecified advertise address: %v", err)
	}
}
