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
	"strings"
	"sync/atomic"
	"testing"

	"github.com/thawdb/thaw/internal/testtls"
	"github.com/thawdb/thaw/internal/tlsfail"
)

// TestClientTrustReloadThroughProxy: a client of the tier that reaches it
// through an HTTP proxy (HTTPS_PROXY) follows a changed CA bundle too: it
// opens the CONNECT tunnel itself and verifies the server inside it
// against the bundle as it is at the handshake, over HTTP/2, with the
// proxy's credentials. A proxy that refuses the tunnel is an error saying
// what it answered.
func TestClientTrustReloadThroughProxy(t *testing.T) {
	srv, first, port, trust := renewableServer(t)
	c, err := clientTLS(trust, "tier.ca_file", "", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}

	proxy := startConnectProxy(t, "thaw", "s3cret")
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
	wrong.User = url.UserPassword("thaw", "wrong")
	refused := newHTTPClientVia(c, http.ProxyURL(&wrong))
	if err := getOverH2(refused, "127.0.0.1", port); err == nil || !strings.Contains(err.Error(), "407") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("a proxy refusing the credentials: %v, want its 407 without the password", err)
	}
}

// TestProxyKept: the transport of a client following its CA bundle keeps
// the proxies it does not tunnel itself: HTTP proxies for http:// requests
// and SOCKS proxies (with their TLS, the bundle as read at start).
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
		{"socks5://proxy:1080", "https://tier:7070/x", true},
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

// connectProxy is an HTTP proxy that opens CONNECT tunnels for callers
// presenting its user and password, and counts them.
type connectProxy struct {
	url     *url.URL
	tunnels atomic.Int32
}

func startConnectProxy(t *testing.T, user, pass string) *connectProxy {
	t.Helper()
	p := &connectProxy{}
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
