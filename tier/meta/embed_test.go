package meta_test

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
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/internal/testproxy"
	"github.com/thawdb/thaw/internal/testtls"
	"github.com/thawdb/thaw/tier/meta"
)

// TestEmbeddedRestartKeepsData writes through an embedded etcd (fsync on),
// stops it (twice: Close is idempotent) and starts it again on the same
// directory.
func TestEmbeddedRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	start := func() *meta.Embedded {
		m, err := meta.StartEmbedded(ctxTimeout(t, 30*time.Second), meta.EmbeddedConfig{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if eps := m.Endpoints(); len(eps) != 1 {
			t.Fatalf("endpoints %v", eps)
		}
		return m
	}
	open := func(m *meta.Embedded) (*meta.Store, meta.Guard, func()) {
		cli, err := m.Client(ctxTimeout(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		s, err := meta.New(cli, "")
		if err != nil {
			t.Fatal(err)
		}
		l, err := fencing.Elect(ctxTimeout(t, 10*time.Second), cli, s.ElectionPrefix(), "c", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return s, meta.GuardOf(l), func() { l.Resign(context.Background()); cli.Close() }
	}

	m := start()
	s, g, done := open(m)
	ctx := t.Context()
	if _, err := s.CreateDatabase(ctx, g, "d"); err != nil {
		t.Fatal(err)
	}
	want, err := s.CreateTable(ctx, g, tableSpec("d", "t", 3, false))
	if err != nil {
		t.Fatal(err)
	}
	done()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil { // a second Close returns the first's result
		t.Fatalf("second close: %v", err)
	}

	m = start()
	defer m.Close()
	s, g, done = open(m)
	defer done()
	got, err := s.GetTable(ctx, "d", "t")
	if err != nil || got.Rev != want.Rev || got.Value.ID != want.Value.ID || got.Value.CreatedMs != want.Value.CreatedMs {
		t.Fatalf("after restart: %+v, %v; want %+v", got, err, want)
	}
	// The sequence survived too: the next table gets the next id.
	next, err := s.CreateTable(ctx, g, tableSpec("d", "u", 1, false))
	if err != nil || next.Value.ID != want.Value.ID+1 {
		t.Fatalf("next table: %+v, %v", next.Value, err)
	}
}

func TestEmbeddedAndConnectRejectBadConfig(t *testing.T) {
	ctx := t.Context()
	for _, cfg := range []meta.EmbeddedConfig{
		{},
		{Dir: t.TempDir(), ClientURL: "https://127.0.0.1:0"},
		{Dir: t.TempDir(), ClientURL: "127.0.0.1"},
		{Dir: t.TempDir(), ClientURL: "http://127.0.0.1:0/x"},
		{Dir: t.TempDir(), Advertise: "etcd.example"},
		{Dir: t.TempDir(), Advertise: "etcd.example:0"},
		{Dir: t.TempDir(), Advertise: ":2379"},
		{Dir: t.TempDir(), Advertise: "0.0.0.0:2379"},
		{Dir: t.TempDir(), Advertise: "http://etcd.example:2379"},
	} {
		if m, err := meta.StartEmbedded(ctx, cfg); !errors.Is(err, meta.ErrInvalid) {
			if m != nil {
				m.Close()
			}
			t.Errorf("start %+v: %v; want ErrInvalid", cfg, err)
		}
	}
	if _, err := meta.Connect(ctx, nil, meta.ClientOptions{}); !errors.Is(err, meta.ErrInvalid) {
		t.Errorf("connect without endpoints: %v", err)
	}
	// Nothing listens on a port just released.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if cli, err := meta.Connect(ctxTimeout(t, 500*time.Millisecond), []string{"http://" + addr}, meta.ClientOptions{}); err == nil {
		cli.Close()
		t.Error("connected to a closed port")
	}
	if _, err := meta.New(nil, ""); !errors.Is(err, meta.ErrInvalid) {
		t.Errorf("new store without a client: %v", err)
	}
}

// TestEmbeddedAdvertise: with Advertise, Endpoints and etcd's member list
// name the advertised address, and the process's own clients still reach
// etcd through its listener (the advertised name need not resolve here).
func TestEmbeddedAdvertise(t *testing.T) {
	ctx := t.Context()
	m, err := meta.StartEmbedded(ctx, meta.EmbeddedConfig{Dir: t.TempDir(), UnsafeNoFsync: true,
		ClientURL: "0.0.0.0:0", Advertise: "etcd.invalid:2379"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if eps := m.Endpoints(); !slices.Equal(eps, []string{"http://etcd.invalid:2379"}) {
		t.Fatalf("endpoints %v", eps)
	}
	cli, err := m.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	members, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 1 || !slices.Equal(members.Members[0].ClientURLs, []string{"http://etcd.invalid:2379"}) {
		t.Fatalf("members %v", members.Members)
	}
}

// TestEmbeddedOpensDataOfDefaultName: a data directory that an embedded
// etcd made before the member had a name of its own (etcd's default name)
// starts under the new name with its data.
func TestEmbeddedOpensDataOfDefaultName(t *testing.T) {
	dir := t.TempDir()
	ec := embed.NewConfig() // Name "default", as before
	ec.Dir = dir
	ec.ListenClientUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	ec.ListenPeerUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	ec.LogLevel = "error"
	old, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatal(err)
	}
	<-old.Server.ReadyNotify()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + old.Clients[0].Addr().String()}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctxTimeout(t, 10*time.Second), "k", "from the default-named member"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	old.Close()

	m, err := meta.StartEmbedded(ctxTimeout(t, 30*time.Second), meta.EmbeddedConfig{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cli, err = m.Client(ctxTimeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctxTimeout(t, 10*time.Second), "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "from the default-named member" {
		t.Fatalf("get: %v %v", resp, err)
	}
	members, err := cli.MemberList(ctxTimeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 1 || members.Members[0].Name != "thaw" {
		t.Fatalf("members %v, want one named thaw", members.Members)
	}
}

// TestConnectWaitsAndSays: an etcd that does not answer is waited for
// until ctx is done, with a warning every dial timeout, and the error
// names the endpoints.
func TestConnectWaitsAndSays(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var logs testlog.Buffer
	// 3 s: ten dial timeouts, so that a loaded machine still logs two.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err = meta.Connect(ctx, []string{"http://" + addr}, meta.ClientOptions{DialTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("connect to nothing: %v", err)
	}
	if n := strings.Count(logs.String(), "etcd does not answer yet"); n < 2 {
		t.Fatalf("%d warnings while waiting:\n%s", n, logs.String())
	}
}

// TestConnectWrongPassword: an etcd that answers "authentication failed"
// fails Connect at once; only silence is waited out.
func TestConnectWrongPassword(t *testing.T) {
	m, err := meta.StartEmbedded(t.Context(), meta.EmbeddedConfig{Dir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cli, err := m.Client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(t.Context(), "root"); return err },
		func() error { _, err := cli.UserAdd(t.Context(), "root", "right-password"); return err },
		func() error { _, err := cli.UserGrantRole(t.Context(), "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(t.Context()); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = meta.Connect(ctx, m.Endpoints(), meta.ClientOptions{Username: "root", Password: "wrong-password", DialTimeout: time.Second})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("a wrong password: %v after %v", err, time.Since(start))
	}
	good, err := meta.Connect(ctx, m.Endpoints(), meta.ClientOptions{Username: "root", Password: "right-password"})
	if err != nil {
		t.Fatalf("the right password: %v", err)
	}
	good.Close()
}

// TestConnectFollowsRoots: a client given Roots verifies etcd on every
// new connection against the bundle as it is then. etcd's certificate is
// renewed by another CA and the client's connections are cut: the same
// client is refused while its bundle holds only the first CA and works
// again, without a new client, once the bundle holds the second.
func TestConnectFollowsRoots(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "etcd.pem"), filepath.Join(dir, "etcd-key.pem")
	first := testtls.Write(t, cert, key) // for 127.0.0.1, its own CA
	poolOf := func(certs ...*x509.Certificate) *x509.CertPool {
		p := x509.NewCertPool()
		for _, c := range certs {
			p.AddCert(c)
		}
		return p
	}
	m, err := meta.StartEmbedded(t.Context(), meta.EmbeddedConfig{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true,
		CertFile: cert, KeyFile: key, ClientTLS: &tls.Config{RootCAs: poolOf(first)}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := testproxy.New(t, m.Endpoints()[0])
	eps := []string{"https://" + p.Addr()}

	var roots atomic.Pointer[x509.CertPool]
	roots.Store(poolOf(first))
	opts := meta.ClientOptions{TLS: &tls.Config{RootCAs: poolOf(first)}, Roots: roots.Load, DialTimeout: time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cli, err := meta.Connect(ctx, eps, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	get := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "k")
		return err
	}
	if err := get(); err != nil {
		t.Fatalf("the first certificate: %v", err)
	}

	// etcd reads its key pair at every handshake.
	second := testtls.Write(t, cert, key)
	p.Cut()
	within(t, 20*time.Second, "the renewed certificate is refused while the bundle holds only the first CA", func() error {
		if get() == nil {
			return errors.New("the client still reads")
		}
		// The reason, which the client's errors do not carry: a new
		// client of the same options fails at once on the certificate.
		if _, err := meta.Connect(ctx, eps, opts); !errors.Is(err, meta.ErrTLS) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			return fmt.Errorf("a new client: %v, want an untrusted-certificate error", err)
		}
		return nil
	})
	roots.Store(poolOf(first, second))
	within(t, 20*time.Second, "the same client trusts the renewed certificate once the bundle holds its CA", get)

	// A client of the bundle read once is still refused.
	fixed := opts
	fixed.Roots = nil
	if _, err := meta.Connect(ctx, eps, fixed); !errors.Is(err, meta.ErrTLS) {
		t.Fatalf("a client without Roots: %v, want %v", err, meta.ErrTLS)
	}
}

// within fails the test unless cond returns nil within d.
func within(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v after %v", what, err, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEmbeddedOwnTLS: an embedded etcd serving TLS and requiring client
// certificates, given no ClientTLS: its own clients trust exactly its
// certificate and present it, also after the pair is renewed; a client
// without a certificate is refused, one with a certificate of the client
// CA bundle is served. A key pair that cannot authenticate the own
// clients stops the start, saying why.
func TestEmbeddedOwnTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "etcd.pem"), filepath.Join(dir, "etcd-key.pem")
	other, otherKey := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	next, nextKey := filepath.Join(dir, "next.pem"), filepath.Join(dir, "next-key.pem")
	etcdCA := testtls.Write(t, cert, key) // self-signed, server and client authentication
	clientCA := testtls.Write(t, other, otherKey)
	renewed := testtls.Write(t, next, nextKey)
	bundle := filepath.Join(dir, "clients.pem")
	writePEM(t, bundle, etcdCA, clientCA, renewed)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m, err := meta.StartEmbedded(ctx, meta.EmbeddedConfig{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true,
		CertFile: cert, KeyFile: key, ClientCAFile: bundle})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	eps := m.Endpoints()
	if !strings.HasPrefix(eps[0], "https://") {
		t.Fatalf("endpoints %v", eps)
	}
	own := func(want string) error {
		cli, err := m.Client(ctx)
		if err != nil {
			return err
		}
		defer cli.Close()
		if _, err := cli.Put(ctx, "k", want); err != nil {
			return err
		}
		got, err := cli.Get(ctx, "k")
		if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != want {
			return fmt.Errorf("get: %v, %v", got, err)
		}
		return nil
	}
	if err := own("v1"); err != nil {
		t.Fatal(err)
	}
	trust := x509.NewCertPool()
	trust.AddCert(etcdCA)
	if _, err := meta.Connect(ctx, eps, meta.ClientOptions{TLS: &tls.Config{RootCAs: trust}, DialTimeout: time.Second}); !errors.Is(err, meta.ErrTLS) ||
		!strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("a client without a certificate: %v, want refused", err)
	}
	pair, err := tls.LoadX509KeyPair(other, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := meta.Connect(ctx, eps, meta.ClientOptions{TLS: &tls.Config{RootCAs: trust, Certificates: []tls.Certificate{pair}}})
	if err != nil {
		t.Fatalf("a client of the bundle: %v", err)
	}
	if got, err := cli.Get(ctx, "k"); err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" {
		t.Fatalf("a client of the bundle reads %v, %v", got, err)
	}
	cli.Close()

	// A renewed pair (signed by a CA of the bundle) replaces the files:
	// etcd and its own clients both read them at the next handshake, so a
	// new own client pins and presents the new certificate.
	for from, to := range map[string]string{next: cert, nextKey: key} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	if err := own("v2"); err != nil {
		t.Fatalf("after renewal: %v", err)
	}

	// Key pairs the own clients cannot present.
	serverOnly, serverOnlyKey := testtls.Files(t) // server authentication only
	for name, tc := range map[string]struct{ cert, key, ca, want string }{
		"not client authentication": {serverOnly, serverOnlyKey, serverOnly, "cannot authenticate the embedded etcd's own clients"},
		"not signed by the bundle":  {cert, key, other, "cannot authenticate the embedded etcd's own clients"},
		"no bundle":                 {cert, key, filepath.Join(dir, "missing.pem"), "client CA bundle"},
	} {
		m, err := meta.StartEmbedded(ctx, meta.EmbeddedConfig{Dir: filepath.Join(dir, "bad"), UnsafeNoFsync: true,
			CertFile: tc.cert, KeyFile: tc.key, ClientCAFile: tc.ca})
		if err == nil {
			m.Close()
		}
		if !errors.Is(err, meta.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrInvalid saying %q", name, err, tc.want)
		}
	}
}

// writePEM writes certs as one PEM bundle.
func writePEM(t *testing.T, path string, certs ...*x509.Certificate) {
	t.Helper()
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
