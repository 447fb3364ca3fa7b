package daemon

import (
	"crypto/tls"
	"net/http"
	"os"
	"strings"
	"sync"

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
