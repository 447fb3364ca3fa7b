package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/internal/testtls"
	"github.com/thawdb/thaw/internal/tlsfail"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
	"github.com/thawdb/thaw/tier/tierclient"
)

// testCert is a listener tls section with testtls's certificate, which
// is also its CA bundle.
func testCert(t *testing.T) *ListenerTLS {
	cert, key := testtls.Files(t)
	return &ListenerTLS{CertFile: cert, KeyFile: key, CAFile: cert}
}

// TestRolesTLS runs thaw coordinator and thaw tablet with a tls section:
// both serve HTTPS only and publish https:// addresses, and they reach each
// other over TLS (the coordinator pushes the assignment to the tablet
// server, the tablet server reports its snapshot to the coordinator). A
// client trusting the CA bundle writes and reads rows; one that does not
// fails at once, with an untrusted-certificate error rather than retries;
// plain HTTP gets no answer from the services.
func TestRolesTLS(t *testing.T) {
	roles := startRoleTest(t, t.TempDir())
	lt := testCert(t)
	cc, tc := roles.coordinator(), roles.tablet("ts-1")
	cc.TLS, tc.TLS = lt, lt
	ctx := t.Context()
	ca, ta := runRoles(t, cc, tc)
	ca = "https://" + ca
	trust, err := ClientTLS(lt.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	coord := tierv1connect.NewCoordinatorServiceClient(NewHTTPClient(trust), ca)

	retry(t, "the tablet server registered with its https address", func() error {
		s, err := coord.ListServers(ctx, connect.NewRequest(&tierv1.ListServersRequest{}))
		if err == nil && (len(s.Msg.GetServers()) != 1 || s.Msg.GetServers()[0].GetAddress() != "https://"+ta) {
			err = errors.New(s.Msg.String())
		}
		return err
	})
	createTable(t, coord, "d", "t", 2, &tierv1.Column{Name: "k", Type: "BIGINT"}, &tierv1.Column{Name: "v", Type: "STRING"})
	checkTierWorks(t, newTierClient(t, ca, tierclient.WithTLSConfig(trust)), coord)

	// A client without the CA: refused at once, as untrusted.
	start := time.Now()
	uctx, ucancel := context.WithTimeout(ctx, 20*time.Second)
	defer ucancel()
	if _, err := tierclient.New(uctx, ca); !tlsfail.Untrusted(err) {
		t.Fatalf("a client without the CA: %v, want an untrusted-certificate error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the untrusted client took %v to fail (retried?)", d)
	}
	// Plain HTTP to the TLS listeners: no service answers.
	for _, hostPort := range []string{strings.TrimPrefix(ca, "https://"), ta} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort+PathReadyz, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("plain HTTP to %s answered 200", hostPort)
			}
		}
	}
}

