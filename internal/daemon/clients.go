package daemon

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/proxy"

	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
)

// NewHTTPClient returns an HTTP client for the tier's RPCs: HTTP/1.1 and
// HTTP/2, over TLS for https:// URLs (trusting tc's RootCAs; nil: the
// system's roots) and without (h2c with prior knowledge) for http:// URLs,
// so that gRPC works too.
func NewHTTPClient(tc *tls.Config) *http.Client {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Protocols = &protos
	tr.MaxIdleConnsPerHost = 64
	if tc != nil {
		tr.TLSClientConfig = tc.Clone()
	}
	return &http.Client{Transport: tr}
}

// newHTTPClient is NewHTTPClient for a process's own clients: with a CA
// bundle file, every new TLS connection verifies the server against the
// bundle as it is at the handshake (c.roots), so a changed bundle applies
// without a restart; names are checked as before (the dialled host, an IP
// address against the certificate's IP addresses). That holds through a
// proxy too (HTTPS_PROXY, NO_PROXY: http.ProxyFromEnvironment): the client
// opens the HTTP proxy's CONNECT tunnel (tunnel) or the SOCKS5 proxy's
// connection itself and shakes hands with the server inside it.
func newHTTPClient(c *clientConfig) *http.Client {
	return newHTTPClientVia(c, http.ProxyFromEnvironment)
}

// newHTTPClientVia is newHTTPClient with the proxy of each request chosen
// by proxy (nil URL: none).
func newHTTPClientVia(c *clientConfig, proxy func(*http.Request) (*url.URL, error)) *http.Client {
	hc := NewHTTPClient(c.TLS())
	tr := hc.Transport.(*http.Transport)
	tr.Proxy = proxy
	if c == nil || c.roots == nil {
		return hc
	}
	// An https:// request through a proxy would get the transport's own
	// TLS, with the bundle read at start: DialTLSContext goes through the
	// proxy instead (every scheme the transport knows).
	tunnels := func(pu *url.URL) bool { return pu != nil && proxySchemes[pu.Scheme] }
	tr.Proxy = func(req *http.Request) (*url.URL, error) {
		pu, err := proxy(req)
		if err == nil && req.URL.Scheme == "https" && tunnels(pu) {
			return nil, nil
		}
		return pu, err
	}
	direct := tr.DialContext
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		pu, err := proxy(&http.Request{URL: &url.URL{Scheme: "https", Host: addr}})
		if err != nil {
			return nil, fmt.Errorf("daemon: proxy for %s: %w", addr, err)
		}
		switch {
		case !tunnels(pu):
			return direct(ctx, network, addr)
		case pu.Scheme == "socks5" || pu.Scheme == "socks5h":
			return socks(ctx, direct, pu, addr)
		}
		return tunnel(ctx, direct, pu, addr)
	}
	tr.DialTLSContext = dialTLS(dial, c.tls, c.roots.get, []string{"h2", "http/1.1"}, tr.TLSHandshakeTimeout)
	return hc
}

// proxySchemes are the proxy URL schemes Go's transport knows, all of which
// newHTTPClientVia's dialer handles itself.
var proxySchemes = map[string]bool{"http": true, "https": true, "socks5": true, "socks5h": true}

// socks connects to addr through the SOCKS5 proxy at pu (with pu's user and
// password as username/password authentication), as Go's transport does:
// the proxy resolves addr's host, for socks5:// and socks5h:// alike.
func socks(ctx context.Context, dial dialFunc, pu *url.URL, addr string) (net.Conn, error) {
	d, err := proxy.FromURL(pu, dial)
	if err != nil {
		return nil, fmt.Errorf("daemon: proxy %s: %w", pu.Redacted(), err)
	}
	conn, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("daemon: proxy %s: tunnel to %s: %w", pu.Redacted(), addr, err)
	}
	return conn, nil
}

// dialFunc is a context dialer as a proxy.Dialer.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (f dialFunc) Dial(network, addr string) (net.Conn, error) {
	return f(context.Background(), network, addr)
}

