package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"
)

// EnvTLSCA names the environment variable that thaw's client commands
// (and the SDK clients they build) read for a PEM bundle of the CA
// certificates to trust when they reach the tier over https (default: the
// system's roots).
const EnvTLSCA = "THAW_TLS_CA"

// EnvTLSCert and EnvTLSKey name the environment variables of the client
// certificate and key (PEM files) that client commands present to a tier
// that requires client certificates (tls.client_ca_file). Both or neither.
const (
	EnvTLSCert = "THAW_TLS_CERT"
	EnvTLSKey  = "THAW_TLS_KEY"
)

// ListenerTLS is the `tls:` section of thaw server, thaw coordinator and
// thaw tablet. With CertFile and KeyFile the process's listener speaks
// HTTPS only (HTTP/1.1 and HTTP/2, TLS 1.2 or later) and it advertises
// https:// addresses; CAFile is the PEM bundle the process's own clients
// trust when they reach other thaw processes (coordinator ↔ tablet
// servers; default: the system's roots). The key pair is read at start and
// again when its files change (certReloader); the CA bundles at start.
//
// ClientCAFile turns on mutual TLS: every request but /healthz and
// /readyz must come with a client certificate that a CA of this bundle
// signed (else 401, which RPC clients see as unauthenticated), and the
// process's own clients present the listener's certificate (which then
// needs the clientAuth extended key usage, or none).
type ListenerTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	CAFile       string `yaml:"ca_file"`
	ClientCAFile string `yaml:"client_ca_file"`
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

// coordinatorAddress is what a coordinator listening at host:port
// publishes: host:port itself without TLS (readers take it as http://, as
// before TLS existed), the https:// URL with it.
func (t *ListenerTLS) coordinatorAddress(hostPort string) string {
	if t == nil {
		return hostPort
	}
	return t.Scheme() + hostPort
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
	server = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if t.ClientCAFile != "" {
		if server.ClientCAs, err = readPool(t.ClientCAFile, "tls.client_ca_file"); err != nil {
			return nil, nil, fmt.Errorf("daemon: %w", err)
		}
		// Verified when given; requireClientCert refuses requests
		// without one (but the health probes).
		server.ClientAuth = tls.VerifyClientCertIfGiven
		client.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.get(nil) }
	}
	return server, client, nil
}

// requireClientCert wraps the handler of a listener with mutual TLS: a
// request without a verified client certificate gets 401, except the
// health probes (load balancers and kubelets present none).
func requireClientCert(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathHealthz && r.URL.Path != PathReadyz && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			http.Error(w, "a client certificate is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// wrap is requireClientCert when the section requires client certificates.
func (t *ListenerTLS) wrap(h http.Handler) http.Handler {
	if t == nil || t.ClientCAFile == "" {
		return h
	}
	return requireClientCert(h)
}

// readPool reads a PEM bundle of certificates; key names the config key
// (or variable) in errors.
func readPool(file, key string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", key, file)
	}
	return pool, nil
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
	pool, err := readPool(caFile, "tls ca_file")
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// ClientTLSFiles is ClientTLS presenting the client certificate of
// certFile and keyFile when both are set (for a tier that requires client
// certificates); one without the other is an error.
func ClientTLSFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	tc, err := ClientTLS(caFile)
	if err != nil || (certFile == "" && keyFile == "") {
		return tc, err
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("daemon: tls: a client certificate needs both its certificate and its key")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("daemon: tls client certificate: %w", err)
	}
	if tc == nil {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tc.Certificates = []tls.Certificate{pair}
	return tc, nil
}

// ClientTLSFromEnv is ClientTLSFiles of $THAW_TLS_CA, $THAW_TLS_CERT and
// $THAW_TLS_KEY.
func ClientTLSFromEnv() (*tls.Config, error) {
	tc, err := ClientTLSFiles(os.Getenv(EnvTLSCA), os.Getenv(EnvTLSCert), os.Getenv(EnvTLSKey))
	if err != nil {
		return nil, fmt.Errorf("%s, %s, %s: %w", EnvTLSCA, EnvTLSCert, EnvTLSKey, err)
	}
	return tc, nil
}
