package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// EnvTLSCA names the environment variable that thaw's client commands
// (and the SDK clients they build) read for a PEM bundle of the CA
// certificates to trust when they reach the tier over https (default: the
// system's roots).
const EnvTLSCA = "THAW_TLS_CA"

// ListenerTLS is the `tls:` section of thaw server, thaw coordinator and
// thaw tablet. With CertFile and KeyFile the process's listener speaks
// HTTPS only (HTTP/1.1 and HTTP/2, TLS 1.2 or later) and it advertises
// https:// addresses; CAFile is the PEM bundle the process's own clients
// trust when they reach other thaw processes (coordinator ↔ tablet
// servers; default: the system's roots). Certificates are read at start.
type ListenerTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
}

// validate checks that the section, when present, names a key pair.
func (t *ListenerTLS) validate() error {
	if t == nil {
		return nil
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return errors.New("tls: cert_file and key_file are required (the listener serves HTTPS)")
	}
	return nil
}

// Scheme is the URL scheme and separator of the listener's addresses,
// "http://" or (with the section) "https://".
func (t *ListenerTLS) Scheme() string {
	if t == nil {
		return "http://"
	}
	return "https://"
}

// load reads the key pair and the CA bundle: the listener's config and
// the config of the process's clients (nil fields without the section).
func (t *ListenerTLS) load() (server, client *tls.Config, err error) {
	if t == nil {
		return nil, nil, nil
	}
	pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("daemon: tls: %w", err)
	}
	if client, err = ClientTLS(t.CAFile); err != nil {
		return nil, nil, err
	}
	if client == nil {
		client = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, client, nil
}

// ClientTLS is the TLS configuration of a client that trusts the PEM
// bundle caFile, or nil (the system's roots) when caFile is "".
func ClientTLS(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("daemon: tls ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("daemon: tls ca_file %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// ClientTLSFromEnv is ClientTLS of $THAW_TLS_CA.
func ClientTLSFromEnv() (*tls.Config, error) {
	tc, err := ClientTLS(os.Getenv(EnvTLSCA))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvTLSCA, err)
	}
	return tc, nil
}