func (f dialFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

// tunnel asks the HTTP proxy at pu (http:// or https://, the latter verified
// against the system's roots; with pu's user and password as Basic proxy
// authorization) for a CONNECT tunnel to addr and returns the connection,
// ready for the TLS handshake with addr.
func tunnel(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), pu *url.URL, addr string) (net.Conn, error) {
	paddr := pu.Host
	if pu.Port() == "" {
		port := "80"
		if pu.Scheme == "https" {
			port = "443"
		}
		paddr = net.JoinHostPort(pu.Hostname(), port)
	}
	raw, err := dial(ctx, "tcp", paddr)
	if err != nil {
		return nil, fmt.Errorf("daemon: proxy %s: %w", pu.Redacted(), err)
	}
	fail := func(err error) (net.Conn, error) {
		raw.Close()
		return nil, fmt.Errorf("daemon: proxy %s: tunnel to %s: %w", pu.Redacted(), addr, err)
	}
	// The exchange with the proxy ends when ctx does.
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	conn := raw
	if pu.Scheme == "https" {
		tc := tls.Client(raw, &tls.Config{MinVersion: tls.VersionTLS12, ServerName: pu.Hostname()})
		if err := tc.HandshakeContext(ctx); err != nil {
			stop()
			return fail(err)
		}
		conn = tc
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: make(http.Header)}
	if u := pu.User; u != nil {
		pass, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pass)))
	}
	br := bufio.NewReader(conn)
	var resp *http.Response
	if err = req.Write(conn); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() && err == nil {
		err = context.Cause(ctx)
	}
	switch {
	case err != nil:
		return fail(err)
	case resp.StatusCode != http.StatusOK:
		return fail(fmt.Errorf("the proxy answered %s", resp.Status))
	case br.Buffered() > 0:
		return fail(errors.New("the proxy sent data before the server's TLS handshake"))
	}
	return conn, nil
}

// dialTLS returns a TLS dialer (an http.Transport's DialTLSContext, a
// Kafka client's dialer): it dials addr with dial (the transport's own
// DialContext, a net.Dialer's) and runs the TLS handshake with tc,
// trusting roots() as it is now (nil: the system's roots) and naming the
// dialled host unless tc names a server, offering protos by ALPN (nil:
// tc's), within handshakeTimeout (0: no limit beyond ctx).
func dialTLS(dial func(ctx context.Context, network, addr string) (net.Conn, error), tc *tls.Config, roots func() *x509.CertPool, protos []string, handshakeTimeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		cfg := tc.Clone()
		cfg.RootCAs = roots()
		if cfg.ServerName == "" {
			cfg.ServerName = host
		}
		if protos != nil {
			cfg.NextProtos = protos
		}
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		hctx := ctx
		if handshakeTimeout > 0 {
			var cancel context.CancelFunc
			hctx, cancel = context.WithTimeout(ctx, handshakeTimeout)
			defer cancel()
		}
		tconn := tls.Client(conn, cfg)
		if err := tconn.HandshakeContext(hctx); err != nil {
			conn.Close()
			return nil, err
		}
		return tconn, nil
	}
}

// NewCLIHTTPClient is NewHTTPClient trusting $THAW_TLS_CA.
func NewCLIHTTPClient() (*http.Client, error) {
	tc, err := ClientTLSFromEnv()
	if err != nil {
		return nil, err
	}
	return NewHTTPClient(tc), nil
}

// BaseURL turns a registered address ("host:port", "host:port/t/ts-1" or
// a URL) into a base URL for connect clients.
func BaseURL(address string) string {
	address = strings.TrimRight(address, "/")
	if strings.Contains(address, "://") {
		return address
	}
	return "http://" + address
}

// tabletClients caches one TabletService client per address.
type tabletClients struct {
	hc *http.Client
	mu sync.Mutex
	m  map[string]tierv1connect.TabletServiceClient
}

func newTabletClients(hc *http.Client) *tabletClients {
	return &tabletClients{hc: hc, m: make(map[string]tierv1connect.TabletServiceClient)}
}

func (c *tabletClients) get(address string) tierv1connect.TabletServiceClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.m[address]
	if !ok {
		cl = tierv1connect.NewTabletServiceClient(c.hc, BaseURL(address))
		c.m[address] = cl
	}
	return cl
}

// BearerFromEnv returns the connect client option that sends the bearer
// token of THAW_TOKEN with every call, none when it is unset.
func BearerFromEnv() []connect.ClientOption {
	tok := os.Getenv(EnvToken)
	if tok == "" {
		return nil
	}
	return []connect.ClientOption{connect.WithInterceptors(bulkloadclient.Bearer(tok))}
}
