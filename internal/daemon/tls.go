package daemon

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
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
// servers; default: the system's roots). The key pair, ClientCAFile and
// CAFile are read at start and again when their files change (reloader;
// see clientTLS for which clients follow a changed CAFile).
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
// The listener picks up a renewed key pair and a changed client CA bundle
// by itself (reloader); log receives the reloads and the failed ones.
func (t *ListenerTLS) load(log *slog.Logger) (server *tls.Config, client *clientConfig, err error) {
	if t == nil {
		return nil, nil, nil
	}
	r, err := newCertReloader(t.CertFile, t.KeyFile, log)
	if err != nil {
		return nil, nil, fmt.Errorf("daemon: tls: %w", err)
	}
	if client, err = clientTLS(t.CAFile, "tls.ca_file", "", "", log); err != nil {
		return nil, nil, err
	}
	server = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.get(), nil }}
	if t.ClientCAFile != "" {
		cas, err := newPoolReloader(t.ClientCAFile, "tls.client_ca_file", log)
		if err != nil {
			return nil, nil, err
		}
		// Asked for, and verified when given against the bundle as it is
		// now (also on resumed sessions); requireClientCert refuses
		// requests without one (but the health probes).
		server.ClientAuth = tls.RequestClientCert
		server.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil
			}
			return verifyClient(cas, cs.PeerCertificates)
		}
		client.tls.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.get(), nil }
	}
	return server, client, nil
}

