package daemon

import (
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/thawdb/thaw/internal/testtls"
	"github.com/thawdb/thaw/internal/tlsfail"
)

// TestClientTrustReloadThroughProxy: a client of the tier that reaches it
// through a proxy (HTTPS_PROXY: an HTTP proxy or a SOCKS5 one) follows a
// changed CA bundle too: it opens the CONNECT tunnel or the SOCKS
// connection itself and verifies the server inside it against the bundle
// as it is at the handshake, over HTTP/2, with the proxy's credentials. A
// proxy that refuses the caller is an error saying so, without the
// password.
func TestClientTrustReloadThroughProxy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		start   func(t *testing.T, user, pass string) *countingProxy
		refusal string
	}{
		{"connect", startConnectProxy, "407"},
		{"socks5", startSOCKSProxy, "authentication failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, first, port, trust := renewableServer(t)
			c, err := clientTLS(trust, "tier.ca_file", "", "", slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}

			proxy := tc.start(t, "thaw", "s3cret")
			good := *proxy.url
			good.User = url.UserPassword("thaw", "s3cret")
			hc := newHTTPClientVia(c, http.ProxyURL(&good))
			hc.Transport.(*http.Transport).DisableKeepAlives = true // a tunnel and a handshake per request
			call := func() error { return getOverH2(hc, "127.0.0.1", port) }

			if err := call(); err != nil {
				t.Fatalf("the first certificate through the proxy: %v", err)
			}
			if n := proxy.tunnels.Load(); n != 1 {
				t.Fatalf("%d tunnels, want 1: the request did not go through the proxy", n)
			}
			second := testtls.Write(t, srv.CertFile, srv.KeyFile)
			within10s(t, "the renewed certificate is refused while the bundle holds only the first CA", func() error {
				if err := call(); !tlsfail.Untrusted(err) {
					return fmt.Errorf("%v, want an untrusted-certificate error", err)
				}
				return nil
			})
			replaceBundle(t, trust, append(pemOf(t, first), pemOf(t, second)...))
			within10s(t, "the same client trusts the renewed certificate once the bundle holds its CA", call)
			if err := getOverH2(hc, "localhost", port); !tlsfail.Untrusted(err) {
				t.Fatalf("the certificate for 127.0.0.1 dialled as localhost through the proxy: %v, want an untrusted-certificate error", err)
			}

			wrong := *proxy.url
			wrong.User = url.UserPassword("thaw", "n0t-th1s")
			refused := newHTTPClientVia(c, http.ProxyURL(&wrong))
			if err := getOverH2(refused, "127.0.0.1", port); err == nil || !strings.Contains(err.Error(), tc.refusal) || strings.Contains(err.Error(), "n0t-th1s") {
				t.Fatalf("a proxy refusing the credentials: %v, want %q without the password", err, tc.refusal)
			}
		})
	}
}

// TestProxyKept: the transport of a client following its CA bundle keeps
// the proxies it does not go through itself: those of http:// requests
// (no TLS).
func TestProxyKept(t *testing.T) {
	_, _, _, trust := renewableServer(t)
	c, err := clientTLS(trust, "tier.ca_file", "", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		proxy, target string
		kept          bool
	}{
		{"http://proxy:3128", "https://tier:7070/x", false},
		{"https://proxy:3128", "https://tier:7070/x", false},
		{"http://proxy:3128", "http://tier:7070/x", true},
		{"socks5://proxy:1080", "https://tier:7070/x", false},
		{"socks5h://proxy:1080", "https://tier:7070/x", false},
		{"socks5://proxy:1080", "http://tier:7070/x", true},
	} {
		pu, _ := url.Parse(tc.proxy)
		tr := newHTTPClientVia(c, http.ProxyURL(pu)).Transport.(*http.Transport)
		req, _ := http.NewRequest(http.MethodGet, tc.target, nil)
		got, err := tr.Proxy(req)
		if err != nil || (got != nil) != tc.kept {
			t.Errorf("%s for %s: the transport's proxy %v, %v; want kept %t", tc.proxy, tc.target, got, err, tc.kept)
		}
	}
}

// countingProxy is a proxy for tests that opens connections for callers
// presenting its user and password, and counts them.
type countingProxy struct {
	url     *url.URL
	tunnels atomic.Int32
}

// startConnectProxy starts an HTTP proxy that opens CONNECT tunnels.
func startConnectProxy(t *testing.T, user, pass string) *countingProxy {
	t.Helper()
	p := &countingProxy{}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodConnect:
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		case r.Header.Get("Proxy-Authorization") != want:
			http.Error(w, "who are you", http.StatusProxyAuthRequired)
			return
		}
		dst, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			dst.Close()
			return
		}
		p.tunnels.Add(1)
		if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			conn.Close()
			dst.Close()
			return
		}
		go func() {
			_, _ = io.Copy(dst, brw)
			dst.Close()
		}()
		go func() {
			_, _ = io.Copy(conn, dst)
			conn.Close()
		}()
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p.url = u
	return p
}

// startSOCKSProxy starts a SOCKS5 proxy (RFC 1928) that requires
// username/password authentication (RFC 1929) and serves CONNECT.
func startSOCKSProxy(t *testing.T, user, pass string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &countingProxy{url: &url.URL{Scheme: "socks5", Host: ln.Addr().String()}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serveSOCKS(c, user, pass)
		}
	}()
	return p
}

func (p *countingProxy) serveSOCKS(c net.Conn, user, pass string) {
	fail := func() { c.Close() }
	read := func(n int) []byte {
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			return nil
		}
		return b
	}
	// Greeting: version, methods; username/password (2) is required.
	hdr := read(2)
	if hdr == nil || hdr[0] != 5 {
		fail()
		return
	}
	if methods := read(int(hdr[1])); methods == nil || !slices.Contains(methods, 2) {
		_, _ = c.Write([]byte{5, 0xff})
		fail()
		return
	}
	_, _ = c.Write([]byte{5, 2})
	// Username/password: version 1, lengths and strings.
	auth := read(2)
	if auth == nil || auth[0] != 1 {
		fail()
		return
	}
	u := read(int(auth[1]))
	pl := read(1)
	if u == nil || pl == nil {
		fail()
		return
	}
	pw := read(int(pl[0]))
	if string(u) != user || string(pw) != pass {
		_, _ = c.Write([]byte{1, 1})
		fail()
		return
	}
	_, _ = c.Write([]byte{1, 0})
	// Request: version, CONNECT (1), reserved, then the address.
	req := read(4)
	if req == nil || req[0] != 5 || req[1] != 1 {
		fail()
		return
	}
	var host string
	switch req[3] {
	case 1:
		host = net.IP(read(4)).String()
	case 4:
		host = net.IP(read(16)).String()
	case 3:
		if n := read(1); n != nil {
			host = string(read(int(n[0])))
		}
	}
	port := read(2)
	if host == "" || port == nil {
		fail()
		return
	}
	dst, err := net.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(int(port[0])<<8|int(port[1]))))
	if err != nil {
		_, _ = c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0}) // connection refused
		fail()
		return
	}
	p.tunnels.Add(1)
	if _, err := c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}); err != nil {
		fail()
		dst.Close()
		return
	}
	go func() {
		_, _ = io.Copy(dst, c)
		dst.Close()
	}()
	_, _ = io.Copy(c, dst)
	c.Close()
}
