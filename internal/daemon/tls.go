package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
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
// servers; default: the system's roots). The key pair is read at start and
// again when its files change (certReloader); the CA bundle at start.
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
// The listener picks up a renewed key pair by itself (certReloader); log
// receives the reloads and the failed ones.
func (t *ListenerTLS) load(log *slog.Logger) (server, client *tls.Config, err error) {
	if t == nil {
		return nil, nil, nil
	}
	r, err := newCertReloader(t.CertFile, t.KeyFile, log)
	if err != nil {
		return nil, nil, err
	}
	if client, err = ClientTLS(t.CAFile); err != nil {
		return nil, nil, err
	}
	if client == nil {
		client = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}, client, nil
}

// certCheckInterval is how often, at most, a handshake looks whether the
// certificate or key file changed.
const certCheckInterval = time.Second

// certReloader serves a listener's key pair and reloads it when its files
// change (a renewal by cert-manager, certbot or an operator): a handshake
// at least certCheckInterval after the last look stats both files, and
// when either changed (modification time or size) loads the pair again. A
// pair that does not load (a renewal half written, a key that does not
// match) is logged and the previous one kept, and loading is tried again
// at the next look, so connections never fail because of a renewal.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	pair    *tls.Certificate
	stamp   [2]fileStamp // of the files the pair was loaded from
	failed  [2]fileStamp // of the files a load last failed on
	checked time.Time
}

// fileStamp is what tells a changed file: its modification time and size.
type fileStamp struct {
	mod  time.Time
	size int64
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	stamps, err := r.stamps()
	if err == nil {
		err = r.load(stamps)
	}
	if err != nil {
		return nil, fmt.Errorf("daemon: tls: %w", err)
	}
	return r, nil
}

func (r *certReloader) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{fi.ModTime(), fi.Size()}
	}
	return out, nil
}

// load reads the pair; the caller holds mu (or owns r).
func (r *certReloader) load(stamps [2]fileStamp) error {
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	r.pair, r.stamp, r.checked = &pair, stamps, time.Now()
	return nil
}

// get is tls.Config.GetCertificate.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < certCheckInterval {
		return r.pair, nil
	}
	r.checked = time.Now()
	stamps, err := r.stamps()
	if err != nil || stamps == r.stamp || stamps == r.failed {
		return r.pair, nil // a file missing for a moment keeps the pair too
	}
	if err := r.load(stamps); err != nil {
		r.failed = stamps
		r.log.Warn("tls: the renewed certificate does not load; serving the previous one", "cert_file", r.certFile, "key_file", r.keyFile, "err", err)
		return r.pair, nil
	}
	r.log.Info("tls: certificate reloaded", "cert_file", r.certFile, "not_after", r.pair.Leaf.NotAfter)
	return r.pair, nil
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
