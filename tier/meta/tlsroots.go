package meta

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
)

// rootsCreds are the gRPC transport credentials of an etcd client whose
// CA bundle may change while it runs: each new connection verifies etcd
// against the bundle roots returns at its handshake (gRPC names the
// dialled host, so an IP address is still checked against the
// certificate's IP addresses). Established connections keep the bundle
// they were verified with.
type rootsCreds struct {
	tls   *tls.Config
	roots func() *x509.CertPool
}

// now is gRPC's TLS credentials over tls with the bundle as it is now.
func (c *rootsCreds) now() credentials.TransportCredentials {
	cfg := c.tls.Clone()
	cfg.RootCAs = c.roots()
	return credentials.NewTLS(cfg)
}

func (c *rootsCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.now().ClientHandshake(ctx, authority, raw)
}

func (c *rootsCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("meta: etcd client credentials do not serve")
}

func (c *rootsCreds) Info() credentials.ProtocolInfo { return c.now().Info() }

func (c *rootsCreds) Clone() credentials.TransportCredentials {
	return &rootsCreds{tls: c.tls.Clone(), roots: c.roots}
}

// OverrideServerName is gRPC's deprecated override, kept for the
// interface.
func (c *rootsCreds) OverrideServerName(name string) error {
	c.tls.ServerName = name
	return nil
}

// withRoots is tc verifying servers against roots() as it is now (tc
// itself when roots is nil).
func withRoots(tc *tls.Config, roots func() *x509.CertPool) *tls.Config {
	if tc == nil || roots == nil {
		return tc
	}
	c := tc.Clone()
	c.RootCAs = roots()
	return c
}
