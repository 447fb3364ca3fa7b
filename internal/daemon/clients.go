package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

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
// address against the certificate's IP addresses). Requests through an
// HTTP proxy (HTTPS_PROXY) still use the bundle as read at start.
func newHTTPClient(c *clientConfig) *http.Client {
	hc := NewHTTPClient(c.TLS())
	if c == nil || c.roots == nil {
		return hc
	}
	tr := hc.Transport.(*http.Transport)
	tr.DialTLSContext = dialTLS(tr.DialContext, c.tls, c.roots.get, []string{"h2", "http/1.1"}, tr.TLSHandshakeTimeout)
	return hc
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