// requireClientCert wraps the handler of a listener with mutual TLS: a
// request without a client certificate gets 401, except the health probes
// (load balancers and kubelets present none). A certificate it sees was
// verified in the handshake (load's VerifyConnection fails the handshake
// otherwise).
func requireClientCert(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathHealthz && r.URL.Path != PathReadyz && (r.TLS == nil || len(r.TLS.PeerCertificates) == 0) {
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

// certCheckInterval is how often, at most, a handshake looks whether a
// certificate, key or CA bundle file changed.
const certCheckInterval = time.Second

// reloader serves a value loaded from files — a listener's key pair, a CA
// bundle — and loads it again when they change (a renewal by cert-manager,
// certbot or an operator): a handshake at least certCheckInterval after the
// last look reads the files (a few KiB), and when their contents changed
// loads the value again. Contents, not modification times and sizes: a
// renewal in the same clock tick as the previous write, to a file of the
// same size, is a change too. A value that does not load (a renewal half
// written, a key that does not match) is logged and the previous one kept,
// and loading is tried again at the next look, so connections never fail
// because of a renewal.
type reloader[T any] struct {
	files  []string
	load   func() (T, error)
	loaded func(T)     // logs a reload
	failed func(error) // logs a reload that did not load

	mu      sync.Mutex
	val     T
	digest  [sha256.Size]byte // of the files val was loaded from
	bad     [sha256.Size]byte // of the files a load last failed on (zero: none)
	checked time.Time
}

// newReloader loads the value once; an error there (load's own, which
// names the file) is the caller's to report (nothing to fall back on).
func newReloader[T any](files []string, load func() (T, error), loaded func(T), failed func(error)) (*reloader[T], error) {
	r := &reloader[T]{files: files, load: load, loaded: loaded, failed: failed}
	// The digest first: a file rewritten between the two reads then shows
	// as a changed digest at the next get, which loads it. (The other
	// order kept the old value under the new digest until the next edit.)
	digest, derr := r.read()
	val, err := load()
	if err != nil {
		return nil, err // load's error names the setting
	}
	if derr != nil {
		return nil, derr
	}
	r.val, r.digest, r.checked = val, digest, time.Now()
	return r, nil
}

// read returns the SHA-256 of the files' contents, each preceded by its
// length.
func (r *reloader[T]) read() ([sha256.Size]byte, error) {
	h := sha256.New()
	for _, f := range r.files {
		b, err := os.ReadFile(f)
		if err != nil {
			return [sha256.Size]byte{}, err
		}
		_ = binary.Write(h, binary.BigEndian, int64(len(b)))
		h.Write(b)
	}
	return [sha256.Size]byte(h.Sum(nil)), nil
}

// get returns the value, loaded again first if a look is due and a file
// changed.
func (r *reloader[T]) get() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < certCheckInterval {
		return r.val
	}
	r.checked = time.Now()
	digest, err := r.read()
	if err != nil || digest == r.digest || digest == r.bad {
		return r.val // a file missing for a moment keeps the value too
	}
	v, err := r.load()
	if err != nil {
		r.bad = digest
		r.failed(err)
		return r.val
	}
	r.val, r.digest, r.bad = v, digest, [sha256.Size]byte{}
	r.loaded(v)
	return r.val
}

// newCertReloader serves the key pair of certFile and keyFile.
func newCertReloader(certFile, keyFile string, log *slog.Logger) (*reloader[*tls.Certificate], error) {
	return newReloader([]string{certFile, keyFile},
		func() (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			return &pair, err
		},
		func(pair *tls.Certificate) {
			log.Info("tls: certificate reloaded", "cert_file", certFile, "not_after", pair.Leaf.NotAfter)
		},
		func(err error) {
			log.Warn("tls: the renewed certificate does not load; serving the previous one", "cert_file", certFile, "key_file", keyFile, "err", err)
		})
}

// newPoolReloader serves the CA bundle of file; key names its config key.
func newPoolReloader(file, key string, log *slog.Logger) (*reloader[*x509.CertPool], error) {
	r, err := newReloader([]string{file},
		func() (*x509.CertPool, error) { return readPool(file, key) },
		func(*x509.CertPool) { log.Info("tls: CA bundle reloaded", "file", file) },
		func(err error) {
			log.Warn("tls: the changed CA bundle does not load; trusting the previous one", "file", file, "err", err)
		})
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	return r, nil
}

// verifyClient verifies a client's certificate chain against the bundle
// roots serves now, as Go's own server verification does with a fixed
// ClientCAs (chain to a root, validity, clientAuth usage; no name).
func verifyClient(roots *reloader[*x509.CertPool], certs []*x509.Certificate) error {
	if len(certs) == 0 {
		return errors.New("tls: the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots.get(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err
}

// clientConfig is the TLS configuration of a process's own clients.
type clientConfig struct {
	// tls is the configuration with the CA bundle as read at start in
	// RootCAs (nil RootCAs: the system's roots), for clients that take a
	// fixed configuration (client commands') and as the base of those
	// that follow roots (the tier's RPC clients, etcd's).
	tls *tls.Config
	// roots serves the CA bundle as it is now, read again when its file
	// changes; nil without a bundle file.
	roots *reloader[*x509.CertPool]
}

// TLS is the fixed configuration (nil for a nil c).
func (c *clientConfig) TLS() *tls.Config {
	if c == nil {
		return nil
	}
	return c.tls
}

// clientTLS is the configuration of the process's own clients (and,
// through ClientTLSFiles, of client commands). The client key pair and the
// CA bundle caFile (caKey names its config key in errors) are read again
// when their files change (reloader; log receives the reloads): the key
// pair by every client, the bundle by the tier's RPC clients
// (newHTTPClient) and etcd's (connectEtcd), which verify each new
// connection's server against the bundle as it is at the handshake.
// Client commands, which take the fixed configuration, trust the bundle
// as read at start.
func clientTLS(caFile, caKey, certFile, keyFile string, log *slog.Logger) (*clientConfig, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("daemon: tls: a client certificate needs both its certificate and its key")
	}
	c := &clientConfig{tls: &tls.Config{MinVersion: tls.VersionTLS12}}
	if caFile != "" {
		roots, err := newPoolReloader(caFile, caKey, log)
		if err != nil {
			return nil, err
		}
		c.roots, c.tls.RootCAs = roots, roots.get()
	}
	if certFile != "" {
		pair, err := newCertReloader(certFile, keyFile, log)
		if err != nil {
			return nil, fmt.Errorf("daemon: tls client certificate: %w", err)
		}
		c.tls.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get(), nil }
	}
	return c, nil
}

// ClientTLS is the TLS configuration of a client that trusts the PEM
// bundle caFile, or nil (the system's roots) when caFile is "".
func ClientTLS(caFile string) (*tls.Config, error) { return ClientTLSFiles(caFile, "", "") }

// ClientTLSFiles is ClientTLS presenting the client certificate of
// certFile and keyFile when both are set (for a tier that requires client
// certificates); one without the other is an error. Nil when all three
// are "".
func ClientTLSFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	c, err := clientTLS(caFile, "tls ca_file", certFile, keyFile, slog.New(slog.DiscardHandler))
	return c.TLS(), err
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