// TestTLSStartErrors: a role whose certificate, key or CA bundle cannot be
// read does not start, and says which.
func TestTLSStartErrors(t *testing.T) {
	roles := startRoleTest(t, t.TempDir())
	good := testCert(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tls  ListenerTLS
		want string
	}{
		{"missing key", ListenerTLS{CertFile: good.CertFile, KeyFile: filepath.Join(t.TempDir(), "none.pem")}, "tls"},
		{"key of another file", ListenerTLS{CertFile: good.CertFile, KeyFile: good.CertFile}, "tls"},
		{"CA bundle without a certificate", ListenerTLS{CertFile: good.CertFile, KeyFile: good.KeyFile, CAFile: notPEM}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := roles.coordinator()
			cc.TLS = &tc.tls
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err := RunCoordinator(ctx, cc, RunOptions{OnReady: func(string) { t.Error("the coordinator started") }})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RunCoordinator: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := ClientTLS(notPEM); err == nil {
		t.Fatal("ClientTLS of a file without a certificate succeeded")
	}
}

// TestPromoterTLS: a promoter whose external tier serves HTTPS reaches it
// with tier.ca_file (its tier and bulk-load clients promote a partition
// into it), and serves its own API over HTTPS.
func TestPromoterTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cfg := promoterTestConfig(t)
	lt := testCert(t)
	e := startTier(t, ctx, EmbeddedConfig{DataDir: filepath.Join(cfg.DataDir, "tier"), TabletServers: 1, TLS: lt})
	no := false
	cfg.Tier = PromoterTierConfig{Embedded: &no, Address: e.Address(), CAFile: lt.CAFile}
	cfg.Tier.Etcd.defaults()
	cfg.Tier.Etcd.Endpoints = e.EtcdEndpoints()
	cfg.TLS = &ListenerTLS{CertFile: lt.CertFile, KeyFile: lt.KeyFile}
	d, err := StartPromoter(ctx, cfg, PromoterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	trust, err := ClientTLS(lt.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	api, err := promoterhttp.NewClient(d.URL(), NewHTTPClient(trust))
	if err != nil {
		t.Fatal(err)
	}
	items, err := api.Promote(ctx, promoter.Request{Table: "shop.events", Partition: "2024-01-03"})
	if err != nil || len(items) != 1 {
		t.Fatalf("promote over TLS: %v, %v", items, err)
	}
	retry(t, "the promotion committed", func() error {
		ps, err := api.Promotions(ctx, "")
		if err == nil && (len(ps) != 1 || ps[0].Record.Phase != promoter.PhaseCommitted) {
			err = fmt.Errorf("promotions %+v", ps)
		}
		return err
	})
	if !strings.HasPrefix(d.URL(), "https://") {
		t.Fatalf("promoter URL %s", d.URL())
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.Address()+"/v1/policies", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP to the promoter's TLS listener answered 200")
		}
	}
	bad := cfg
	bad.TLS = &ListenerTLS{CertFile: lt.CertFile, KeyFile: lt.KeyFile, CAFile: lt.CAFile}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "tier.ca_file") {
		t.Fatalf("tls.ca_file in a promoter config: %v", err)
	}
}

// TestCertReload: the listener serves a renewed certificate without a
// restart, and keeps the previous one (logging why) while the renewed
// files do not load.
func TestCertReload(t *testing.T) {
	dir := t.TempDir()
	lt := &ListenerTLS{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	first := testtls.Write(t, lt.CertFile, lt.KeyFile)
	var logs testlog.Buffer
	url := "https://" + serveTLS(t, "127.0.0.1", lt, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	pool := x509.NewCertPool()
	pool.AddCert(first)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}
	serving := func() *x509.Certificate {
		t.Helper()
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0]
	}
	if got := serving(); !got.Equal(first) {
		t.Fatalf("serving serial %v, want %v", got.SerialNumber, first.SerialNumber)
	}

	second := testtls.Write(t, lt.CertFile, lt.KeyFile)
	pool.AddCert(second)
	deadline := time.Now().Add(10 * time.Second)
	for got := serving(); !got.Equal(second); got = serving() {
		if time.Now().After(deadline) {
			t.Fatalf("still serving serial %v after the renewal to %v", got.SerialNumber, second.SerialNumber)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "certificate reloaded") {
		t.Errorf("no reload logged: %s", logs.String())
	}

	// A renewal that does not load: the key of another certificate.
	other := t.TempDir()
	testtls.Write(t, filepath.Join(other, "c.pem"), filepath.Join(other, "k.pem"))
	key, err := os.ReadFile(filepath.Join(other, "k.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lt.KeyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "does not load") {
		if got := serving(); !got.Equal(second) {
			t.Fatalf("serving serial %v after a broken renewal, want %v", got.SerialNumber, second.SerialNumber)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning of the broken renewal: %s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := serving(); !got.Equal(second) {
		t.Fatalf("serving serial %v after a broken renewal, want %v", got.SerialNumber, second.SerialNumber)
	}
}

// TestMutualTLS runs thaw coordinator and thaw tablet with
// tls.client_ca_file: they reach each other presenting their own
// certificate, a client with a certificate the CA signed is served, one
// without gets unauthenticated on every service, and the health probes
// answer without one.
func TestMutualTLS(t *testing.T) {
	roles := startRoleTest(t, t.TempDir())
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testtls.Write(t, cert, key) // self-signed: its own CA, for servers and clients
	lt := &ListenerTLS{CertFile: cert, KeyFile: key, CAFile: cert, ClientCAFile: cert}
	cc, tc := roles.coordinator(), roles.tablet("ts-1")
	cc.TLS, tc.TLS = lt, lt
	ctx := t.Context()
	ca, ta := runRoles(t, cc, tc)
	ca = "https://" + ca
	withCert, err := ClientTLSFiles(cert, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := ClientTLS(cert)
	if err != nil {
		t.Fatal(err)
	}
	coord := tierv1connect.NewCoordinatorServiceClient(NewHTTPClient(withCert), ca)
	awaitOneServer(t, coord)
	createTable(t, coord, "d", "t", 1, &tierv1.Column{Name: "k", Type: "BIGINT"})
	client, err := tierclient.New(ctx, ca, tierclient.WithTLSConfig(withCert))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	target := tierclient.Target{Database: "d", Table: "t"}
	retry(t, "upsert with a client certificate", func() error { return client.Upsert(ctx, target, []kv.Row{{int64(7)}}) })
	retry(t, "the tablet server reports a snapshot with its certificate", func() error {
		_, err := coord.TriggerSnapshot(ctx, connect.NewRequest(&tierv1.TriggerSnapshotRequest{Target: &tierv1.TargetPath{Database: "d", Table: "t"}}))
		return err
	})

	// Without a client certificate: unauthenticated, on the coordinator
	// and on the tablet server; the probes still answer.
	bare := NewHTTPClient(noCert)
	if _, err := tierv1connect.NewCoordinatorServiceClient(bare, ca).ListServers(ctx, connect.NewRequest(&tierv1.ListServersRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("coordinator without a client certificate: %v", err)
	}
	if _, err := tierv1connect.NewTabletServiceClient(bare, "https://"+ta).Lookup(ctx, connect.NewRequest(&tierv1.LookupRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("tablet server without a client certificate: %v", err)
	}
	for _, base := range []string{ca, "https://" + ta} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+PathHealthz, nil)
		resp, err := bare.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s%s without a client certificate: %d", base, PathHealthz, resp.StatusCode)
		}
	}
	if _, err := ClientTLSFiles(cert, cert, ""); err == nil {
		t.Fatal("a client certificate without its key was accepted")
	}
}

// serveTLS serves h (nil: 404s) over HTTPS with lt (its tls section,
// mutual TLS included) on a free port of ip until the test ends, and
// returns the listener's host:port.
func serveTLS(t *testing.T, ip string, lt *ListenerTLS, h http.Handler, log *slog.Logger) string {
	t.Helper()
	server, _, err := lt.load(log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() {
		if h == nil {
			h = http.NotFoundHandler()
		}
		done <- newHTTPServer(ln, lt.wrap(h), tierHTTPLimits, time.Second, slog.New(slog.DiscardHandler), server).Start(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// TestCAReload: the bundle a running listener accepts client certificates
// from (tls.client_ca_file) is read again when it changes and applies to
// the next handshake, with Go's checks kept (an unaccepted client
// certificate fails, and so does a server certificate for another host)
// and HTTP/2 still negotiated. A bundle that does not parse is logged and
// the previous one kept.
func TestCAReload(t *testing.T) {
	dir := t.TempDir()
	pem := func(name string) (cert, key string) {
		return filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	}
	srvCert, srvKey := pem("server")
	aCert, aKey := pem("client-a")
	bCert, bKey := pem("client-b")
	for _, f := range [][2]string{{srvCert, srvKey}, {aCert, aKey}, {bCert, bKey}} {
		testtls.Write(t, f[0], f[1]) // each self-signed: its own CA
	}
	bundle := func(file string, pemText []byte) { t.Helper(); replaceBundle(t, file, pemText) }
	read := func(file string) []byte {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	clientCAs, trust := filepath.Join(dir, "client-cas.pem"), filepath.Join(dir, "trust.pem")
	bundle(clientCAs, read(aCert))
	bundle(trust, read(srvCert))

	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	_, port, err := net.SplitHostPort(serveTLS(t, "127.0.0.1", &ListenerTLS{CertFile: srvCert, KeyFile: srvKey, ClientCAFile: clientCAs}, nil, log))
	if err != nil {
		t.Fatal(err)
	}

	// Two processes' clients: they present certificate A or B and trust
	// the bundle trust.
	client := func(cert, key string) *http.Client {
		_, ctls, err := (&ListenerTLS{CertFile: cert, KeyFile: key, CAFile: trust, ClientCAFile: clientCAs}).load(log)
		if err != nil {
			t.Fatal(err)
		}
		hc := newHTTPClient(ctls)
		hc.Transport.(*http.Transport).DisableKeepAlives = true // a handshake per request
		return hc
	}
	withA, withB := client(aCert, aKey), client(bCert, bKey)
	call := func(hc *http.Client, host string) error { return getOverH2(hc, host, port) }
	eventually := func(what string, cond func() error) { t.Helper(); within10s(t, what, cond) }

	if err := call(withA, "127.0.0.1"); err != nil {
		t.Fatalf("client certificate A: %v", err)
	}
	if err := call(withA, "localhost"); !tlsfail.Untrusted(err) {
		t.Fatalf("the server's certificate for another name (127.0.0.1, dialled as localhost): %v, want an untrusted-certificate error", err)
	}
	if err := call(withB, "127.0.0.1"); err == nil {
		t.Fatal("a client certificate outside tls.client_ca_file was accepted")
	}

	bundle(clientCAs, read(bCert))
	eventually("client certificate B is accepted once tls.client_ca_file holds its CA", func() error { return call(withB, "127.0.0.1") })
	if err := call(withA, "127.0.0.1"); err == nil {
		t.Fatal("client certificate A was accepted after its CA left tls.client_ca_file")
	}
	if !strings.Contains(logs.String(), "CA bundle reloaded") {
		t.Errorf("no reload logged: %s", logs.String())
	}

	brokenBundleKept(t, &logs, func() { bundle(clientCAs, []byte("not a certificate")) }, func() error { return call(withB, "127.0.0.1") })
}

// TestClientChecksServerIP: the tier's own clients check that the
// server's certificate names the IP address they dialled, not only that a
// trusted CA signed it: a certificate for 127.0.0.1 served at 127.0.0.2
// is refused.
func TestClientChecksServerIP(t *testing.T) {
	dir := t.TempDir()
	lt := &ListenerTLS{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	testtls.Write(t, lt.CertFile, lt.KeyFile) // for 127.0.0.1, its own CA
	lt.CAFile = lt.CertFile
	log := slog.New(slog.DiscardHandler)
	_, ctls, err := lt.load(log)
	if err != nil {
		t.Fatal(err)
	}
	hc := newHTTPClient(ctls)
	for ip, trusted := range map[string]bool{"127.0.0.1": true, "127.0.0.2": false} {
		resp, err := hc.Get("https://" + serveTLS(t, ip, lt, nil, log) + "/x")
		if err == nil {
			resp.Body.Close()
		}
		if trusted && err != nil || !trusted && !tlsfail.Untrusted(err) {
			t.Errorf("%s: %v (want trusted %t)", ip, err, trusted)
		}
	}
}

// TestClientCertReload: a long-running client (the promoter's
// tier.cert_file and tier.key_file) presents its renewed client
// certificate without a restart; a key pair that does not load fails at
// start.
func TestClientCertReload(t *testing.T) {
	dir := t.TempDir()
	srv := &ListenerTLS{CertFile: filepath.Join(dir, "srv.pem"), KeyFile: filepath.Join(dir, "srv-key.pem"), ClientCAFile: filepath.Join(dir, "client-cas.pem")}
	srvCert := testtls.Write(t, srv.CertFile, srv.KeyFile)
	cert, key := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	first := testtls.Write(t, cert, key)
	second := testtls.Write(t, filepath.Join(dir, "next.pem"), filepath.Join(dir, "next-key.pem"))
	var cas []byte
	for _, f := range []string{cert, filepath.Join(dir, "next.pem")} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cas = append(cas, b...)
	}
	if err := os.WriteFile(srv.ClientCAFile, cas, 0o600); err != nil {
		t.Fatal(err)
	}
	// The server answers with the serial of the client certificate presented.
	addr := serveTLS(t, "127.0.0.1", srv, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.TLS.PeerCertificates[0].SerialNumber)
	}), slog.New(slog.DiscardHandler))

	trust := filepath.Join(dir, "trust.pem")
	if err := os.WriteFile(trust, pemOf(t, srvCert), 0o600); err != nil {
		t.Fatal(err)
	}
	ctls, err := clientTLS(trust, "tier.ca_file", cert, key, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	hc := newHTTPClient(ctls)
	hc.Transport.(*http.Transport).DisableKeepAlives = true
	presented := func() string {
		t.Helper()
		resp, err := hc.Get("https://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := presented(); got != first.SerialNumber.String() {
		t.Fatalf("presented %s, want %s", got, first.SerialNumber)
	}
	for src, dst := range map[string]string{filepath.Join(dir, "next.pem"): cert, filepath.Join(dir, "next-key.pem"): key} {
		if err := os.Rename(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for got := presented(); got != second.SerialNumber.String(); got = presented() {
		if time.Now().After(deadline) {
			t.Fatalf("still presenting %s after the renewal to %s", got, second.SerialNumber)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := clientTLS(trust, "tier.ca_file", cert, trust, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a client key pair that does not load was accepted")
	}
}

// TestClientTrustReload: a long-running client of the tier (the promoter's
// tier.ca_file, a role's tls.ca_file) follows a changed CA bundle without a
// restart: after the server's certificate is renewed by another CA, the
// same client fails with an untrusted-certificate error until the bundle
// holds that CA, then succeeds over HTTP/2, the name still checked. A
// bundle that does not parse is logged and the previous one kept. The
// fixed configuration (etcd's client) keeps the bundle read at start.
func TestClientTrustReload(t *testing.T) {
	srv, first, port, trust := renewableServer(t)
	setTrust := func(pemText []byte) { t.Helper(); replaceBundle(t, trust, pemText) }

	var logs testlog.Buffer
	c, err := clientTLS(trust, "tier.ca_file", "", "", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	hc, fixed := newHTTPClient(c), NewHTTPClient(c.TLS())
	for _, h := range []*http.Client{hc, fixed} {
		h.Transport.(*http.Transport).DisableKeepAlives = true // a handshake per request
	}
	call := func(h *http.Client, host string) error { return getOverH2(h, host, port) }
	eventually := func(what string, cond func() error) { t.Helper(); within10s(t, what, cond) }
	if err := call(hc, "127.0.0.1"); err != nil {
		t.Fatalf("the first certificate: %v", err)
	}

	// The server's certificate is renewed by another CA (its own).
	second := testtls.Write(t, srv.CertFile, srv.KeyFile)
	eventually("the renewed certificate is refused while the bundle holds only the first CA", func() error {
		if err := call(hc, "127.0.0.1"); !tlsfail.Untrusted(err) {
			return fmt.Errorf("%v, want an untrusted-certificate error", err)
		}
		return nil
	})
	setTrust(append(pemOf(t, first), pemOf(t, second)...))
	eventually("the same client trusts the renewed certificate once the bundle holds its CA", func() error { return call(hc, "127.0.0.1") })
	if err := call(hc, "localhost"); !tlsfail.Untrusted(err) {
		t.Fatalf("the certificate for 127.0.0.1 dialled as localhost: %v, want an untrusted-certificate error", err)
	}
	if err := call(fixed, "127.0.0.1"); !tlsfail.Untrusted(err) {
		t.Fatalf("the fixed configuration: %v, want the bundle read at start (an untrusted-certificate error)", err)
	}
	if !strings.Contains(logs.String(), "CA bundle reloaded") {
		t.Errorf("no reload logged: %s", logs.String())
	}

	brokenBundleKept(t, &logs, func() { setTrust([]byte("not a certificate")) }, func() error { return call(hc, "127.0.0.1") })
}

// renewableServer serves HTTPS on 127.0.0.1 with a new self-signed
// certificate in srv's files (renew it with testtls.Write on them) and
// returns srv, that certificate, the port and a CA bundle file trusting
// only it.
func renewableServer(t *testing.T) (srv *ListenerTLS, first *x509.Certificate, port, trust string) {
	t.Helper()
	dir := t.TempDir()
	srv = &ListenerTLS{CertFile: filepath.Join(dir, "srv.pem"), KeyFile: filepath.Join(dir, "srv-key.pem")}
	first = testtls.Write(t, srv.CertFile, srv.KeyFile) // for 127.0.0.1, its own CA
	addr := serveTLS(t, "127.0.0.1", srv, nil, slog.New(slog.DiscardHandler))
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	trust = filepath.Join(dir, "trust.pem")
	replaceBundle(t, trust, pemOf(t, first))
	return srv, first, port, trust
}

// replaceBundle replaces file with pemText, by a rename.
func replaceBundle(t *testing.T, file string, pemText []byte) {
	t.Helper()
	if err := os.WriteFile(file+".new", pemText, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
}

// brokenBundleKept breaks a CA bundle (breakIt) and checks that the
// reloader logs it and call keeps succeeding with the previous bundle.
func brokenBundleKept(t *testing.T, logs *testlog.Buffer, breakIt func(), call func() error) {
	t.Helper()
	breakIt()
	within10s(t, "the bundle that does not parse is logged", func() error {
		if err := call(); err != nil {
			t.Fatalf("after a bundle that does not parse, the previous one: %v", err)
		}
		if !strings.Contains(logs.String(), "does not load") {
			return errors.New("not logged yet")
		}
		return nil
	})
	if err := call(); err != nil {
		t.Fatalf("after a bundle that does not parse, the previous one: %v", err)
	}
}

// getOverH2 gets /x from the test listener at host:port over https and
// wants its 404 over HTTP/2.
func getOverH2(hc *http.Client, host, port string) error {
	resp, err := hc.Get(fmt.Sprintf("https://%s:%s/x", host, port))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.ProtoMajor != 2 {
		return fmt.Errorf("status %d over HTTP/%d", resp.StatusCode, resp.ProtoMajor)
	}
	return nil
}

// within10s polls cond every 100 ms until it returns nil, and fails the
// test with what and cond's last error after 10 s.
func within10s(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for err := cond(); err != nil; err = cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pemOf is the PEM encoding of c.
func pemOf(t *testing.T, c *x509.Certificate) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// TestReloaderFileChangedDuringStart: a file rewritten between the first
// load and the first digest (an api_callers_file rotated while the daemon
// starts) is loaded at the next look; it was not until the next edit
// (the value came from the old contents, the digest from the new).
func TestReloaderFileChangedDuringStart(t *testing.T) {
	f := filepath.Join(t.TempDir(), "callers")
	if err := os.WriteFile(f, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	first := true
	load := func() (string, error) {
		b, err := os.ReadFile(f)
		if first {
			first = false
			if werr := os.WriteFile(f, []byte("new"), 0o600); werr != nil {
				t.Fatal(werr)
			}
		}
		return string(b), err
	}
	r, err := newReloader([]string{f}, load, func(string) {}, func(err error) { t.Error(err) })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(certCheckInterval + 50*time.Millisecond)
	if got := r.get(); got != "new" {
		t.Fatalf("after the file changed to %q during start, the reloader serves %q", "new", got)
	}
}
